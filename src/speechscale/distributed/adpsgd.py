"""Decentralized parallel SGD with pairwise gossip averaging (ADPSGD: Lian et al., ICML 2018; the IBM
speech papers, TASLP 2021). Each learner computes a gradient on its own minibatch, averages its weights
with ONE neighbour (w_i, w_j <- (w_i + w_j) / 2, a doubly stochastic step that keeps the mean of all
learners' weights), and applies its gradient. There is no gradient allreduce.

`delay_by_one` is lockstep with hidden communication: the exchange of step t runs on a communication
thread while step t+1 computes, and its result is applied one step late, in delta form:

    w_{t+1} = w_t + (n_{t-1} - s_{t-1}) / 2 - lr * g(w_t)

where s is the snapshot a learner sent and n the one its neighbour sent back. The two corrections of a
pair cancel, so the learners' mean is exactly what synchronous SGD on the mean would do with these
gradients; local steps taken during an exchange survive.

Pairings: at round t every rank knows its partner without talking, from `ring_pairs` (a matching on a
ring whose offset rotates: left and right neighbours alternate; with an odd number of learners one rests
each round) or `random_pairs` (a permutation drawn from a seed all ranks share). Send and receive are
posted together, so any world size >= 2 is deadlock-free.

The communication thread has a gloo process group of its own (two threads on one group receive each
other's data), created on every rank in the same order; metrics and checkpoint gathers use a third.
Evaluation, checkpoints and export use the average of all learners (`consensus`, one allreduce), and
the mean L2 distance of the learners from it is reported as `consensus_distance`. Checkpoints hold every
learner's own weights, optimizer state and the exchange in flight (its result is applied after a resume
exactly as it would have been), so resume on CPU is bit-exact.
"""
from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from ..storage.seeds import generator
from .strategy import ProcessGroupStrategy

log = logging.getLogger(__name__)

VARIANTS = ("fixed_ring", "random_ring", "delay_by_one")  # distributed.adpsgd.variant (rings: rings.py)


