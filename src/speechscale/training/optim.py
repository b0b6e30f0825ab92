"""Optimizers and the learning-rate schedule (warm-up, then decay), as a pure function of the step."""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

from .._compat import unguarded
from ..config import OptimConfig


def build_optimizer(model: nn.Module, cfg: OptimConfig, fused: bool = True) -> torch.optim.Optimizer:
    """AdamW (default) or SGD with Nesterov momentum; no weight decay on norms and biases. `fused` picks
    the fused kernels: one launch per step on GPUs, one pass over the weights on CPUs (ds2-large's AdamW
    step: 32 ms against 90-106 ms on 2 cores); they also skip a step without a host sync."""
    decay, no_decay = [], []
    for _name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return OPTIMIZERS[cfg.name](groups, cfg, fused or None)


# The trainer never compiles optimizer code (trainer.compile compiles the model's forward), so its optimizers call
# the methods beneath torch's compiler guards, which would import the compiler (_compat.unguarded says why).
_GUARDED = ("step", "add_param_group", "zero_grad", "state_dict", "load_state_dict")


def _without_compiler_guards(base: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    """A subclass of `base` (same state, same checkpoints) whose methods skip torch's compiler guards."""
    plain = {name: unguarded(base, name) for name in _GUARDED}
    body: dict[str, Any] = {"__doc__": f"{base.__name__} without importing the compiler (training/optim.py)."}
    for name, fn in plain.items():
        if fn is not None and name != "step":
            body[name] = fn
    if plain["step"] is not None:
        impl = plain["step"]

        def step(self: torch.optim.Optimizer, closure: Callable[[], float] | None = None) -> Any:
            with torch.set_grad_enabled(self.defaults["differentiable"]):  # what the guard does, less the break
                return impl(self, closure)

        body["step"] = step
    return type(base.__name__, (base,), body)


AdamW = _without_compiler_guards(torch.optim.AdamW)
SGD = _without_compiler_guards(torch.optim.SGD)


def _adamw(groups: list[dict], cfg: OptimConfig, fused: bool | None) -> torch.optim.Optimizer:
    return AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=fused)


def _sgd(groups: list[dict], cfg: OptimConfig, fused: bool | None) -> torch.optim.Optimizer:
    return SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=True, fused=fused)


# optim.name -> builder(param groups, config, fused); optim.schedule's values
OPTIMIZERS: dict[str, Callable[[list[dict], OptimConfig, bool | None], torch.optim.Optimizer]] = {
    "adamw": _adamw, "sgd": _sgd}
SCHEDULES = ("cosine", "linear", "constant", "exponential")


def lr_at(step: float, total_steps: float, cfg: OptimConfig, steps_per_epoch: float = 1,
          optimizer_step: int | None = None) -> float:
    """Learning rate at schedule position `step` (0-based) of a run of `total_steps`.

    The trainer passes positions measured in samples (samples seen / samples per single-rank step), so a
    run on 1 or N ranks follows one curve. Warm-up counts `optimizer_step` when given: it exists to let
    the optimizer's running statistics settle, and those advance once per optimizer step."""
    warm = step if optimizer_step is None else optimizer_step
    if cfg.warmup_steps > 0 and warm < cfg.warmup_steps:
        return cfg.lr * (warm + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    after = max(0.0, step - cfg.warmup_steps)
    span = max(1, total_steps - cfg.warmup_steps)
    frac = min(1.0, after / span)
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.schedule == "cosine":
        return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * frac))
    if cfg.schedule == "linear":
        return cfg.lr - (cfg.lr - floor) * frac
    return cfg.lr * cfg.decay_rate ** (after / max(1, steps_per_epoch))  # exponential, per epoch


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for g in optimizer.param_groups:
        g["lr"] = lr


class SampleSchedule:
    """The learning rate of a run as a function of samples seen, so that 1 and N ranks walk one curve.

    One schedule "step" is one single-rank optimizer step of an average epoch (`mean_batch` samples);
    warm-up counts real optimizer steps. `scale` multiplies the result (the linear scaling rule)."""

    def __init__(self, cfg: OptimConfig, epoch_samples: int, batches_per_epoch: int, accum: int, world: int,
                 max_steps: int, max_epochs: int, scale: float = 1.0) -> None:
        self.cfg = cfg
        self.scale = scale
        self.mean_batch = epoch_samples / max(1, batches_per_epoch) * accum
        total_samples = max_steps * world * self.mean_batch if max_steps else max_epochs * epoch_samples
        self.total_steps = total_samples / self.mean_batch
        self.steps_per_epoch = max(1, round(epoch_samples / self.mean_batch))  # single-rank optimizer steps

    def lr(self, samples_before: float, optimizer_step: int) -> float:
        """The rate for the step that starts after `samples_before` samples (all ranks together)."""
        position = max(0.0, samples_before / self.mean_batch)
        return self.scale * lr_at(position, self.total_steps, self.cfg, self.steps_per_epoch, optimizer_step)
