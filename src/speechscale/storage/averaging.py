"""Checkpoint averaging: the mean of several checkpoints' weights, or a run's EMA, as a checkpoint of its own.

The result holds `model` and `config` (what eval, transcribe, serve and export read) and `averaged_from`;
it has no optimizer or training state, so it is for use, not for resuming.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from . import files as storage
from .checkpoints import CheckpointError, ModelFileError, load_checkpoint

MODEL_KEYS = ("features", "text", "model")  # config sections that must agree for weights to be averaged
FORMAT_VERSION = 3


def newest_steps(ckpt_dir: str | Path, n: int) -> list[str]:
    """The `n` newest `step-N.pt` files of a run's checkpoint folder, oldest first."""
    names = [p for p in storage.list_names(ckpt_dir, "step-*.pt") if re.fullmatch(r"step-\d+\.pt", p)]
    names.sort(key=lambda p: int(p[5:-3]))
    if len(names) < n:
        raise CheckpointError(f"{ckpt_dir}: {len(names)} step-N.pt checkpoint(s), {n} asked for (trainer.keep_checkpoints "
                              f"keeps that many)")
    return [storage.join(ckpt_dir, p) for p in names[-n:]]


def _describe(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: cfg.get(k) for k in MODEL_KEYS}


def average_checkpoints(paths: list[str]) -> dict[str, Any]:
    """The mean of the checkpoints' weights (floating entries; integer ones from the last), with the last's
    config. Every checkpoint must describe the same model (features, text, model) with the same tensors."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    total = {k: v.double() if v.is_floating_point() else v for k, v in first["model"].items()}
    config = first["config"]
    for path in paths[1:]:
        ckpt = load_checkpoint(path)
        if _describe(ckpt["config"]) != _describe(first["config"]):
            raise CheckpointError(f"{path}: a different model from {paths[0]} (its features, text or model config "
                                  f"differ): only checkpoints of one model can be averaged")
        state = ckpt["model"]
        if set(state) != set(total) or any(state[k].shape != total[k].shape for k in total):
            raise CheckpointError(f"{path}: its tensors differ from {paths[0]}'s in names or shapes")
        for k, v in state.items():
            total[k] = total[k] + v.double() if v.is_floating_point() else v
        config = ckpt["config"]
    model = {k: (v / len(paths)).to(first["model"][k].dtype) if v.is_floating_point() else v for k, v in total.items()}
    return {"format_version": FORMAT_VERSION, "config": config, "model": model,
            "averaged_from": [str(p) for p in paths]}


def ema_checkpoint(path: str) -> dict[str, Any]:
    """The EMA weights a run kept (trainer.ema_decay > 0) as a checkpoint of their own."""
    ckpt = load_checkpoint(path)
    if "ema" not in ckpt:
        raise CheckpointError(f"{path}: holds no EMA weights (train with trainer.ema_decay, e.g. 0.999)")
    ema, model = ckpt["ema"], ckpt["model"]
    weights = ema.get("weights")
    if not isinstance(weights, dict) or set(weights) != set(model) or any(
            not isinstance(weights[k], torch.Tensor) or weights[k].shape != v.shape for k, v in model.items()):
        raise ModelFileError(f"{path}: its EMA weights are not the model's tensors (names or shapes differ)")
    decay = ema.get("decay")
    if not isinstance(decay, float) or not 0 <= decay < 1:
        raise ModelFileError(f"{path}: its EMA decay {str(decay)[:20]} is not a number in [0, 1)")
    return {"format_version": FORMAT_VERSION, "config": ckpt["config"],
            "model": {k: weights[k].to(v.dtype) for k, v in model.items()},
            "averaged_from": [f"{path} (EMA, decay {decay})"]}
