"""Distribution strategies: the trainer calls these hooks and never touches torch.distributed itself.

A strategy wraps the model for the forward pass, acts after backward and after the optimizer step, reduces
metrics, gathers per-rank state for checkpoints, and has state of its own. `LocalStrategy` is one process;
`AllReduceStrategy` is DDP (gloo on CPU, nccl on GPU) under torchrun. A decentralized strategy slots in by
implementing the same methods.
"""
from __future__ import annotations

import datetime
import logging
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger(__name__)


class Strategy:
    """The interface, with the single-process behaviour as its default."""

    name = "local"
    rank = 0
    world_size = 1
    local_rank = 0

    def device(self, requested: str) -> str:
        """The device this rank trains on, given `trainer.device`."""
        return requested

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module the training forward pass runs through."""
        return model

    def after_backward(self, model: nn.Module) -> None:
        """Called once gradients exist, before clipping (DDP has already averaged them)."""

    def after_step(self, model: nn.Module) -> None:
        """Called after the optimizer step."""

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of `t` over ranks (in place where distributed); one process: `t`."""
        return t

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on any rank (stop decisions must agree)."""
        return flag

    def gather(self, obj: Any) -> list[Any]:
        """`obj` from every rank, in rank order, on every rank (plain data between our own processes)."""
        return [obj]

    def barrier(self) -> None:
        """Wait for every rank."""

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Strategies with state of their own restore it here."""

    def close(self) -> None:
        """Leave the process group."""


class LocalStrategy(Strategy):
    """One process, no communication."""


class AllReduceStrategy(Strategy):
    """Synchronous data parallelism: DDP averages gradients with allreduce during backward."""

    name = "allreduce"

    def __init__(self, backend: str | None = None, timeout_s: float = 600.0) -> None:
        if not dist.is_initialized():
            backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.backend = dist.get_backend()
        self._dev = torch.device("cpu")
        log.info("rank %d of %d (%s)", self.rank, self.world_size, self.backend)

    def device(self, requested: str) -> str:
        if requested in ("auto", "cuda") and torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank)
            return f"cuda:{self.local_rank}"
        return "cpu" if requested == "auto" else requested

    def wrap(self, model: nn.Module) -> nn.Module:
        self._dev = next(model.parameters()).device
        ids = [self._dev.index] if self._dev.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def _comm(self, t: torch.Tensor) -> torch.Tensor:
        # gloo reduces CPU tensors; nccl needs them on the GPU
        return t.to(self._dev) if self.backend == "nccl" else t.cpu()

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        c = self._comm(t)
        dist.all_reduce(c, op=dist.ReduceOp.SUM)
        return c.to(t.device)

    def any(self, flag: bool) -> bool:
        return bool(self.all_reduce_sum(torch.tensor([1.0 if flag else 0.0])).item() > 0)

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        """Leave the group together: a rank tearing down gloo while its peer still talks to it can abort."""
        if dist.is_initialized():
            try:
                dist.barrier()
            finally:
                dist.destroy_process_group()


def launched_distributed() -> bool:
    """True under torchrun (or any launcher that sets WORLD_SIZE and RANK)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


# distributed.strategy -> the strategy used under a distributed launcher (one process is always local)
STRATEGIES: dict[str, type[Strategy]] = {"allreduce": AllReduceStrategy}


def build_strategy(name: str) -> Strategy:
    """Strategy `name` under a distributed launcher, else the local strategy (a single process)."""
    from ..config import check_choice

    check_choice("distributed.strategy", name, tuple(STRATEGIES))
    if not launched_distributed():
        return LocalStrategy()
    return STRATEGIES[name]()
