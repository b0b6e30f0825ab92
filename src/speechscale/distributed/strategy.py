"""The strategy interface: everything the trainer needs to know about distribution, and nothing more.

A strategy sets up its process group, wraps the model for the forward pass, decides what gradient
accumulation means ("not the last micro-batch"), acts before and after the optimizer step (it sees model
and optimizer), provides the weights used for evaluation, checkpoints and export (`consensus`), keeps
per-rank state for checkpoints, reduces metrics on a group of its own, and says whether the data position
is one global lockstep count or per rank. The trainer never touches torch.distributed itself.
`LocalStrategy` is one process; `allreduce.AllReduceStrategy` is DDP under torchrun.
"""
from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from ..data.batch_plan import BatchPlan, LockstepPlan, Units


class Strategy:
    """The interface, with the single-process behaviour as its default."""

    name = "local"
    rank = 0
    world_size = 1
    local_rank = 0
    lockstep = True        # True: ranks take step t together (one global data position dealt in rounds of one
                           # batch per rank; step-count events and collectives at logging steps); False: each
                           # learner at its own pace (its `make_plan` hands out batches as learners claim them)
    matched_steps = False  # True: every rank runs forward/backward each step (an empty batch runs a placeholder)

    def device(self, requested: str) -> str:
        """The device this rank trains on, given `trainer.device`."""
        return requested

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module the training forward pass runs through."""
        return model

    def accumulating(self, module: nn.Module) -> contextlib.AbstractContextManager:
        """The context for every micro-batch but the last of an optimizer step (gradient accumulation)."""
        return contextlib.nullcontext()

    def make_plan(self, units: Units) -> BatchPlan:
        """This rank's plan over an epoch's batches: lockstep rounds, one batch per rank per step."""
        return LockstepPlan(units, self.rank, self.world_size)

    def lr_scale(self, scale_lr: bool) -> float:
        """Factor on the learning rate (distributed.scale_lr: the linear scaling rule for larger batches)."""
        return 1.0

    def reduce_gradients(self, model: nn.Module) -> None:
        """After the last micro-batch's backward of a step that did not run through `wrap`'s module (CUDA graphs
        replay the bare model's backward): what that module would have done to the gradients."""

    def before_step(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Just before the optimizer step."""

    def after_step(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Just after the optimizer step."""

    @contextlib.contextmanager
    def consensus(self, model: nn.Module) -> Iterator[nn.Module]:
        """Inside, `model` holds the weights to evaluate, save and export (collective); restored after."""
        yield model

    def finish(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """End of training (collective): leave every rank with the weights the run produced."""

    def stats(self) -> dict[str, float]:
        """The strategy's own figures for the validation log (e.g. consensus distance)."""
        return {}

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum of `t` over ranks, on the strategy's metrics group; one process: `t`."""
        return t

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when it is true on any rank (stop decisions must agree)."""
        return flag

    def agree_stop(self, flag: bool) -> bool:
        """Whether all ranks stop after this step, given this rank's wish (a signal, its clock, max_steps); called
        at every step boundary, so a preemption notice is acted on within a step."""
        return flag

    def gather(self, obj: Any) -> list[Any] | None:
        """`obj` from every rank, in rank order, on rank 0 (None elsewhere); plain data between our own
        processes (checkpoint parts: rank 0 writes)."""
        return [obj]

    def barrier(self) -> None:
        """Wait for every rank."""

    def rank_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's own state for checkpoints (beyond the shared weights and optimizer)."""
        return {"name": self.name}

    def load_rank_state(self, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Restore what `rank_state` saved (this rank's entry, or rank 0's on another world size)."""

    def close(self, failed: bool = False) -> None:
        """Stop background work and leave the process group. `failed`: training raised (a collective timed out,
        a peer was lost): leave at once, without waiting on peers that may never answer."""


class LocalStrategy(Strategy):
    """One process, no communication."""


class ProcessGroupStrategy(Strategy):
    """A strategy under torchrun: joins the process group, picks this rank's device, and keeps a gloo group
    of its own for metrics, stop decisions and checkpoint gathers (never shared with model traffic)."""

    def __init__(self, timeout_s: float = 600.0) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        join_process_group("auto", timeout_s)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.backend = dist.get_backend()
        self.timeout = timeout
        self.group = dist.new_group(backend="gloo", timeout=timeout)

    def device(self, requested: str) -> str:
        if requested in ("auto", "cuda") and torch.cuda.is_available():
            index = self.local_rank % torch.cuda.device_count()  # several learners may share one GPU
            torch.cuda.set_device(index)
            return f"cuda:{index}"
        return "cpu" if requested == "auto" else requested

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        c = t.detach().cpu().clone()
        dist.all_reduce(c, op=dist.ReduceOp.SUM, group=self.group)
        return c.to(t.device)

    def any_rank(self, flag: bool) -> bool:
        return bool(self.all_reduce_sum(torch.tensor([1.0 if flag else 0.0])).item() > 0)

    def agree_stop(self, flag: bool) -> bool:
        # one 1-element allreduce per step on the gloo side group: host-side, it never waits for the GPU
        return self.any_rank(flag)

    def gather(self, obj: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def close(self, failed: bool = False) -> None:
        """Leave the group together: a rank tearing down gloo while its peer still talks to it can abort. After
        a failure there is no farewell barrier: the peer that stopped answering would make it wait out
        distributed.timeout_s a second time before the launcher could restart the workers (measured: 8 s of
        the stuck-node test's 14 s from the timeout to training again)."""
        if dist.is_initialized():
            try:
                if not failed:
                    dist.barrier(group=self.group)
            finally:
                dist.destroy_process_group()


def join_process_group(device: str = "auto", timeout_s: float = 600.0) -> None:
    """Join the default process group (once): nccl when this rank trains on a GPU, gloo otherwise."""
    if not dist.is_initialized():
        gpu = device in ("auto", "cuda") or device.startswith("cuda:")
        dist.init_process_group("nccl" if gpu and torch.cuda.is_available() else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s))


def launched_distributed() -> bool:
    """True under torchrun (or any launcher that sets WORLD_SIZE and RANK)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ
