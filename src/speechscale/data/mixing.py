"""Multi-domain mixing: several training manifests in one run, each drawn with its own probability.

    data:
      mix: [data/librispeech.jsonl, data/commonvoice.jsonl, data/accented.jsonl]
      mix_weights: []            # [] = in proportion to each domain's utterances (the default)
      mix_temperature: 1.0       # p_d ~ weight_d ** (1 / T): T > 1 flattens towards equal shares

An epoch keeps its size (all domains' utterances together) and gives domain d round(p_d x size) samples:
its utterances as often as the quota allows, each the same number of times within one, the remainder a
seeded random subset. The plan is a pure function of (seed, epoch), so resume stays O(1) and exact; the
per-domain counts go into the log and, with the run's history, into every checkpoint.

Shard sets (data/shard_stream.py) mix batch by batch instead (`MixedUnits`): an epoch keeps (about) its size in
samples and gives domain d as many of its own duration-bucketed batches as carry p_d of the samples,
interleaved in a seeded order; a domain above its share repeats its epoch's batches, one below it takes a
prefix of its shuffled epoch (a random subset of its shards). With the default weights every utterance of
every domain is read once per epoch, as from one corpus.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ..storage.seeds import generator

if TYPE_CHECKING:
    from .batch_plan import Units


def domain_probabilities(sizes: Sequence[int], weights: Sequence[float] = (), temperature: float = 1.0
                         ) -> list[float]:
    """p_d proportional to weight_d ** (1 / temperature); the weights default to the domains' sizes."""
    base = [float(w) for w in (weights or sizes)]
    scaled = [w ** (1.0 / temperature) for w in base]
    total = sum(scaled)
    return [s / total for s in scaled]


def quotas(probs: Sequence[float], total: int) -> list[int]:
    """Integers proportional to `probs` that sum to `total` exactly (largest remainders get the rest)."""
    raw = [p * total for p in probs]
    out = [int(r) for r in raw]
    for d in sorted(range(len(raw)), key=lambda d: (out[d] - raw[d], d))[:total - sum(out)]:
        out[d] += 1
    return out


def domain_names(manifests: Sequence[str]) -> list[str]:
    """Short unique names: the file's stem, with its folder when two stems collide."""
    paths = [Path(m) if Path(m).suffix else Path(m) / "index.jsonl" for m in manifests]
    stems = [p.parent.name if p.name == "index.jsonl" else p.stem for p in paths]  # a shard index: its folder
    return [s if stems.count(s) == 1 else f"{p.parent.name}_{s}" for s, p in zip(stems, paths)]


class MixPlan:
    """The dataset indices of each epoch for domains laid out one after another (sizes[d] utterances each)."""

    def __init__(self, sizes: Sequence[int], probs: Sequence[float], seed: int) -> None:
        self.sizes, self.seed = list(sizes), seed
        self.starts = [sum(self.sizes[:d]) for d in range(len(self.sizes))]
        self.quotas = quotas(probs, sum(self.sizes))

    def __call__(self, epoch: int) -> list[int]:
        gen = generator(self.seed, "mix", epoch)
        out: list[int] = []
        for start, size, quota in zip(self.starts, self.sizes, self.quotas):
            rest = torch.randperm(size, generator=gen)[: quota % size].tolist()
            out += [start + i for i in list(range(size)) * (quota // size) + rest]
        return out


class MixedUnits:
    """`Units` of several domains' streams mixed batch by batch (see the module doc). Domain d's utterance
    ids are offset by `bases[d]`. Per epoch it keeps three arrays of one entry per batch (domain, the
    domain's batch number, samples before it): a few bytes per batch."""

    def __init__(self, parts: Sequence["Units"], probs: Sequence[float], bases: Sequence[int], seed: int) -> None:
        self.parts, self.probs, self.bases, self.seed = list(parts), list(probs), list(bases), seed
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]] = {}

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        if epoch not in self._epochs:
            # each domain's batch sizes, read once in order (its windows are planned once, not per visit)
            sizes = [np.fromiter((len(p.unit(epoch, k)) for k in range(p.num_units(epoch))), np.int64)
                     for p in self.parts]
            total = sum(int(s.sum()) for s in sizes)
            q = [_batches_for(s, p * total) for s, p in zip(sizes, self.probs)]
            gen = generator(self.seed, "mix", epoch)
            labels = np.repeat(np.arange(len(q), dtype=np.int16), q)[torch.randperm(sum(q), generator=gen).numpy()]
            nth = np.zeros(len(labels), dtype=np.int64)  # the domain's batch number of each batch
            lens = np.zeros(len(labels), dtype=np.int64)
            for d in range(len(q)):
                nth[labels == d] = np.arange(q[d]) % len(sizes[d])
                lens[labels == d] = sizes[d][nth[labels == d]]
            self._epochs = {e: v for e, v in self._epochs.items() if e > epoch - 2}
            self._epochs[epoch] = (labels, nth, np.concatenate([[0], np.cumsum(lens)]), q)
        return self._epochs[epoch]

    def num_units(self, epoch: int) -> int:
        return len(self._epoch(epoch)[0])

    def unit(self, epoch: int, k: int) -> list[int]:
        labels, nth, _, _ = self._epoch(epoch)
        d = int(labels[k])
        return [self.bases[d] + i for i in self.parts[d].unit(epoch, int(nth[k]))]

    def offset(self, epoch: int, k: int) -> int:
        return int(self._epoch(epoch)[2][k])

    def epoch_samples(self, epoch: int) -> int:
        return int(self._epoch(epoch)[2][-1])

    def domain_samples(self, epoch: int) -> list[int]:
        """Samples each domain contributes to `epoch`."""
        labels, _, cum, _ = self._epoch(epoch)
        lens = np.diff(cum)
        return [int(lens[labels == d].sum()) for d in range(len(self.parts))]


def _batches_for(sizes: np.ndarray, target: float) -> int:
    """How many of a domain's batches (of `sizes`, repeated as needed) carry `target` samples, to within
    half a batch (its batches differ in size)."""
    k, got = 0, 0
    while target > 0:
        size = int(sizes[k % len(sizes)])
        if got + size / 2 > target:
            break
        k, got = k + 1, got + size
    return max(k, 1 if target > 0 else 0)
