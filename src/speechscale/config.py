"""Typed configuration: dataclasses loaded from YAML plus `key=value` overrides, validated up front.

    >>> cfg = load_config("configs/demo.yaml", ["trainer.max_steps=10", "model.name=ds2-tiny"])  # doctest: +SKIP

Configs are plain data: `to_dict(cfg)` is what a checkpoint stores, `from_dict` rebuilds it.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad config file, key or value; the message says which and what to do."""


@dataclass
class FeatureConfig:
    kind: str = "spectrogram"          # spectrogram (DS2 log-linear) | logmel
    sample_rate: int = 16000           # audio is resampled to this rate
    window_ms: float = 20.0            # analysis window (Hamming)
    hop_ms: float = 10.0               # frame shift
    n_mels: int = 80                   # only for kind=logmel
    normalize: str = "utterance"       # per utterance: utterance (one mean/std, DS2) | feature (per bin, CMVN) | none
    remove_dc: bool = False            # subtract the waveform's mean first (some recorders add a DC offset)
    preemphasis: float = 0.0           # x[t] - a * x[t-1] before the STFT (0 = off; Kaldi uses 0.97)


@dataclass
class TextConfig:
    alphabet: str = "abcdefghijklmnopqrstuvwxyz' "   # CTC blank is index 0, these follow from 1
    digits: str = "spell"              # spell (12 -> twelve) | drop | keep (then add digits to the alphabet)


@dataclass
class AugmentConfig:
    speed: list[float] = field(default_factory=list)  # e.g. [0.9, 1.1]: uniform speed factor range; [] = off
    word_crop: float = 0.0             # probability of cutting an utterance down to a random run of its words,
                                       # where pauses split it into exactly one segment per word (else no cut);
                                       # for connected-word corpora (yesno, digit strings)
    word_crop_floor_db: float = -18.0  # a 20 ms frame is speech when within this many dB of the loudest
    word_crop_min_pause: float = 0.1   # silences shorter than this (s) do not separate words
    trim_silence: float = 0.0          # probability of cutting leading and trailing silence to a random part of
                                       # itself (speakers whose clips are cut tight; for isolated-word corpora)
    trim_floor_db: float = -20.0       # a 10 ms frame is sound when within this many dB of the loudest
    gain_db: float = 0.0               # random gain in [-gain_db, +gain_db]
    noise_snr_db: list[float] = field(default_factory=list)  # e.g. [20, 40]: white noise at this SNR range
    freq_warp: float = 0.0             # VTLP-style: stretch the frequency axis by a factor in [1 - w, 1 + w]
                                       # (formants move, duration does not; 0 = off)
    freq_masks: int = 0                # SpecAugment frequency masks per utterance
    freq_mask_width: int = 10          # max width in feature bins
    time_masks: int = 0                # SpecAugment time masks per utterance
    time_mask_width: int = 20          # max width in frames (also capped at 20 % of the utterance)


@dataclass
class DataConfig:
    train_manifest: str = ""           # JSONL with audio_filepath, duration, text
    val_manifest: str = ""             # JSONL used for validation WER/CER and the best checkpoint
    batch_seconds: float = 60.0        # total audio seconds per batch (duration bucketing)
    max_batch_size: int = 64           # cap on utterances per batch
    num_buckets: int = 10              # duration buckets
    max_duration: float = 30.0         # longer utterances are skipped and counted
    min_duration: float = 0.05         # shorter ones too
    sortagrad: bool = True             # first epoch shortest-first
    num_workers: int = 0               # DataLoader worker processes (0 = in the main process)
    cache_features: bool = False       # keep un-augmented audio in memory after the first epoch (small corpora)
    filter: dict[str, Any] = field(default_factory=dict)      # keep only lines whose key equals (or is in) the value
    val_filter: dict[str, Any] = field(default_factory=dict)  # the same for the validation manifest
    train_slice: list[int] = field(default_factory=list)  # [start] or [start, stop] over manifest lines; [] = all
    val_slice: list[int] = field(default_factory=list)    # the same for validation (e.g. yesno: [0, 31] / [31])


