"""The data-plan interface the trainer drives, and epochs of numbered batches ("units") behind it.

Every source of training data, a manifest in memory or a stream of tar shards, gives the trainer one
object with this interface (`BatchPlan`): it yields this rank's batches of the current epoch, says how far
the epoch's position moves when batch i has been trained, whether a position completes the epoch, and
restarts at any position in O(1) (no replay of the epoch's earlier batches).

An epoch's units are a pure function of (seed, epoch) addressed by number (`Units`): `ListUnits` over the
in-memory bucket sampler, `ShardUnits` (data/stream.py) over a shard index, computed window by window.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Iterator, Protocol

from .sampler import BucketBatchSampler


class BatchPlan(Protocol):
    """What the trainer needs from its data: an iterator of this rank's batches for (epoch, rank, world)."""

    epoch: int
    dropped: int  # samples of the epoch that cannot be shared out evenly (counted as dropped_tail)

    def resume(self, epoch: int, consumed: int, part: dict[str, Any] | None = None) -> int:
        """Start `epoch` at `consumed` samples (all ranks together); `part`: this rank's saved position
        (asynchronous learners). Returns the position."""
        ...

    def __iter__(self) -> Iterator[list[int]]: ...
    def __len__(self) -> int: ...

    def advance(self, i: int) -> int:
        """Samples the epoch's position moves when this pass's batch `i` has been trained."""
        ...

    def complete(self, consumed: int) -> bool: ...
    def rank_state(self) -> dict[str, Any]: ...
    def epoch_samples(self, epoch: int) -> int: ...
    def batches_per_epoch(self, epoch: int) -> int: ...


class Units(Protocol):
    """An epoch's batches in order, by number; each a list of utterance ids."""

    def num_units(self, epoch: int) -> int: ...
    def unit(self, epoch: int, k: int) -> list[int]: ...
    def offset(self, epoch: int, k: int) -> int: ...       # samples in the units before k
    def epoch_samples(self, epoch: int) -> int: ...


class ListUnits:
    """`Units` over a BucketBatchSampler (an in-memory manifest): its batches and their running sums."""

    def __init__(self, base: BucketBatchSampler) -> None:
        self.base = base
        self._cum: tuple[int, list[int]] | None = None

    def num_units(self, epoch: int) -> int:
        return len(self.base.batches(epoch))

    def unit(self, epoch: int, k: int) -> list[int]:
        return self.base.batches(epoch)[k]

    def offset(self, epoch: int, k: int) -> int:
        if self._cum is None or self._cum[0] != epoch:
            self._cum = (epoch, [0, *itertools.accumulate(len(b) for b in self.base.batches(epoch))])
        return self._cum[1][k]

    def epoch_samples(self, epoch: int) -> int:
        return self.offset(epoch, self.num_units(epoch))


def unit_at(units: Units, epoch: int, consumed: int) -> int:
    """The first unit that starts at or after `consumed` samples into the epoch (binary search, O(log n))."""
    lo, hi = 0, units.num_units(epoch)
    while lo < hi:
        mid = (lo + hi) // 2
        if units.offset(epoch, mid) < consumed:
            lo = mid + 1
        else:
            hi = mid
    return lo


class RoundRobinPlan:
    """Lockstep ranks over `Units`: the rest of the epoch (the batches an asynchronous learner's checkpoint
    left pending first, then every unit from the position on) is dealt round by round, unit j to rank
    j % world. The last round is filled with empty batches, so every rank takes the same number of steps
    and nothing is dropped. The position is the global sample count: any world size continues from it."""

    dropped = 0

    def __init__(self, units: Units, rank: int = 0, world: int = 1) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world size {world}")
        self.units, self.rank, self.world = units, rank, world
        self.resume(0, 0)

    def epoch_samples(self, epoch: int) -> int:
        return self.units.epoch_samples(epoch)

    def batches_per_epoch(self, epoch: int) -> int:
        return self.units.num_units(epoch)

    def resume(self, epoch: int, consumed: int, part: dict[str, Any] | None = None) -> int:
        self.epoch = epoch
        n = self.units.num_units(epoch)
        if part and part.get("epoch") == epoch and "claimed" in part:  # saved by asynchronous learners
            self.pending, self.start = list(part["all_pending"]), int(part["claimed"])
            consumed = self.units.offset(epoch, self.start) - sum(len(self.units.unit(epoch, k)) for k in self.pending)
        else:
            self.pending, self.start = [], unit_at(self.units, epoch, consumed)
        self.left = len(self.pending) + n - self.start
        return consumed

    def _unit(self, j: int) -> int | None:
        """The unit number of the rest's j-th batch; None past the end (an empty filler batch)."""
        if j >= self.left:
            return None
        return self.pending[j] if j < len(self.pending) else self.start + j - len(self.pending)

    def __len__(self) -> int:
        return math.ceil(self.left / self.world)

    def __iter__(self) -> Iterator[list[int]]:
        for r in range(len(self)):
            k = self._unit(r * self.world + self.rank)
            yield [] if k is None else self.units.unit(self.epoch, k)

    def advance(self, i: int) -> int:
        ks = (self._unit(i * self.world + r) for r in range(self.world))
        return sum(len(self.units.unit(self.epoch, k)) for k in ks if k is not None)

    def complete(self, consumed: int) -> bool:
        return consumed >= self.epoch_samples(self.epoch)

    def rank_state(self) -> dict[str, Any]:
        return {}