def ring_pairs(world: int, round_: int) -> list[tuple[int, int]]:
    """The matching of round `round_` on a ring of `world` ranks: neighbours (o + 2m, o + 2m + 1) with an
    offset o that alternates (even world) or rotates (odd world: rank o - 1 rests)."""
    offset = round_ % (2 if world % 2 == 0 else world)
    return [((offset + 2 * m) % world, (offset + 2 * m + 1) % world) for m in range(world // 2)]


def random_pairs(world: int, round_: int, seed: int) -> list[tuple[int, int]]:
    """A random matching for round `round_`, the same on every rank that shares `seed`."""
    gen = generator(seed, "order", round_)
    perm = torch.randperm(world, generator=gen).tolist()
    return [(perm[2 * m], perm[2 * m + 1]) for m in range(world // 2)]


def partner(pairs: list[tuple[int, int]], rank: int) -> int | None:
    """`rank`'s partner in a matching, or None when it rests this round."""
    for a, b in pairs:
        if rank in (a, b):
            return b if rank == a else a
    return None


def swap(sent: torch.Tensor, peer: int, group: dist.ProcessGroup) -> torch.Tensor:
    """Send `sent` to `peer` and receive its tensor of the same shape, both posted together (deadlock-free)."""
    received = torch.empty_like(sent)
    ops = [dist.P2POp(dist.isend, sent, peer, group=group), dist.P2POp(dist.irecv, received, peer, group=group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return received


def _averaged(model: nn.Module) -> list[torch.Tensor]:
    """What learners average: the parameters and the floating-point buffers (normalization statistics)."""
    return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float() for t in _averaged(model)])  # (P,)


def _set_flat(model: nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for t in _averaged(model):
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()


class AveragingStrategy(ProcessGroupStrategy):
    """What every gossip variant shares: evaluation, checkpoints and export use the mean of all learners'
    weights (one allreduce after `settle`), and the end of training gives every learner that mean."""

    name = "adpsgd"
    last_distance = float("nan")

    def __init__(self, variant: str, timeout_s: float = 600.0) -> None:
        from ..config import ConfigError

        super().__init__(timeout_s)  # joins the group and creates the metrics group first
        if self.world_size < 2:
            raise ConfigError("distributed.strategy=adpsgd needs at least 2 learners (torchrun --nproc-per-node 2)")
        self.variant = variant
        # The communication thread's own group, created on every rank after the metrics group.
        self.comm_group = dist.new_group(backend="gloo", timeout=self.timeout)

    def settle(self, model: nn.Module) -> None:
        """Collective, before the mean is taken: finish (or keep aside) the exchanges in flight."""

    @contextlib.contextmanager
    def consensus(self, model: nn.Module) -> Iterator[nn.Module]:
        """The mean of all learners' weights (one allreduce), and their mean distance from it."""
        self.settle(model)
        own = _flat(model)
        mean = self.all_reduce_sum(own.cpu().double()) / self.world_size  # (P,)
        dist2 = self.all_reduce_sum(torch.tensor([float((own.cpu().double() - mean).norm())]))
        self.last_distance = float(dist2[0]) / self.world_size
        _set_flat(model, mean.to(own.dtype).to(own.device))
        try:
            yield model
        finally:
            _set_flat(model, own)

    def finish(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """End of training: every learner takes the consensus weights."""
        with self.consensus(model):
            mean = _flat(model)
        _set_flat(model, mean)

    def own_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This learner's own weights and optimizer state, for its part of a checkpoint."""
        return {"name": self.name, "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                "optimizer": optimizer.state_dict()}

    def load_own_state(self, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
        """Load what `own_state` saved; False on another number of learners (all start from the consensus)."""
        if not state.get("model"):
            return False
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return True


class DelayByOneStrategy(AveragingStrategy):
    """Gossip averaging between pairs of learners instead of a gradient allreduce (see the module doc)."""

    lockstep = True        # delay_by_one: every learner takes step t with the others
    matched_steps = True   # an exchange every step, also for a learner whose batch was all skipped

    def __init__(self, variant: str = "delay_by_one", timeout_s: float = 600.0) -> None:
        from ..config import ConfigError

        if variant != "delay_by_one":
            raise ConfigError(f"DelayByOneStrategy runs delay_by_one, not {variant!r} (the rings are RingStrategy)")
        super().__init__(variant, timeout_s)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="adpsgd")
        self._inflight: Future | None = None   # the exchange of the last step: (sent, received) or None
        self._done: tuple[torch.Tensor, torch.Tensor] | None = None  # its result, waiting to be applied
        self.round = 0
        log.info("rank %d of %d: adpsgd %s", self.rank, self.world_size, variant)

    # ---- the exchange --------------------------------------------------------------------------------
    def pairs(self, round_: int) -> list[tuple[int, int]]:
        return ring_pairs(self.world_size, round_)

    def _exchange(self, sent: torch.Tensor, peer: int | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """On the communication thread: swap snapshots with `peer` (send and receive posted together)."""
        return None if peer is None else (sent, swap(sent, peer, self.comm_group))

    def _drain(self) -> None:
        """Wait for the exchange in flight; keep its result for the next step."""
        if self._inflight is not None:
            self._done = self._inflight.result()
            self._inflight = None

    def before_step(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Apply last step's average (delta form), then send this step's weights while the next step computes."""
        self._drain()
        if self._done is not None:
            sent, received = self._done
            own = _flat(model)
            _set_flat(model, own + ((received - sent) / 2).to(own.device))
            self._done = None
        snapshot = _flat(model).cpu().clone()  # gloo sends host memory; (P,)
        self._inflight = self._thread.submit(self._exchange, snapshot, partner(self.pairs(self.round), self.rank))
        self.round += 1

    # ---- consensus, state ---------------------------------------------------------------------------
    def finish(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """End of training: the last exchange is dropped, every learner takes the consensus weights."""
        self._drain()
        self._done = None
        super().finish(model, optimizer)

    def stats(self) -> dict[str, float]:
        return {"consensus_distance": self.last_distance}

    def rank_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This learner's own weights and optimizer, and the finished exchange not yet applied."""
        self._drain()
        return {**self.own_state(model, optimizer), "variant": self.variant, "round": self.round,
                "exchange": list(self._done) if self._done else []}

    def load_rank_state(self, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if self.load_own_state(state, model, optimizer):
            self.round = int(state["round"])
            self._done = (state["exchange"][0], state["exchange"][1]) if state["exchange"] else None

    def close(self, failed: bool = False) -> None:
        if not failed:  # after a failure the exchange in flight may be the one that never completes
            self._drain()
        self._thread.shutdown(wait=not failed, cancel_futures=failed)
        super().close(failed)