@dataclass
class ModelConfig:
    name: str = "ds2-tiny"             # a registry preset: ds2-tiny|-small|-large|-streaming,
                                       # wav2letter+[-tiny], lstm-ctc[-tiny]
    overrides: dict[str, Any] = field(default_factory=dict)  # preset fields to change, e.g. {rnn_hidden: 256}


@dataclass
class OptimConfig:
    name: str = "adamw"                # adamw | sgd (Nesterov momentum)
    lr: float = 1e-3
    weight_decay: float = 1e-2
    momentum: float = 0.9              # sgd only
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])  # adamw only
    warmup_steps: int = 100            # linear warm-up from 0
    schedule: str = "cosine"           # after warm-up: cosine | linear | constant | exponential
    min_lr_ratio: float = 0.05         # final lr as a fraction of lr (cosine/linear)
    decay_rate: float = 0.99           # exponential: per-epoch-equivalent factor of DS2 (per step: rate**(1/steps_per_epoch))
    grad_clip: float = 5.0             # max global gradient norm (0 = off)


@dataclass
class TrainerConfig:
    out_dir: str = "runs/default"      # checkpoints/, metrics.jsonl, tensorboard/; or an fsspec URL (s3://bucket/run)
    log_dir: str = ""                  # local folder for logs when out_dir is a URL ("" = runs/<its last part>)
    max_epochs: int = 10
    max_steps: int = 0                 # stop after this many optimizer steps (0 = no limit)
    max_minutes: float = 0.0           # stop after this much wall time (0 = no limit); validates and saves first
    seed: int = 1234
    log_every: int = 10                # steps between log lines / TensorBoard points
    val_every_steps: int = 0           # validate also every N steps (0 = only at epoch ends)
    threads: int = 0                   # torch intra-op threads (0 = torch's default)
    progress: bool = True              # show a progress bar
    deterministic: bool = True         # torch.use_deterministic_algorithms where it is cheap
    resume: str = ""                   # "" | auto | path to a checkpoint: continue from it
    target_wer: float = -1.0           # stop once validation WER <= this (-1 = never)
    device: str = "auto"               # auto (first GPU, else CPU) | cpu | cuda | cuda:N
    precision: str = "auto"            # auto (bf16 on GPUs that support it, else fp32) | fp32 | bf16 | fp16
    loss_scale_init: float = 65536.0   # fp16: initial dynamic loss scale
    min_loss_scale: float = 1e-5       # fp16 watchdog: stop the run when the scale falls below this
    prescan: bool = False              # before training, run forward+backward on the worst-case batch, report memory
    memory_budget_mb: float = 0.0      # pre-scan: fail when its peak exceeds this (0 = only a real OOM fails)
    compile: bool = False              # torch.compile the model's forward (meant for the conv models)
    grad_accum: int = 1                # batches (micro-batches) per optimizer step; DDP syncs on the last only
    checkpoint_every_steps: int = 0    # also write a checkpoint every N steps, without validating (0 = off)
    keep_checkpoints: int = 3          # step-N.pt files kept (last.pt and the `latest` pointer always)
    trace_samples: bool = False        # log each step's sample ids per rank to OUT/samples-rankR.jsonl (tests)


@dataclass
class DistributedConfig:
    strategy: str = "allreduce"        # under torchrun: allreduce (DDP; gloo on CPU, nccl on GPU)
    scale_lr: bool = False             # multiply the learning rate by the number of ranks (linear scaling rule)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    text: TextConfig = field(default_factory=TextConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass config as nested plain dicts/lists (safe for `weights_only` checkpoints and YAML)."""
    return dataclasses.asdict(obj)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check/convert `value` to the annotated type `tp`, or raise ConfigError naming `where`."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (list,):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (inner,) = typing.get_args(tp)
        return [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin in (dict,):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} does not match {tp}")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{where}: expected null, got {value!r}")
    return value


