"""Asynchronous ADPSGD: `fixed_ring` and `random_ring` (Lian et al., ICML 2018; the IBM speech papers).

Every learner trains at its own pace. A communication thread averages its weights with one neighbour per
round while the learner computes, so a slow learner delays only its neighbours' exchanges, never anyone's
steps:

    main thread    ... forward/backward | apply finished averages | optimizer step | offer a snapshot ...
    comm thread    round r: take the snapshot s, swap it with the partner's n, leave the delta (n - s) / 2

The delta is applied by the main thread between backward and the optimizer step (a thread that changes
weights under autograd breaks the backward), in delta form, so the local steps taken while the exchange
ran survive and each pair's corrections cancel: the mean of all learners' weights is kept exactly. A
learner sends its snapshot plus the deltas it has not applied yet, so no average is averaged stale.

Rounds: round r pairs the ranks by `ring_pairs` (fixed_ring: left and right neighbours alternate; with an
odd number of learners one rests) or `random_pairs` (a seed all ranks share). A learner's thread runs at
most one round per local step (so 2 cores are not spent on gossip). Before a round the two partners meet
in the c10d store; one that has not arrived after `skip_after_s` is skipped that round, and both sides
agree on it (the first decision written wins), so the point-to-point messages always match.

Sync points (epoch ends, stop, checkpoints, evaluation) are collective: the learners agree on the highest
round any of them reached (one allreduce), every thread runs to it, and the last deltas are applied. Then
every learner's weights and optimizer are saved; evaluation and export use the mean (`consensus`).

Data: each learner claims the epoch's next unread batch from a counter in the store (`SharedClaims`), so a
fast learner reads more than a slow one and the epoch ends when the corpus was read once in total.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..data.batch_plan import BatchPlan, ClaimedPlan, Units
from .adpsgd import AveragingStrategy, _flat, _set_flat, partner, random_pairs, ring_pairs, swap
from .strategy import ProcessGroupStrategy

log = logging.getLogger(__name__)

RING_VARIANTS = ("fixed_ring", "random_ring")


class SharedClaims:
    """The data position of asynchronous learners: per epoch, a counter of batches handed out, in the store."""

    def __init__(self, store: dist.Store, strategy: ProcessGroupStrategy) -> None:
        self.store, self.strategy = store, strategy

    def start(self, epoch: int, claimed: int) -> None:
        """Collective: the epoch's counter starts at `claimed` (0, or where a checkpoint left it)."""
        if self.strategy.rank == 0:
            self.store.set(f"claim/{epoch}", str(claimed))
        self.strategy.barrier()

    def next(self, epoch: int) -> int:
        """The index of the next unclaimed batch of `epoch` (past the end once all were handed out)."""
        return int(self.store.add(f"claim/{epoch}", 1)) - 1

    def count(self, epoch: int) -> int:
        """Batches of `epoch` handed out so far (to all learners)."""
        return int(self.store.add(f"claim/{epoch}", 0))


