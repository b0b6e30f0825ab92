"""How an epoch's batches reach the ranks: the plan interface the trainer drives, and its two plans.

Every source of training data, a manifest in memory or a stream of tar shards, is an epoch of numbered
batches ("units", `Units`): a pure function of (seed, epoch), addressed by number. `ListUnits` wraps the
in-memory bucket sampler, `ShardUnits` (data/shard_stream.py) a shard index, computed window by window.

A plan (`BatchPlan`) yields this rank's batches of the current epoch, says how far the epoch's position moves
when batch i has been trained, whether a position completes the epoch, and restarts at any position in O(1)
(no replay of the epoch's earlier batches). The strategy picks the plan (`Strategy.make_plan`):

- `LockstepPlan`: ranks that step together are dealt the rest of the epoch round by round, unit j to rank
  j % world; the last round is filled with empty batches (the trainer runs a zero-weight placeholder), so
  every rank takes the same number of steps and nothing is dropped or repeated. The position is the global
  sample count, so any world size continues from it.
- `ClaimedPlan`: asynchronous learners each claim the epoch's next unclaimed unit from a shared counter.

    >>> from speechscale.data.sampler import BucketBatchSampler
    >>> units = ListUnits(BucketBatchSampler([1.0] * 6, batch_seconds=2.0, shuffle=False))  # [0,1] [2,3] [4,5]
    >>> plan = LockstepPlan(units, rank=1, world=2)
    >>> list(plan), [plan.advance(i) for i in range(len(plan))]
    ([[2, 3], []], [4, 2])
    >>> plan.resume(epoch=0, consumed=1); list(plan)  # the rest: [1] [2,3] | [4,5]
    1
    [[2, 3], []]
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

    def restart(self, consumed: int) -> None:
        """This rank alone, after its loader's workers died: the next pass yields the rest of the current epoch
        from where this rank's trained batches end (`consumed`: the trainer's position)."""
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


class LockstepPlan:
    """Lockstep ranks over `Units`; see the module doc. The rest of an epoch is, in order: the units an
    asynchronous learners' checkpoint left pending, the remainder of a unit the position falls inside (a
    checkpoint of an older plan that split batches), then every unit from the position on."""

    dropped = 0

    def __init__(self, units: Units, rank: int = 0, world: int = 1) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world size {world}")
        self.units, self.rank, self.world = units, rank, world
        self.resume(0, 0)

    def epoch_samples(self, epoch: int) -> int:
        """Samples in the epoch (all ranks together)."""
        return self.units.epoch_samples(epoch)

    def batches_per_epoch(self, epoch: int) -> int:
        """Units in the epoch (all ranks together)."""
        return self.units.num_units(epoch)

    def resume(self, epoch: int, consumed: int, part: dict[str, Any] | None = None) -> int:
        """Start `epoch` at `consumed` samples (all ranks together); returns the position."""
        self.epoch = epoch
        n = self.units.num_units(epoch)
        self.head: list[list[int]] = []
        if part and part.get("epoch") == epoch and "claimed" in part:  # saved by asynchronous learners
            self.start = min(int(part["claimed"]), n)  # older checkpoints counted claims past the end
            self.head = [self.units.unit(epoch, k) for k in part["all_pending"]]
            consumed = self.units.offset(epoch, self.start) - sum(len(b) for b in self.head)
        else:
            self.start = unit_at(self.units, epoch, consumed)
            if self.start > 0 and self.units.offset(epoch, self.start) > consumed:  # inside unit start - 1
                inside = self.units.unit(epoch, self.start - 1)
                self.head = [inside[consumed - self.units.offset(epoch, self.start - 1):]]
        self.left = len(self.head) + n - self.start
        return consumed

    def _batch(self, j: int) -> list[int] | None:
        """The rest's j-th batch; None past the end (an empty filler batch)."""
        if j >= self.left:
            return None
        return self.head[j] if j < len(self.head) else self.units.unit(self.epoch, self.start + j - len(self.head))

    def __len__(self) -> int:
        """Rounds (= this rank's batches) left in the epoch."""
        return math.ceil(self.left / self.world)

    def __iter__(self) -> Iterator[list[int]]:
        for r in range(len(self)):
            yield self._batch(r * self.world + self.rank) or []

    def restart(self, consumed: int) -> None:
        """The rest of the epoch from `consumed`, as every rank computes it (a pure function of the position)."""
        self.resume(self.epoch, consumed)

    def advance(self, i: int) -> int:
        """Samples the epoch's position moves when round `i` of this pass has been trained (all ranks)."""
        return sum(len(self._batch(i * self.world + r) or []) for r in range(self.world))

    def complete(self, consumed: int) -> bool:
        return consumed >= self.epoch_samples(self.epoch)

    def rank_state(self) -> dict[str, Any]:
        """Nothing per rank: the position is the one global count the trainer keeps."""
        return {}


