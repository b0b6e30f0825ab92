"""The recipe schema: typed dataclasses read from YAML plus `key=value` overrides, keys and types checked.

    >>> cfg = load_config(None, ["trainer.max_steps=10", "model.name=ds2-tiny"])
    >>> cfg.trainer.max_steps
    10

Configs are plain data: `to_dict(cfg)` is what a checkpoint stores, `from_dict` rebuilds it. This module is
the ground floor and imports no component; `recipe.load_recipe` also checks values against the components.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A bad config file, key or value; the message says which and what to do."""


@dataclass
class FeatureConfig:
    kind: str = "spectrogram"          # spectrogram (DS2 log-linear) | logmel
    sample_rate: int = 16000           # audio is resampled to this rate
    window_ms: float = 20.0            # analysis window (Hamming)
    hop_ms: float = 10.0               # frame shift
    n_mels: int = 80                   # only for kind=logmel
    normalize: str = "auto"            # utterance (one mean/std per utterance, DS2) | feature (per bin over the
                                       # utterance, CMVN) | speaker (per bin over each manifest speaker's
                                       # utterances) | global (per bin, the training set's: streams) | running
                                       # (global, its mean updated by the utterance's frames so far: streams) |
                                       # none | auto (global for a model that streams, else utterance)
    stream_normalize: str = ""         # how a stream normalizes where `normalize` needs the whole utterance: global
                                       # | running | none ("": as `normalize`); deepspeech.pytorch's imported models
                                       # stream with global statistics from `speechscale import ... --stats`
    global_stats: list[float] = field(default_factory=list)  # normalize=global, running; written by training: the
                                       # training set's per-bin mean, then std (2 x features values)
    remove_dc: bool = False            # subtract the waveform's mean first (some recorders add a DC offset)
    window_periodic: bool = False      # a periodic (DFT-even) Hamming window, as librosa's window="hamming" makes it
                                       # (deepspeech.pytorch); false: the symmetric one
    stft_pad: str = "reflect"          # the signal's ends, half a window each: reflect (torch.stft) | zeros (librosa
                                       # 0.9, deepspeech.pytorch)
    normalize_eps: float = 1e-5        # added to the deviation a normalization divides by (deepspeech.pytorch: 0)
    preemphasis: float = 0.0           # x[t] - a * x[t-1] before the STFT (0 = off; Kaldi uses 0.97)
    speaker_prior: list[float] = field(default_factory=list)  # normalize=speaker; written by training: the
                                       # training speakers' pooled per-bin mean, then std (2 x features values)
    speaker_prior_frames: float = 400.0  # a file without its speaker's statistics (transcribe, serve) shrinks its
                                       # own toward speaker_prior, weighted as this many frames (0 = its own alone)
    running_prior_frames: float = 10.0  # normalize=running: the training set's mean counts as so many of the
                                       # utterance's frames (fewer: a stream follows its own level sooner)
    device: str = "loader"             # training features: in the loader's workers | cuda | cpu (in the step)


@dataclass
class TextConfig:
    alphabet: str = "abcdefghijklmnopqrstuvwxyz' "   # CTC blank is index 0, these follow from 1; "auto": the
                                       # characters of the training transcripts (the checkpoints keep them)
    digits: str = "spell"              # spell (12 -> twelve) | drop | keep (then add digits to the alphabet)
    digits_language: str = "en"        # the language numbers, money and times are read out in (num2words' code: en, de, ...)
    pieces: int = 0                    # 0: the alphabet's characters are the output units; N: up to N word pieces
                                       # learned from the training transcripts (a unigram model) before the first step
    piece_list: list[str] = field(default_factory=list)  # text.pieces; written by training: the pieces ("▁"
                                       # starts a word), spelled in text.alphabet; given, they are used as they are
    piece_scores: list[float] = field(default_factory=list)  # text.pieces; written by training: each piece's score


