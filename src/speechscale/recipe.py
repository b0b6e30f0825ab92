"""A recipe: the config as read (config.py) checked against the components that will run it.

    >>> cfg = load_recipe("configs/demo.yaml", ["trainer.max_steps=10"])
    >>> load_recipe(None, ["optim.name=adam"])
    Traceback (most recent call last):
    ...
    speechscale.config.ConfigError: optim.name='adam' is unknown; choose one of adamw, sgd

Each component owns its choice list (data.features, data.text, distributed, training.optim, ...); this module
sits above them and below the trainer, so the schema imports no component and no component imports this.
Values are checked and the model is built once on the meta device before any work starts, so a bad recipe
fails with one line before a process group, a data loader or an output folder exists.
"""
from __future__ import annotations

import dataclasses
import math
import unicodedata
from pathlib import Path
from typing import Any, Iterator

import torch

from .config import Config, ConfigError, check_choice, load_config
from .data.features import FEATURE_DEVICES, FEATURE_KINDS, NORMALIZATIONS, FeatureExtractor
from .data.pieces import too_few_pieces
from .data.text import AUTO_ALPHABET, DIGIT_MODES, build_tokenizer, digits_language_known
from .distributed import STRATEGIES
from .distributed.adpsgd import VARIANTS
from .models.registry import build_model, check_model_name
from .training.optim import OPTIMIZERS, SCHEDULES
from .training.precision import PRECISIONS


