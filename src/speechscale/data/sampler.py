"""Duration-bucketed batches bounded by total audio seconds, with SortaGrad; resumable in O(1).

The batch order of an epoch is a pure function of (seed, epoch): the sampler can jump to any position.

    >>> s = BucketBatchSampler([1.0, 2.0, 3.0, 1.5], batch_seconds=3.5, seed=0, sortagrad=True)
    >>> list(s)          # epoch 0 with SortaGrad: shortest first
    [[0, 3], [1], [2]]
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import torch

from ..storage.seeds import generator


def pack_batches(indices: Sequence[int], durations: Sequence[float], batch_seconds: float,
                 max_batch_size: int) -> list[list[int]]:
    """Greedily pack `indices` in order into batches whose padded size (n * longest) stays within batch_seconds."""
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0.0
    for i in indices:
        d = durations[i]
        new_longest = max(longest, d)
        if cur and (new_longest * (len(cur) + 1) > batch_seconds or len(cur) >= max_batch_size):
            batches.append(cur)
            cur, new_longest = [], d
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    return batches


class BucketBatchSampler:
    """Yields lists of dataset indices; utterances of similar duration share a batch.

    Batches are bounded by *padded* audio seconds (batch size x longest utterance), so memory per step is
    bounded whatever the durations. Epoch 0 runs shortest-first when `sortagrad` is set.
    """

    def __init__(self, durations: Sequence[float], batch_seconds: float, max_batch_size: int = 64,
                 num_buckets: int = 10, seed: int = 0, sortagrad: bool = False, shuffle: bool = True,
                 mix: Callable[[int], list[int]] | None = None) -> None:
        self.durations = list(durations)
        self.batch_seconds = batch_seconds
        self.max_batch_size = max_batch_size
        self.num_buckets = max(1, num_buckets)
        self.seed = seed
        self.sortagrad = sortagrad
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0  # batches already consumed in the current epoch
        self._order = sorted(range(len(self.durations)), key=lambda i: (self.durations[i], i))
        self.mix = mix  # the indices of each epoch when not every utterance once (multi-domain mixing)
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order is produced next and restart at its beginning."""
        self.epoch = epoch
        self.position = 0

    def batches(self, epoch: int) -> list[list[int]]:
        """All batches of `epoch`, in order (a pure function of seed and epoch); the last epoch asked is cached."""
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make_batches(epoch))
        return self._cache[1]

    def _make_batches(self, epoch: int) -> list[list[int]]:
        order = self._order if self.mix is None else sorted(self.mix(epoch), key=lambda i: (self.durations[i], i))
        if not self.shuffle or (self.sortagrad and epoch == 0):
            return pack_batches(order, self.durations, self.batch_seconds, self.max_batch_size)
        gen = generator(self.seed, "order", epoch)
        n = len(order)
        out: list[list[int]] = []
        for b in range(self.num_buckets):
            bucket = order[b * n // self.num_buckets:(b + 1) * n // self.num_buckets]
            perm = torch.randperm(len(bucket), generator=gen).tolist()
            out.extend(pack_batches([bucket[p] for p in perm], self.durations, self.batch_seconds,
                                    self.max_batch_size))
        return [out[p] for p in torch.randperm(len(out), generator=gen).tolist()]

    def __len__(self) -> int:
        """Batches in the current epoch (SortaGrad's epoch 0 packs tighter than shuffled epochs)."""
        return len(self.batches(self.epoch))

    def __iter__(self) -> Iterator[list[int]]:
        todo = self.batches(self.epoch)[self.position:]
        for batch in todo:
            self.position += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position, self.seed = int(state["epoch"]), int(state["position"]), int(state["seed"])
        self._cache = None