def from_dict(cls: type, data: dict[str, Any], where: str = "config") -> Any:
    """Build dataclass `cls` from plain data; unknown keys and wrong types raise ConfigError."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(names))}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where != "config" else k) for k, v in data.items()}
    return cls(**kwargs)


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    node = tree
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted}: {p} is not a section")
    node[leaf] = value


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b=value` strings (value parsed as YAML) to a nested dict."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. trainer.max_steps=100")
        key, raw = item.split("=", 1)
        if not key.strip():
            raise ConfigError(f"override {item!r}: empty key")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({str(e).splitlines()[0]}); "
                              f"quote the whole argument if it holds spaces") from e
        _set_path(tree, key.strip(), value)
    return tree


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML recipe, apply overrides, validate; raises ConfigError with one clear line."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            tree = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from e
        if not isinstance(tree, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
    tree = apply_overrides(tree, overrides or [])
    cfg = from_dict(Config, tree)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Check values that types alone do not catch."""
    checks = [
        (cfg.features.kind in ("spectrogram", "logmel"), "features.kind must be spectrogram or logmel"),
        (cfg.features.sample_rate >= 4000, "features.sample_rate must be at least 4000"),
        (0 < cfg.features.hop_ms <= cfg.features.window_ms, "features.hop_ms must be in (0, window_ms]"),
        (cfg.features.normalize in ("utterance", "feature", "none"),
         "features.normalize must be utterance, feature or none"),
        (0.0 <= cfg.features.preemphasis < 1.0, "features.preemphasis must be in [0, 1)"),
        (cfg.text.digits in ("spell", "drop", "keep"), "text.digits must be spell, drop or keep"),
        (len(set(cfg.text.alphabet)) == len(cfg.text.alphabet) and cfg.text.alphabet,
         "text.alphabet must be non-empty without repeated characters"),
        (cfg.data.batch_seconds > 0, "data.batch_seconds must be positive"),
        (cfg.data.max_batch_size > 0, "data.max_batch_size must be positive"),
        (cfg.data.num_buckets > 0, "data.num_buckets must be positive"),
        (cfg.optim.name in ("adamw", "sgd"), "optim.name must be adamw or sgd"),
        (cfg.optim.lr > 0, "optim.lr must be positive"),
        (cfg.optim.schedule in ("cosine", "linear", "constant", "exponential"),
         "optim.schedule must be cosine, linear, constant or exponential"),
        (cfg.trainer.max_epochs > 0 or cfg.trainer.max_steps > 0, "set trainer.max_epochs or trainer.max_steps"),
        (len(cfg.data.train_slice) <= 2 and len(cfg.data.val_slice) <= 2,
         "data.train_slice/val_slice must be [], [start] or [start, stop]"),
        (cfg.trainer.precision in ("auto", "fp32", "bf16", "fp16"),
         "trainer.precision must be auto, fp32, bf16 or fp16"),
        (cfg.trainer.device == "auto" or cfg.trainer.device.split(":")[0] in ("cpu", "cuda"),
         "trainer.device must be auto, cpu, cuda or cuda:N"),
        (cfg.trainer.loss_scale_init > 0 and cfg.trainer.min_loss_scale > 0,
         "trainer.loss_scale_init and trainer.min_loss_scale must be positive"),
        (cfg.distributed.strategy in ("allreduce",), "distributed.strategy must be allreduce"),
        (cfg.trainer.keep_checkpoints >= 1, "trainer.keep_checkpoints must be at least 1"),
        (cfg.trainer.grad_accum >= 1, "trainer.grad_accum must be at least 1"),
        (0.0 <= cfg.augment.word_crop <= 1.0, "augment.word_crop is a probability in [0, 1]"),
        (0.0 <= cfg.augment.trim_silence <= 1.0, "augment.trim_silence is a probability in [0, 1]"),
        (0.0 <= cfg.augment.freq_warp < 0.5, "augment.freq_warp must be in [0, 0.5)"),
        (len(cfg.augment.speed) in (0, 2), "augment.speed must be [] or [low, high]"),
        (len(cfg.augment.noise_snr_db) in (0, 2), "augment.noise_snr_db must be [] or [low, high]"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)
    from .models.registry import check_model_name  # late import: models import config

    check_model_name(cfg.model.name)