@dataclass
class AugmentConfig:
    speed: list[float] = field(default_factory=list)  # e.g. [0.9, 1.1]: uniform speed factor range; [] = off
    tempo: list[float] = field(default_factory=list)  # e.g. [0.85, 1.15]: tempo factor range, pitch kept (WSOLA,
                                       # like sox `tempo`; applied before speed); [] = off
    word_crop: float = 0.0             # probability of cutting an utterance down to a random run of its words where
                                       # pauses split it into one segment per word (connected-word corpora: yesno)
    word_crop_edges: float = 0.25      # probability a crop keeps a random part of the file's lead and trail (else compact)
    word_crop_floor_db: float = -18.0  # a 20 ms frame is speech when within this many dB of the loudest
    word_crop_min_pause: float = 0.1   # silences shorter than this (s) do not separate words
    trim_silence: float = 0.0          # probability of cutting leading and trailing silence to a random part of
                                       # itself (speakers whose clips are cut tight; for isolated-word corpora)
    trim_floor_db: float = -20.0       # a 10 ms frame is sound when within this many dB of the loudest
    silence: float = 0.0               # probability of adding silence before and after an utterance: a live
                                       # microphone's wait before speech, a recording's tail (corpora cut tight to
                                       # their speech, such as synthesized ones, otherwise never show a model silence)
    silence_max_s: float = 1.0         # the leading and the trailing silence each last up to this many seconds
    silence_floor_db: list[float] = field(default_factory=lambda: [-90.0, -40.0])  # white noise under the whole
                                       # utterance at a level (dBFS RMS) drawn in this range: the microphone's own
                                       # noise in the silence; [] = digital zeros
    gain_db: float = 0.0               # random gain in [-gain_db, +gain_db]
    channel_db: float = 0.0            # a random smooth frequency response (zero phase) whose gain stays within
                                       # +-channel_db dB: another microphone or room colour (0 = off)
    noise_snr_db: list[float] = field(default_factory=list)  # e.g. [20, 40]: white noise at this SNR range
    noise_manifest: str = ""           # JSONL of real noise recordings (audio_filepath): mixed in at an SNR drawn
    noise_manifest_snr_db: list[float] = field(default_factory=lambda: [5.0, 20.0])  # ... from this range (dB)
    noise_prob: float = 1.0            # ... to this fraction of utterances
    rir_manifest: str = ""             # JSONL of room impulse responses: speech is convolved with one (length
    rir_prob: float = 0.5              # and alignment kept) in this fraction of utterances
    freq_warp: float = 0.0             # VTLP-style: stretch the frequency axis by a factor in [1 - w, 1 + w]
                                       # (formants move, duration does not; 0 = off)
    freq_masks: int = 0                # SpecAugment frequency masks per utterance
    freq_mask_width: int = 10          # max width in feature bins
    time_masks: int = 0                # SpecAugment time masks per utterance
    time_mask_width: int = 20          # max width in frames (also capped at 20 % of the utterance)


@dataclass
class DataConfig:
    root: str = ""                     # folder the relative data paths below (manifests, shard indexes, noise and
                                       # RIR manifests) are read from ("" = the current folder); a recipe that
                                       # says ??? needs it set, e.g. data.root=DIR of `speechscale data download`
    train_manifest: str = ""           # JSONL with audio_filepath, duration, text; or a shard index (index.jsonl
                                       # of `speechscale data shard`, a local path or fsspec URL): streamed
    val_manifest: str = ""             # JSONL (or shard index) used for validation WER/CER and the best checkpoint
    batch_seconds: float = 60.0        # total audio seconds per batch (duration bucketing)
    max_batch_size: int = 64           # cap on utterances per batch
    num_buckets: int = 10              # duration buckets
    max_duration: float = 30.0         # longer utterances are skipped and counted
    min_duration: float = 0.05         # shorter ones too
    sortagrad: bool = True             # first epoch shortest-first
    num_workers: int = 0               # DataLoader worker processes (0 = in the main process); a forkserver starts
                                       # them (a script that builds a Trainer needs `if __name__ == "__main__":`)
    cache_audio: bool = False          # keep un-augmented audio in memory after the first epoch (small corpora;
                                       # with num_workers > 0 the workers persist, each caching what it loaded)
    filter: dict[str, Any] = field(default_factory=dict)      # keep only lines whose key equals (or is in) the value
    val_filter: dict[str, Any] = field(default_factory=dict)  # the same for the validation manifest
    train_slice: list[int] = field(default_factory=list)  # [start] or [start, stop] over manifest lines; [] = all
    val_slice: list[int] = field(default_factory=list)    # the same for validation (e.g. yesno: [0, 31] / [31])
    mix: list[str] = field(default_factory=list)  # several training manifests (domains) instead of train_manifest
    mix_weights: list[float] = field(default_factory=list)  # one per domain; [] = in proportion to utterances
    mix_temperature: float = 1.0       # domain d is drawn with p ~ weight_d ** (1 / T); T > 1 flattens the shares
    shuffle_shards: int = 4            # shard streams: shards whose utterances are shuffled and bucketed together
    allow_external_shards: bool = False  # let a shard index name shards outside its own folder (absolute
                                       # paths, URLs, ..): only for indexes you trust
    fixed_shapes: int = 0              # pad batches to this many (batch, frames) shapes, same gradients (0 = off)
    max_unreadable_batches: int = 8    # stop the run (a checkpoint from before them written) after this many
                                       # batches in a row of which no utterance could be read: the data is gone
                                       # (a store down past its retries, expired credentials, an unmounted disk),
                                       # not a few bad files (0 = never: skip and count them)


