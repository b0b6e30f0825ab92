"""An exponential moving average of the weights, kept beside the training weights (`trainer.ema_decay`).

After every optimizer step each floating-point entry of the model's state (parameters and batch-norm
statistics) moves towards the model's: ema += (1 - d_t) * (w - ema), with d_t = min(decay, (1 + t) / (10 + t))
so the first steps do not drag the average towards the initial weights. Kept in fp32 on the model's
device (one fused lerp per device: no host sync); integer entries (batch counts) are copied. Checkpoints carry
it under `ema`, so a resumed run continues the same average; `speechscale average --ema` writes it out as
a checkpoint of its own that eval, transcribe, serve and export use like any other.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._compat import lerp_all_


class WeightAverage:
    """The EMA of one model's state."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        state = model.state_dict()
        self.names = [n for n, v in state.items() if v.is_floating_point()]
        self.weights = {n: v.detach().float().clone() for n, v in state.items()}

    def rate(self, step: int) -> float:
        """The decay used at optimizer step `step` (1-based): the configured one, smaller early on."""
        return min(self.decay, (1.0 + step) / (10.0 + step))

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        """Move the average towards the model's current state."""
        state = model.state_dict()
        lerp_all_([self.weights[n] for n in self.names], [state[n].detach().float() for n in self.names],
                  1.0 - self.rate(step))
        for n, v in state.items():
            if n not in self.names:
                self.weights[n].copy_(v)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "weights": self.weights}

    def load_state_dict(self, state: dict[str, Any] | None, model: nn.Module) -> None:
        """Continue a saved average; without one (a checkpoint of a run without EMA) start from the model."""
        if state is None:
            self.weights = {n: v.detach().float().clone() for n, v in model.state_dict().items()}
            return
        device = next(iter(self.weights.values())).device
        self.weights = {n: v.to(device) for n, v in state["weights"].items()}

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The average as a state dict in the model's own dtypes (loadable into it)."""
        return {n: self.weights[n].to(v.dtype) for n, v in model.state_dict().items()}