class RingStrategy(AveragingStrategy):
    """fixed_ring / random_ring: asynchronous pairwise averaging (see the module doc)."""

    lockstep = False       # learners step at their own pace: no per-step collectives, per-learner data
    matched_steps = False

    def __init__(self, variant: str = "fixed_ring", timeout_s: float = 600.0, skip_after_s: float = 30.0,
                 seed: int = 0) -> None:
        super().__init__(variant, timeout_s)
        self.skip_after_s = skip_after_s
        token = [uuid.uuid4().hex]  # rank 0's: fresh store keys for every launch
        dist.broadcast_object_list(token, src=0, group=self.group)
        self.store = dist.PrefixStore(f"speechscale/{token[0]}/", dist.distributed_c10d._get_default_store())
        self.claims = SharedClaims(self.store, self)
        self.seed = seed  # random_ring's pairings: the same on every rank, and in every run with this seed
        self._cond = threading.Condition()
        self.allowed = self.done = 0            # rounds the thread may run / has run
        self._snapshot: torch.Tensor | None = None  # the weights offered for the next round (P,)
        self._delta: torch.Tensor | None = None     # finished averages not yet applied (P,)
        self._closing = False
        self._error: Exception | None = None
        self.exchanges = self.skipped = 0
        self._stop_seen = False
        self._thread = threading.Thread(target=self._run, name="adpsgd-gossip", daemon=True)
        self._thread.start()
        log.info("rank %d of %d: adpsgd %s", self.rank, self.world_size, variant)

    def make_plan(self, units: Units) -> BatchPlan:
        """Asynchronous learners: each claims the epoch's next unclaimed batch at its own pace."""
        return ClaimedPlan(units, self.claims)

    # ---- the communication thread ----------------------------------------------------------------
    def pairs(self, round_: int) -> list[tuple[int, int]]:
        if self.variant == "random_ring":
            return random_pairs(self.world_size, round_, self.seed)
        return ring_pairs(self.world_size, round_)

    def _run(self) -> None:
        try:
            self._rounds()
        except Exception as e:  # a peer died or the group broke: the main thread raises it at its next sync
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def _rounds(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or (self.done < self.allowed and self._snapshot is not None))
                if self._closing:
                    return
                # what this learner's weights are with the averages it has not applied yet
                sent = self._snapshot if self._delta is None else self._snapshot + self._delta
                r, self._snapshot = self.done, None
            received = self._exchange(r, sent, partner(self.pairs(r), self.rank))
            with self._cond:
                if received is not None:
                    half = (received - sent) / 2
                    self._delta = half if self._delta is None else self._delta + half
                    self.exchanges += 1
                self.done = r + 1
                self._cond.notify_all()

    def _meet(self, r: int, peer: int) -> bool:
        """Both partners of round r agree whether they exchange: whoever waited `skip_after_s` for the other
        writes "skip", whoever found the other writes "go"; the first word written holds for both."""
        key = f"x/{r}/{min(self.rank, peer)}-{max(self.rank, peer)}"
        self.store.set(f"{key}/{self.rank}", "1")
        deadline, pause = time.monotonic() + self.skip_after_s, 0.0005
        # the partner's presence key, or its decision (it deletes its presence key once it has decided)
        while not (arrived := self.store.check([f"{key}/{peer}"]) or self.store.check([f"{key}/d"])):
            if time.monotonic() > deadline:
                break
            time.sleep(pause)
            pause = min(2 * pause, 0.01)
        want = "go" if arrived else "skip"
        decided = self.store.compare_set(f"{key}/d", "", want)
        # the round's keys are dropped once both partners have read the decision (a late partner's arrival
        # no longer matters then); only a partner that never comes leaves two keys behind
        self.store.delete_key(f"{key}/{self.rank}")
        if self.store.add(f"{key}/n", 1) == 2:
            self.store.delete_key(f"{key}/d")
            self.store.delete_key(f"{key}/n")
        return decided == b"go"

    def _exchange(self, r: int, sent: torch.Tensor, peer: int | None) -> torch.Tensor | None:
        if peer is None:
            return None
        if not self._meet(r, peer):
            self.skipped += 1
            return None
        return swap(sent, peer, self.comm_group)

    # ---- the main thread's side --------------------------------------------------------------------
    def _apply_delta(self, model: nn.Module) -> None:
        with self._cond:
            delta, self._delta = self._delta, None
            if delta is not None and self._snapshot is not None:  # the offer not taken yet stays current
                self._snapshot += delta
        if delta is not None:
            own = _flat(model)
            _set_flat(model, own + delta.to(own.device))

    def _raise_thread_error(self) -> None:
        """The communication thread's failure (a partner died or stalled past timeout_s), raised here, at the
        step that follows it, not at the epoch's end."""
        if self._error is not None:
            raise RuntimeError(f"adpsgd communication thread failed: {self._error}") from self._error

    def before_step(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Between backward and the optimizer step: fold in the averages finished since the last step."""
        self._raise_thread_error()
        self._apply_delta(model)

    def after_step(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """One more round allowed; offer the new weights when the thread took the last offer."""
        with self._cond:
            self.allowed += 1
            if self._snapshot is None:
                self._snapshot = _flat(model).cpu().clone()
            self._cond.notify_all()

    def drain(self, model: nn.Module) -> None:
        """Collective: every thread runs to the highest round any learner reached; all deltas applied."""
        target = self._all_reduce_max(self.allowed)
        with self._cond:
            self.allowed = max(self.allowed, target)
        while True:
            self._apply_delta(model)
            with self._cond:
                self._raise_thread_error()
                if self.done >= target:
                    break
                if self._snapshot is None:
                    self._snapshot = _flat(model).cpu().clone()
                    self._cond.notify_all()
                self._cond.wait(timeout=0.05)
        self._apply_delta(model)
        with self._cond:
            self._snapshot = None  # the next round starts from the weights after the next step

    def _all_reduce_max(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t.item())

    # ---- agreement without per-step collectives ------------------------------------------------------
    def agree_stop(self, flag: bool) -> bool:
        """Checked every step through the store (no collective): a stop any learner asks for (signal, time
        budget, max_steps) is seen by all within one of their steps, and ends the run."""
        if flag:
            self.store.set("stop", "1")
        self._stop_seen = self._stop_seen or self.store.check(["stop"])
        return self._stop_seen

    # ---- consensus, state --------------------------------------------------------------------------
    def settle(self, model: nn.Module) -> None:
        self.drain(model)

    def stats(self) -> dict[str, float]:
        return {"consensus_distance": self.last_distance, "exchanges": float(self.exchanges),
                "skipped_exchanges": float(self.skipped)}

    def rank_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This learner's own weights and optimizer, after a drain (nothing in flight)."""
        self.drain(model)
        return {**self.own_state(model, optimizer), "variant": self.variant, "round": self.done}

    def load_rank_state(self, state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if self.load_own_state(state, model, optimizer):
            with self._cond:
                self.allowed = self.done = int(state["round"])

    def close(self, failed: bool = False) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=self.skip_after_s)  # a thread stuck in an exchange is a daemon: not waited on
        if self._thread.is_alive():
            log.warning("rank %d: the adpsgd thread is still in an exchange after %g s; leaving it", self.rank,
                        self.skip_after_s)
        super().close(failed)