@dataclass
class ModelConfig:
    name: str = "ds2-tiny"             # a registry preset: ds2-tiny|-small|-large|-streaming,
                                       # wav2letter+[-tiny], lstm-ctc[-tiny]
    overrides: dict[str, Any] = field(default_factory=dict)  # preset fields to change, e.g. {rnn_hidden: 256}


@dataclass
class OptimConfig:
    name: str = "adamw"                # adamw | sgd (Nesterov momentum)
    lr: float = 1e-3                   # peak learning rate (after warm-up)
    weight_decay: float = 1e-2         # decoupled weight decay (not on norms and biases)
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
    max_epochs: int = 10               # passes over the training data (0 = no limit: set max_steps)
    max_steps: int = 0                 # stop after this many optimizer steps (0 = no limit)
    max_minutes: float = 0.0           # stop after this much wall time (0 = no limit); validates and saves first
    seed: int = 1234                   # initial weights, data order and augmentation follow from it
    log_every: int = 10                # steps between log lines / TensorBoard points
    val_every_steps: int = 0           # validate also every N steps (0 = only at epoch ends)
    threads: int = 0                   # torch intra-op threads (0 = torch's default)
    progress: bool = True              # show a progress bar
    deterministic: bool = True         # torch.use_deterministic_algorithms where it is cheap
    resume: str = ""                   # "" | auto | a checkpoint, or a run's folder (its newest): continue from it
    init_from: str = ""                # a checkpoint (or a run's folder: its best.pt) whose weights start this run
                                       # (fine-tuning: a fresh optimizer, schedule and step count; the same model
                                       # and features; another alphabet keeps each shared symbol's output); resume
                                       # wins
    freeze: list[str] = field(default_factory=list)  # parameters that do not train, by name prefix (e.g.
                                       # [convs, conv_norms]: DS2's front end; a wrong one lists the model's parts);
                                       # norms' statistics still follow the data
    target_wer: float = -1.0           # stop once validation WER <= this (-1 = never)
    device: str = "auto"               # auto (first GPU, else CPU) | cpu | cuda | cuda:N
    precision: str = "auto"            # auto (bf16 on GPUs that support it, else fp32) | fp32 | bf16 | fp16
    loss_scale_init: float = 65536.0   # fp16: initial dynamic loss scale
    min_loss_scale: float = 1e-5       # fp16 watchdog: stop the run when the scale falls below this
    max_skipped_steps: int = 50        # stop the run when this many steps in a row were skipped for a non-finite
                                       # loss or gradient: it diverged, and training on changes nothing (0 = never)
    prescan: bool = False              # before training, run forward+backward on the worst-case batch, report memory
    memory_budget_mb: float = 0.0      # pre-scan: fail when its peak exceeds this (0 = only a real OOM fails)
    compile: bool = False              # torch.compile the model's forward (meant for the conv models)
    cuda_graphs: str | bool = "auto"   # auto (on a GPU) | on | off: CUDA graphs per batch shape (docs/training.md)
    activation_checkpointing: bool = False  # each block (conformer and wav2letter+ blocks, recurrent layers) keeps
    # only its inputs and runs again in the backward pass: less memory for a larger batch, each block's forward run
    # twice, the same gradients; not with CUDA graphs (auto turns them off)
    grad_accum: int = 1                # batches (micro-batches) per optimizer step; DDP syncs on the last only
    checkpoint_every_steps: int = 0    # also write a checkpoint every N steps, without validating (0 = off)
    checkpoint_every_minutes: float = 0.0  # also write one once this much wall time passed since the last (0 = off;
    # ranks agree at their log_every steps), as an interval independent of the hardware's step time
    keep_checkpoints: int = 3          # step-N.pt files kept (last.pt and the `latest` pointer always)
    trace_samples: bool = False        # log each step's sample ids per rank to OUT/samples-rankR.jsonl (tests)
    ema_decay: float = 0.0             # keep an exponential moving average of the weights (e.g. 0.999; 0 = off);
                                       # checkpoints carry it, `speechscale average --ema` writes it out