class Claims(Protocol):
    """A position shared by asynchronous learners (distributed/rings.py SharedClaims)."""

    def start(self, epoch: int, claimed: int) -> None: ...
    def next(self, epoch: int) -> int: ...
    def count(self, epoch: int) -> int: ...


class ClaimedPlan:
    """Asynchronous learners: each takes the epoch's next unclaimed batch from a counter they share, at its
    own pace, so a fast learner reads more than a slow one and the epoch ends when every batch of the plan
    was handed out once. The position per learner is the batches it claimed but has not trained yet (loader
    workers run ahead); a checkpoint keeps them, so after a resume nothing is read twice or left out.
    Works over any `Units` (a manifest's batches or a shard stream's)."""

    dropped = 0

    def __init__(self, units: Units, claims: Claims) -> None:
        self.units, self.claims = units, claims
        self.epoch, self.trained, self.exhausted = 0, 0, False
        self.claimed: list[int] = []

    def epoch_samples(self, epoch: int) -> int:
        return self.units.epoch_samples(epoch)

    def batches_per_epoch(self, epoch: int) -> int:
        return self.units.num_units(epoch)

    def resume(self, epoch: int, consumed: int, part: dict[str, Any] | None = None) -> int:
        """Collective: start `epoch` where the learners' checkpointed parts left it (`part`: this learner's);
        returns the position."""
        part = part if part and part.get("epoch") == epoch else {}
        self.epoch, self.n = epoch, self.units.num_units(epoch)
        self.claimed, self.trained, self.exhausted = list(part.get("pending", [])), 0, False
        self.seen = consumed
        k = unit_at(self.units, epoch, consumed)
        self.claims.start(epoch, int(part.get("claimed", k if self.units.offset(epoch, k) == consumed else 0)))
        return consumed

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[list[int]]:
        yield from (self.units.unit(self.epoch, k) for k in list(self.claimed))  # claimed before the checkpoint
        while (k := self.claims.next(self.epoch)) < self.n:
            self.claimed.append(k)
            yield self.units.unit(self.epoch, k)
        self.exhausted = True

    def restart(self, consumed: int) -> None:
        """Not collective: the batches this learner claimed but did not train come first again, then new claims
        (the shared counter is left as it is)."""
        self.claimed, self.trained, self.exhausted = self.claimed[self.trained:], 0, False

    def advance(self, i: int) -> int:
        """Samples the epoch's shared position moved, as far as this learner saw it with batch `i`'s claim."""
        self.trained = i + 1
        new = max(self.units.offset(self.epoch, self.claimed[i] + 1) - self.seen, 0)
        self.seen += new
        return new

    def complete(self, consumed: int) -> bool:
        return self.exhausted and self.trained == len(self.claimed)

    def rank_state(self) -> dict[str, Any]:
        """Collective-safe (called at sync points): the epoch, batches handed out, this learner's pending ones."""
        # a learner's loader asking after the last batch moves the counter past the end: the position is n
        return {"epoch": self.epoch, "claimed": min(self.claims.count(self.epoch), self.n),
                "pending": self.claimed[self.trained:]}