def load_recipe(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML recipe, apply overrides and check every value; raises ConfigError with one clear line."""
    cfg = load_config(path, overrides)
    check_recipe(cfg)
    return cfg


def choices() -> dict[str, tuple[str, ...]]:
    """Each config choice's allowed values, from the component that implements them."""
    return {"features.kind": FEATURE_KINDS, "features.normalize": NORMALIZATIONS,
            "features.device": FEATURE_DEVICES, "text.digits": DIGIT_MODES,
            "optim.name": tuple(OPTIMIZERS), "optim.schedule": SCHEDULES,
            "trainer.precision": ("auto", *PRECISIONS), "distributed.strategy": tuple(STRATEGIES),
            "distributed.adpsgd.variant": VARIANTS}


def _pair(values: list[float]) -> bool:
    return len(values) == 0 or (len(values) == 2 and values[0] <= values[1])


def _non_finite(value: Any, key: str) -> Iterator[str]:
    """The keys under `value` (a config section, a list, a mapping, a number) that hold NaN or an infinity."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _non_finite(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _non_finite(v, f"{key}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _non_finite(v, f"{key}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        yield f"{key}={value}"


def check_recipe(cfg: Config) -> None:
    """Check values that types alone do not catch, and build the model once (on the meta device, no memory)
    so that bad `model.overrides` fail here, not after the process group exists."""
    bad = next(_non_finite(cfg, ""), None)
    if bad is not None:  # YAML's .nan and .inf pass every comparison-free check below
        raise ConfigError(f"{bad} must be a finite number")
    for key, allowed in choices().items():
        value: Any = cfg
        for part in key.split("."):
            value = getattr(value, part)
        check_choice(key, value, allowed)
    f, d, o, t, a = cfg.features, cfg.data, cfg.optim, cfg.trainer, cfg.augment
    checks = [
        (f.sample_rate >= 4000, "features.sample_rate must be at least 4000"),
        (0 < f.window_ms <= 1000, f"features.window_ms={f.window_ms} must be in (0, 1000] milliseconds"),
        (0 < f.hop_ms <= f.window_ms, "features.hop_ms must be in (0, window_ms]"),
        (f.sample_rate * f.window_ms / 1000 >= 2, "features.window_ms is shorter than two samples"),
        (f.n_mels >= 1, "features.n_mels must be at least 1"),
        (0.0 <= f.preemphasis < 1.0, "features.preemphasis must be in [0, 1)"),
        (f.speaker_prior_frames >= 0, f"features.speaker_prior_frames={f.speaker_prior_frames} must be 0 or more"),
        (f.running_prior_frames >= 0, f"features.running_prior_frames={f.running_prior_frames} must be 0 or more"),
        (f.device == "loader" or f.normalize != "speaker",
         f"features.device={f.device} computes features in the training step, which has no speaker statistics: use "
         "features.normalize=utterance, feature or none there, or features.device=loader"),
        (len(set(cfg.text.alphabet)) == len(cfg.text.alphabet) and cfg.text.alphabet,
         "text.alphabet must be non-empty without repeated characters"),
        ((all(c.lower() == c for c in cfg.text.alphabet) or all(c.upper() == c for c in cfg.text.alphabet))
         and unicodedata.is_normalized("NFC", cfg.text.alphabet),
         f"text.alphabet={cfg.text.alphabet!r} must be lower case (or capitals only, as deepspeech.pytorch's), each "
         "accented letter one composed character (Unicode NFC): the text is normalized so before it is spelled"),
        (cfg.text.digits != "spell" or digits_language_known(cfg.text.digits_language),
         f"text.digits_language={cfg.text.digits_language!r} is not a language num2words spells numbers in "
         "(en, de, fr, es, it, pt, nl, pl, ru, ...)"),
        (d.batch_seconds > 0, "data.batch_seconds must be positive"),
        (d.max_batch_size > 0, "data.max_batch_size must be positive"),
        (d.num_buckets > 0, "data.num_buckets must be positive"),
        (d.num_workers >= 0, f"data.num_workers={d.num_workers} must be 0 (load in the main process) or more"),
        (0 <= d.min_duration < d.max_duration, "data.min_duration must be >= 0 and below data.max_duration"),
        (not (d.mix and (d.train_manifest or d.train_slice)),
         "data.mix lists the training manifests: leave data.train_manifest and data.train_slice empty"),
        (not d.mix_weights or (len(d.mix_weights) == len(d.mix) and min(d.mix_weights) > 0),
         f"data.mix_weights={d.mix_weights} must be [] or one positive weight per data.mix manifest"),
        (d.mix_temperature > 0, "data.mix_temperature must be positive"),
        (d.shuffle_shards >= 1, f"data.shuffle_shards={d.shuffle_shards} must be at least 1"),
        (0 <= d.fixed_shapes <= 16, f"data.fixed_shapes={d.fixed_shapes} must be 0 (off) to 16 shapes"),
        (d.max_unreadable_batches >= 0,
         f"data.max_unreadable_batches={d.max_unreadable_batches} must be >= 0 (0 = never stop for unreadable data)"),
        (len(d.train_slice) <= 2 and len(d.val_slice) <= 2,
         "data.train_slice/val_slice must be [], [start] or [start, stop]"),
        (all(v >= 0 for v in (*d.train_slice, *d.val_slice)) and all(
            len(sl) < 2 or sl[0] < sl[1] for sl in (d.train_slice, d.val_slice)),
         f"data.train_slice={d.train_slice} and data.val_slice={d.val_slice} must be line numbers from 0 with start "
         "below stop"),
        (o.lr > 0, "optim.lr must be positive"),
        (o.warmup_steps >= 0, f"optim.warmup_steps={o.warmup_steps} must be 0 (no warm-up) or more"),
        (o.weight_decay >= 0, "optim.weight_decay must be >= 0"),
        (o.grad_clip >= 0, "optim.grad_clip must be >= 0 (0 = off)"),
        (0 <= o.min_lr_ratio <= 1, "optim.min_lr_ratio must be in [0, 1]"),
        (0 < o.decay_rate <= 1, "optim.decay_rate must be in (0, 1]"),
        (0 <= o.momentum < 1, "optim.momentum must be in [0, 1)"),
        (len(o.betas) == 2 and all(0 <= b < 1 for b in o.betas), "optim.betas must be two numbers in [0, 1)"),
        (t.max_epochs > 0 or t.max_steps > 0, "set trainer.max_epochs or trainer.max_steps"),
        (t.max_epochs >= 0 and t.max_steps >= 0 and t.max_minutes >= 0,
         "trainer.max_epochs, max_steps and max_minutes must be >= 0 (0 = no limit)"),
        (t.log_every >= 1, f"trainer.log_every={t.log_every} must be at least 1 (steps between log lines)"),
        (t.val_every_steps >= 0 and t.checkpoint_every_steps >= 0,
         "trainer.val_every_steps and trainer.checkpoint_every_steps must be >= 0 (0 = off)"),
        (0 <= t.checkpoint_every_minutes < math.inf,
         f"trainer.checkpoint_every_minutes={t.checkpoint_every_minutes} must be a number of minutes >= 0 (0 = off)"),
        (t.threads >= 0, "trainer.threads must be >= 0 (0 = torch's default)"),
        (t.device == "auto" or t.device.split(":")[0] in ("cpu", "cuda"),
         "trainer.device must be auto, cpu, cuda or cuda:N"),
        (t.loss_scale_init > 0 and t.min_loss_scale > 0,
         "trainer.loss_scale_init and trainer.min_loss_scale must be positive"),
        (t.memory_budget_mb >= 0, "trainer.memory_budget_mb must be >= 0 (0 = no budget)"),
        (bool(t.out_dir.strip()), "trainer.out_dir must not be empty"),
        (t.keep_checkpoints >= 1, "trainer.keep_checkpoints must be at least 1"),
        (t.grad_accum >= 1, "trainer.grad_accum must be at least 1"),
        (t.max_skipped_steps >= 0,
         f"trainer.max_skipped_steps={t.max_skipped_steps} must be >= 0 (0 = never stop for skipped steps)"),
        (0.0 <= t.ema_decay < 1.0, f"trainer.ema_decay={t.ema_decay} must be in [0, 1) (0 = off)"),
        (cfg.distributed.timeout_s > 0, "distributed.timeout_s must be positive (seconds)"),
        (cfg.distributed.adpsgd.skip_after_s > 0, "distributed.adpsgd.skip_after_s must be positive (seconds)"),
        (cfg.distributed.adpsgd.timeout_s > cfg.distributed.adpsgd.skip_after_s,
         "distributed.adpsgd.timeout_s must be longer than distributed.adpsgd.skip_after_s"),
        (cfg.distributed.simulate_straggler.slowdown >= 1.0,
         "distributed.simulate_straggler.slowdown must be at least 1 (1 = off)"),
        (0.0 <= a.word_crop <= 1.0, "augment.word_crop is a probability in [0, 1]"),
        (0.0 <= a.word_crop_edges <= 1.0, "augment.word_crop_edges is a probability in [0, 1]"),
        (0.0 <= a.trim_silence <= 1.0, "augment.trim_silence is a probability in [0, 1]"),
        (0.0 <= a.silence <= 1.0, "augment.silence is a probability in [0, 1]"),
        (a.silence_max_s >= 0, f"augment.silence_max_s={a.silence_max_s} must be >= 0 (seconds)"),
        (_pair(a.silence_floor_db) and all(v <= 0 for v in a.silence_floor_db),
         f"augment.silence_floor_db={a.silence_floor_db} must be [] or [low, high] in dBFS with low <= high <= 0"),
        (0.0 <= a.freq_warp < 0.5, "augment.freq_warp must be in [0, 0.5)"),
        (_pair(a.speed) and all(s > 0 for s in a.speed),
         f"augment.speed={a.speed} must be [] or [low, high] with 0 < low <= high"),
        (_pair(a.tempo) and all(s > 0 for s in a.tempo),
         f"augment.tempo={a.tempo} must be [] or [low, high] with 0 < low <= high"),
        (_pair(a.noise_snr_db), f"augment.noise_snr_db={a.noise_snr_db} must be [] or [low, high] with low <= high"),
        (len(a.noise_manifest_snr_db) == 2 and _pair(a.noise_manifest_snr_db),
         f"augment.noise_manifest_snr_db={a.noise_manifest_snr_db} must be [low, high] with low <= high"),
        (0.0 <= a.noise_prob <= 1.0 and 0.0 <= a.rir_prob <= 1.0,
         "augment.noise_prob and augment.rir_prob are probabilities in [0, 1]"),
        (a.gain_db >= 0, "augment.gain_db must be >= 0"),
        (0 <= a.channel_db <= 40, f"augment.channel_db={a.channel_db} must be in [0, 40] (dB)"),
        (min(a.freq_masks, a.time_masks, a.freq_mask_width, a.time_mask_width) >= 0,
         "augment.freq_masks, time_masks and their widths must be >= 0"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)
    _check_pieces(cfg)
    _check_model(cfg)


def _check_pieces(cfg: Config) -> None:
    """text.pieces and text.piece_list: a count, and pieces the alphabet spells (given, or from a checkpoint)."""
    t = cfg.text
    if isinstance(t.pieces, bool) or t.pieces < 0:
        raise ConfigError(f"text.pieces={t.pieces} must be 0 (characters) or a number of word pieces")
    if t.piece_list and not t.pieces:
        raise ConfigError("text.piece_list is set but text.pieces=0: set text.pieces to train on word pieces, or "
                          "leave text.piece_list empty")
    few = too_few_pieces(t.pieces, t.alphabet) if t.pieces and t.alphabet != AUTO_ALPHABET else None
    if few:
        raise ConfigError(few)
    if t.piece_list and t.alphabet != AUTO_ALPHABET:
        try:
            build_tokenizer(t.alphabet, t.piece_list, t.piece_scores)
        except ValueError as e:
            raise ConfigError(f"text.piece_list: {e}") from None


def vocab_size(text: Any) -> int:
    """The output classes (the blank included) a `TextConfig` gives the model: its word pieces, else its alphabet's
    characters; text.pieces before they are learned."""
    return len(text.piece_list) + 1 if text.piece_list else (text.pieces or len(text.alphabet)) + 1


def _check_model(cfg: Config) -> None:
    """Build the model on the meta device: unknown names, bad overrides and impossible shapes fail now."""
    check_model_name(cfg.model.name)
    num_features = FeatureExtractor(cfg.features).num_features
    try:
        with torch.device("meta"):
            build_model(cfg.model.name, cfg.model.overrides, num_features, vocab_size(cfg.text))
    except ConfigError:
        raise
    except Exception as e:  # a constructor's own complaint about a shape or value
        raise ConfigError(f"model {cfg.model.name} with model.overrides={cfg.model.overrides}: {e}") from e