@dataclass
class ADPSGDConfig:
    variant: str = "fixed_ring"        # fixed_ring | random_ring: asynchronous, each learner at its own pace, a thread
                                       # averages with one neighbour per step; delay_by_one: lockstep, each step's
                                       # exchange hidden behind the next step (fastest when learners are equally fast)
    skip_after_s: float = 30.0         # rings: a neighbour that has not come to a round after this long is skipped
    timeout_s: float = 120.0           # an exchange (or any collective of the learners) that takes longer fails the
                                       # run, e.g. a partner that agreed and then stalled (SIGSTOP, a hung host)


@dataclass
class StragglerConfig:
    rank: int = -1                     # this rank is made slow (-1 = none)
    slowdown: float = 1.0              # ... taking this many times as long per step (sleeps; uses no CPU)


@dataclass
class DistributedConfig:
    strategy: str = "allreduce"        # under torchrun: allreduce (DDP; gloo on CPU, nccl on GPU) | adpsgd (gossip)
    scale_lr: bool = False             # multiply the learning rate by the number of ranks (linear scaling rule)
    timeout_s: float = 300.0           # allreduce: a collective that takes longer fails the run (a stuck node:
                                       # torchrun then restarts the group without it); first steps included
    adpsgd: ADPSGDConfig = field(default_factory=ADPSGDConfig)  # distributed.strategy=adpsgd only
    simulate_straggler: StragglerConfig = field(default_factory=StragglerConfig)  # {rank: R, slowdown: F}


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


# keys renamed after recipes and checkpoints were written with them: "section.old" -> "new" (still read)
RENAMED = {"data.cache_features": "cache_audio"}


def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    """A config tree with renamed keys under their new names (a copy; the new name wins if both are given)."""
    data = dict(data)
    for old, new in RENAMED.items():
        section, key = old.split(".")
        if isinstance(data.get(section), dict) and key in data[section]:
            part = dict(data[section])
            value = part.pop(key)
            part.setdefault(new, value)
            data[section] = part
            log.warning("config: %s is now %s.%s; reading it as that", old, section, new)
    return data


def from_dict(cls: type, data: dict[str, Any], where: str = "config") -> Any:
    """Build dataclass `cls` from plain data; unknown keys and wrong types raise ConfigError."""
    if cls is Config:
        data = _renamed(data)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(names))}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where != "config" else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise ConfigError(f"{where}: {e}") from None


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
            value = safe_yaml(raw, f"override {key.strip()}=...") if raw != "" else ""
        except ConfigError as e:
            hint = "; quote the whole argument if it holds spaces" if "not valid YAML" in str(e) else ""
            raise ConfigError(f"{str(e)[:300]}{hint}") from None
        _set_path(tree, key.strip(), value)
    return tree


# The recipes shipped in the package (`speechscale recipes`); `--config NAME` reads RECIPES / NAME.yaml
RECIPES = Path(__file__).resolve().parent / "recipes"
MISSING = "???"  # a value the recipe leaves to the user (OmegaConf's spelling): set it with key=value


def builtin_recipes() -> list[str]:
    """The names of the recipes shipped in the package, sorted."""
    return sorted(p.stem for p in RECIPES.glob("*.yaml") if not p.stem.startswith("_"))


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file: `name_or_path` itself when it is a file, else the built-in recipe of that name."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    builtin = RECIPES / f"{p.name.removesuffix('.yaml')}.yaml"
    if p.parent == Path(".") and builtin.is_file():
        return builtin
    raise ConfigError(f"config file not found: {p} (built-in recipes: {', '.join(builtin_recipes())}; "
                      f"`speechscale recipes` lists them)")


def _is_local_relative(path: str) -> bool:  # a path data.root applies to
    return bool(path) and "://" not in path and not Path(path).is_absolute()


def _under(root: str, path: str) -> str:
    """`path` read from `root`; as it is when empty, absolute, a URL or under root (a config read back is the same)."""
    if not _is_local_relative(path) or not root or Path(path).is_relative_to(root):
        return path
    return str(Path(root) / path)


