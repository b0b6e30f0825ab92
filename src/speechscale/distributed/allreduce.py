"""Synchronous data parallelism: DDP averages gradients with allreduce during backward (gloo on CPU,
nccl on GPU). Metrics, stop decisions and checkpoint gathers run on a gloo group of their own."""
from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .strategy import ProcessGroupStrategy

log = logging.getLogger(__name__)


class AllReduceStrategy(ProcessGroupStrategy):
    """DDP: every rank holds the same weights and optimizer state; they step together."""

    name = "allreduce"
    lockstep = True
    matched_steps = True  # DDP's allreduce needs every rank's backward, even on an empty batch

    def __init__(self, timeout_s: float = 600.0) -> None:
        super().__init__(timeout_s)
        log.info("rank %d of %d (%s)", self.rank, self.world_size, self.backend)

    def wrap(self, model: nn.Module) -> nn.Module:
        dev = next(model.parameters()).device
        return nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)

    def accumulating(self, module: nn.Module) -> contextlib.AbstractContextManager:
        return module.no_sync()  # type: ignore[operator]

    def reduce_gradients(self, model: nn.Module) -> None:
        """The mean gradient over ranks, as DDP would leave it: one allreduce of all gradients flattened into one
        buffer (graphed steps run the bare model, outside DDP's hooks)."""
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])  # (sum of numels,)
        dist.all_reduce(flat)
        flat /= self.world_size
        for g, avg in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(avg.view_as(g))

    def lr_scale(self, scale_lr: bool) -> float:
        return float(self.world_size) if scale_lr else 1.0

    def rank_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Name, world size and this rank's weights digest (sum and sum of squares of every parameter, float64):
        every rank's must be the same, and a checkpoint shows it."""
        params = [p.detach().double() for p in model.parameters()]
        digest = [float(sum(p.sum() for p in params)), float(sum(p.square().sum() for p in params))]
        return {"name": self.name, "world_size": self.world_size, "weights_digest": digest}
