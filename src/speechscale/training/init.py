"""`trainer.init_from`: start a run from another run's weights (fine-tuning, speaker adaptation).

Only the weights come over: the optimizer, schedule, step count and data position start fresh, so the new
run's recipe (its data, epochs, learning rate) is what trains. The checkpoint must describe the same input and
output (features, alphabet) and the same model; anything else is a one-line error before training starts.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import Config, ConfigError
from ..storage.checkpoints import load_checkpoint

# feature fields that change what the model sees; speaker_prior* only matter for a file without its speaker
_FEATURE_KEYS = ("kind", "sample_rate", "window_ms", "hop_ms", "n_mels", "normalize", "remove_dc", "preemphasis",
                 "running_prior_frames")


def _differences(saved: dict[str, Any], cfg: Config) -> list[str]:
    """What the checkpoint's config (`saved`) and this run's `cfg` disagree on, among the fields the weights
    depend on."""
    out = []
    if saved.get("model", {}).get("name") != cfg.model.name:  # overrides: the weights' shapes are checked
        out.append(f"model.name {saved['model'].get('name')!r} (this run: {cfg.model.name!r})")
    feats = saved.get("features", {})
    out += [f"features.{k} {feats.get(k)!r} (this run: {getattr(cfg.features, k)!r})"
            for k in _FEATURE_KEYS if k in feats and feats[k] != getattr(cfg.features, k)]
    alphabet = saved.get("text", {}).get("alphabet")
    if alphabet is not None and alphabet != cfg.text.alphabet:
        out.append("text.alphabet differs")
    return out


def init_weights(model: nn.Module, path: str, cfg: Config) -> None:
    """Load the weights of the checkpoint at `path` into `model` (built from `cfg`); ConfigError in one line
    when the checkpoint cannot be read or does not fit this run's model."""
    try:
        ckpt = load_checkpoint(path)
    except Exception as e:  # CheckpointError: not found, not a checkpoint, torn
        raise ConfigError(f"trainer.init_from: {e}") from None
    if "config" not in ckpt:
        raise ConfigError(f"trainer.init_from: {path} is an older checkpoint format without its config")
    wrong = _differences(ckpt["config"], cfg)
    if wrong:
        raise ConfigError(f"trainer.init_from: {path} was trained with {'; '.join(wrong)}")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in ckpt["model"].items() if isinstance(v, torch.Tensor)}
    if expected != found:
        odd = sorted(set(expected) ^ set(found)) or [k for k in expected if expected[k] != found[k]]
        raise ConfigError(f"trainer.init_from: {path} does not fit model {cfg.model.name} with these overrides "
                          f"({len(odd)} tensors differ, e.g. {odd[0]})")
    model.load_state_dict(ckpt["model"])
