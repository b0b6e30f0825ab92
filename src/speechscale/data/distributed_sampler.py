"""The epoch's batches dealt out to data-parallel ranks; resumable onto any number of ranks.

An epoch's plan is a pure function of (seed, epoch): the BucketBatchSampler's batches, read as one flat
sequence of sample ids. Training consumes that sequence from the front, one *round* at a time (one batch
per rank), so its position is a single number: samples consumed globally. To continue, possibly with a
different number of ranks, the unconsumed rest is cut back into the original batches (the first may be
a remainder), batches are split in two until every rank gets the same number (no rank waits at the
epoch's end), and round r gives rank k batch r*W + k. No sample of the epoch is skipped or repeated.

    >>> from speechscale.data.sampler import BucketBatchSampler
    >>> base = BucketBatchSampler([1.0] * 6, batch_seconds=2.0, shuffle=False)  # [0,1] [2,3] [4,5]
    >>> s = ShardedBatchSampler(base, rank=1, world_size=2)  # [4,5] splits: [0,1] [2,3] | [4] [5]
    >>> list(s), s.round_samples
    ([[2, 3], [5]], [4, 2])
    >>> s.resume(epoch=0, consumed=1); list(s), s.round_samples  # the rest: [1] [2,3] | [4] [5]
    ([[2, 3], [5]], [3, 2])
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol

from .plan import Units, unit_at
from .sampler import BucketBatchSampler


def deal(batches: list[list[int]], world_size: int) -> tuple[list[list[list[int]]], int]:
    """Split batches (in place order, each into two contiguous halves, largest first) until their count
    divides by `world_size`; return rounds of `world_size` batches and the number of samples dropped
    (only when fewer samples than ranks remain)."""
    batches = [list(b) for b in batches if b]
    while len(batches) % world_size:
        i = max(range(len(batches)), key=lambda j: (len(batches[j]), j))
        if len(batches[i]) < 2:
            break
        b = batches[i]
        batches[i:i + 1] = [b[: len(b) // 2], b[len(b) // 2:]]
    dropped = 0
    if len(batches) % world_size:  # fewer samples left than ranks: the tail cannot be shared out evenly
        keep = len(batches) - len(batches) % world_size
        dropped = sum(len(b) for b in batches[keep:])
        batches = batches[:keep]
    rounds = [batches[r:r + world_size] for r in range(0, len(batches), world_size)]
    return rounds, dropped


class ShardedBatchSampler:
    """Yields this rank's batches of the current epoch from the current position; see the module doc.

    `round_samples[i]` is how many samples round i consumes over all ranks: the trainer adds it to its
    global position after each step, so the position is right even when loader workers run ahead.
    """

    def __init__(self, base: BucketBatchSampler, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        self.base = base
        self.rank = rank
        self.world_size = world_size
        self.resume(0, 0)

    def epoch_samples(self, epoch: int) -> int:
        """Samples in the epoch's plan (all ranks together)."""
        return sum(len(b) for b in self.base.batches(epoch))

    def batches_per_epoch(self, epoch: int) -> int:
        """Batches in the epoch's plan (all ranks together, before splitting for the world size)."""
        return len(self.base.batches(epoch))

    def resume(self, epoch: int, consumed: int, part: dict[str, Any] | None = None) -> int:
        """Position the sampler at `consumed` samples into `epoch` and plan the rest for this world size;
        returns the position (from `part` when asynchronous learners saved it: their pending batches first)."""
        self.epoch = epoch
        rest: list[list[int]] = []
        seen = 0
        batches = self.base.batches(epoch)
        if part and part.get("epoch") == epoch and "claimed" in part:  # saved by asynchronous learners:
            rest = [batches[k] for k in part["all_pending"]] + batches[part["claimed"]:]  # their pending first
            consumed = self.epoch_samples(epoch) - sum(len(b) for b in rest)
        for b in batches if not rest else []:
            if seen + len(b) > consumed:
                rest.append(b[max(0, consumed - seen):])
            seen += len(b)
        self.rounds, self.dropped = deal(rest, self.world_size)
        self.round_samples = [sum(len(b) for b in r) for r in self.rounds]
        return consumed

    def __len__(self) -> int:
        """Rounds (= this rank's batches) left in the planned part of the epoch."""
        return len(self.rounds)

    def __iter__(self) -> Iterator[list[int]]:
        for r in self.rounds:
            yield r[self.rank]

    def advance(self, i: int) -> int:
        """Samples the epoch's position moves when batch `i` of this pass has been trained (all ranks)."""
        return self.round_samples[i]

    def complete(self, consumed: int) -> bool:
        """Whether `consumed` samples finish the epoch's plan (a tail too short to share out is dropped)."""
        return consumed >= self.epoch_samples(self.epoch) - self.dropped

    def rank_state(self) -> dict[str, Any]:
        """Nothing per rank: the position is the one global count the trainer keeps."""
        return {}


class Claims(Protocol):
    """A position shared by asynchronous learners (distributed/gossip.py SharedClaims)."""

    def start(self, epoch: int, claimed: int) -> None: ...
    def next(self, epoch: int) -> int: ...
    def count(self, epoch: int) -> int: ...


class ClaimedBatchSampler:
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
        return {"epoch": self.epoch, "claimed": self.claims.count(self.epoch), "pending": self.claimed[self.trained:]}