def resolve_data_paths(cfg: Config) -> Config:
    """The data paths of `cfg` read from data.root (in place; returned); ConfigError when the recipe leaves
    data.root to the user (???) and a relative path needs it."""
    d, a = cfg.data, cfg.augment
    paths = {"data.train_manifest": d.train_manifest, "data.val_manifest": d.val_manifest,
             **{f"data.mix[{i}]": m for i, m in enumerate(d.mix)},
             "augment.noise_manifest": a.noise_manifest, "augment.rir_manifest": a.rir_manifest}
    if d.root == MISSING:
        needs = [f"{k}: {v}" for k, v in paths.items() if _is_local_relative(v)]
        if needs:
            raise ConfigError(f"data.root is not set: this recipe reads {', '.join(needs)} from it; add "
                              f"data.root=DIR (a folder holding them, e.g. the --out of `speechscale data download`)")
        return cfg
    root = d.root
    d.train_manifest, d.val_manifest = _under(root, d.train_manifest), _under(root, d.val_manifest)
    d.mix = [_under(root, m) for m in d.mix]
    a.noise_manifest, a.rir_manifest = _under(root, a.noise_manifest), _under(root, a.rir_manifest)
    return cfg


def _read_config_text(p: Path) -> str:
    """A config file's text, read only from a regular file and only up to MAX_YAML_CHARS (a FIFO or /dev/zero given
    as a config would block or never end)."""
    import os
    import stat

    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigError(f"{p}: cannot be read ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ConfigError(f"{p}: not a regular file; a config is read from a file")
        data = f.read(4 * MAX_YAML_CHARS + 1)
    if len(data) > 4 * MAX_YAML_CHARS:
        raise ConfigError(f"{p}: larger than a config may be ({MAX_YAML_CHARS} characters)")
    return data.decode("utf-8")


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML recipe (a file, or a built-in recipe's name) and apply overrides: keys and types are
    checked, relative data paths read from data.root, values are not checked (that is `recipe.load_recipe`,
    which knows every component's choices); raises ConfigError with one clear line."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = recipe_path(path)
        try:
            tree = safe_yaml(_read_config_text(p), str(p)) or {}
        except UnicodeDecodeError:
            raise ConfigError(f"{p}: not a YAML text file (a checkpoint is not a recipe; its run's config.json is: "
                              "--config RUN/config.json)") from None
        if not isinstance(tree, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
    tree = apply_overrides(tree, overrides or [])
    return resolve_data_paths(from_dict(Config, tree))


MAX_YAML_CHARS = 1 << 20   # a recipe is a few KB
MAX_YAML_NODES = 100_000   # values once its aliases are expanded
MAX_YAML_DEPTH = 64


def safe_yaml(text: str, where: str) -> Any:
    """`yaml.safe_load(text)` for text that may come from a stranger: its size, its nesting and what its aliases
    expand to are bounded before any value is built (nested aliases, "billion laughs", would otherwise be walked
    for minutes); a recursive alias is refused. ConfigError naming `where` in one line."""
    if len(text) > MAX_YAML_CHARS:
        raise ConfigError(f"{where}: {len(text)} characters, more than a config may have ({MAX_YAML_CHARS})")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to read") from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, where: str) -> None:
    """ConfigError when the node graph under `root`, aliases expanded, holds more than MAX_YAML_NODES values, nests
    deeper than MAX_YAML_DEPTH or refers to itself. Each node is sized once (memoized), so this is linear in the
    document however much its aliases expand."""
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) once known
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in size:
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if not done:
            if key in open_:
                raise ConfigError(f"{where}: an alias refers to a node that holds it (a recursive document)")
            open_.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        open_.discard(key)
        values = 1 + sum(size[id(c)][0] for c in children)
        depth = 1 + max((size[id(c)][1] for c in children), default=0)
        if values > MAX_YAML_NODES:
            raise ConfigError(f"{where}: its aliases expand to more than {MAX_YAML_NODES} values; refused")
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep; refused")
        size[key] = (values, depth)


def parse_json(text: str | bytes) -> Any:
    """`json.loads`, with a document nested too deeply for the parser raised as the ValueError a malformed one
    raises (json.loads raises RecursionError there: a line of "[[[[..." is no crash)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def finite_number(value: Any) -> bool:
    """An int or float that is finite (not NaN or an infinity, and not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    """One-line ConfigError when `value` is not one of `allowed` for config choice (or flag) `key`."""
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is unknown; choose one of {', '.join(allowed)}")
