"""Mixed precision: autocast for the forward pass, dynamic loss scaling for fp16, and its watchdog.

Log-softmax and CTC run in fp32 outside autocast (the trainer does that); normalization statistics are
computed in fp32 by the layers themselves. fp16 uses torch.amp.GradScaler; its state goes into checkpoints.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from .._compat import steps_on_found_inf

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class LossScaleCollapsed(RuntimeError):
    """fp16 dynamic loss scaling shrank the scale below its floor: the gradients are garbage."""


def resolve_device(name: str) -> torch.device:
    """`auto` -> the first CUDA device when there is one, else the CPU; anything else as torch reads it."""
    from ..components import resolve_device as resolve

    return resolve(name, "trainer.device")


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto` -> bf16 on GPUs that support it, fp32 elsewhere (bf16 autocast is slower on CPUs without
    AMX). Other values pass through."""
    if name != "auto":
        return name
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp32"


class Precision:
    """The autocast region, loss scaler and watchdog of one run in mode fp32, bf16 or fp16."""

    def __init__(self, mode: str, device: torch.device, init_scale: float = 2.0 ** 16,
                 min_scale: float = 1e-5) -> None:
        self.mode = mode
        self.device = device
        self.dtype = _DTYPES.get(mode, torch.float32)
        self.min_scale = min_scale
        self.scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, enabled=(mode == "fp16"))

    @contextlib.contextmanager
    def autocast(self, cache_enabled: bool = True) -> Iterator[None]:
        """Autocast to bf16/fp16 around the model's forward pass; nothing in fp32. CUDA graph capture needs
        `cache_enabled=False` (a cached weight cast would be baked into the graph)."""
        if self.mode == "fp32":
            yield
            return
        with torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=cache_enabled):
            yield

    @property
    def scaling(self) -> bool:
        return self.scaler.is_enabled()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaling else loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaling:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
        """Apply the update unless `skip` (a device bool) is set, without a host sync where the optimizer
        supports it (fused optimizers take a found-inf flag); fp16 also updates the loss scale."""
        if self.scaling:  # the scaler syncs anyway, and skips by itself on inf/NaN gradients
            if not bool(skip):
                self.scaler.step(optimizer)
            self.scaler.update()
            return
        step_if(optimizer, skip)

    def loss_scale(self) -> float:
        """The current fp16 loss scale (1.0 without scaling). Syncs with the device."""
        return float(self.scaler.get_scale()) if self.scaling else 1.0

    def check(self) -> None:
        """The watchdog: raise LossScaleCollapsed when the fp16 scale has fallen below its floor."""
        if self.scaling and self.loss_scale() < self.min_scale:
            raise LossScaleCollapsed(
                f"fp16 loss scale collapsed to {self.loss_scale():.3g} (floor trainer.min_loss_scale="
                f"{self.min_scale:g}): gradients overflow at any scale, so the run stops instead of training "
                f"on garbage; use trainer.precision=bf16 or fp32, lower optim.lr, or check the data")

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "scaler": self.scaler.state_dict() if self.scaling else {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaling and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def step_if(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """optimizer.step() unless `skip`. Fused optimizers read the flag on the device (no sync: the protocol
    GradScaler uses); others sync once to decide."""
    if steps_on_found_inf(optimizer) and getattr(optimizer.defaults, "get", lambda k: None)("fused"):
        optimizer.found_inf = skip.to(torch.float32)  # type: ignore[attr-defined]
        optimizer.grad_scale = None  # type: ignore[attr-defined]
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf, optimizer.grad_scale  # type: ignore[attr-defined]
    elif not bool(skip):
        optimizer.step()


def clip_and_step(params: list[torch.Tensor], loss: torch.Tensor, grad_clip: float,
                  step: Callable[[torch.Tensor], None]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The update after backward, without a host sync: clip the gradients of `params` to `grad_clip`, flag a
    non-finite loss or gradient, and call `step(skip)` (device bool: either flag, or a gradient of exactly zero:
    no sample on any rank, whose step would still move the weights by momentum and weight decay). Returns (norm,
    bad loss, bad gradient); a bad loss is not also counted as a bad gradient."""
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    bad_loss = ~torch.isfinite(loss)
    bad_grad = ~torch.isfinite(norm) & ~bad_loss
    step(bad_loss | bad_grad | (norm == 0))
    return norm, bad_loss, bad_grad
