"""Multi-domain mixing: several training manifests in one run, each drawn with its own probability.

    data:
      mix: [data/librispeech.jsonl, data/commonvoice.jsonl, data/accented.jsonl]
      mix_weights: []            # [] = in proportion to each domain's utterances (the default)
      mix_temperature: 1.0       # p_d ~ weight_d ** (1 / T): T > 1 flattens towards equal shares

An epoch keeps its size (all domains' utterances together) and gives domain d round(p_d x size) samples:
its utterances as often as the quota allows, each the same number of times within one, the remainder a
seeded random subset. The plan is a pure function of (seed, epoch), so resume stays O(1) and exact; the
per-domain counts go into the log and, with the run's history, into every checkpoint.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch


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
    stems = [Path(m).stem for m in manifests]
    return [s if stems.count(s) == 1 else f"{Path(m).parent.name}_{s}" for s, m in zip(stems, manifests)]


class MixPlan:
    """The dataset indices of each epoch for domains laid out one after another (sizes[d] utterances each)."""

    def __init__(self, sizes: Sequence[int], probs: Sequence[float], seed: int) -> None:
        self.sizes, self.seed = list(sizes), seed
        self.starts = [sum(self.sizes[:d]) for d in range(len(self.sizes))]
        self.quotas = quotas(probs, sum(self.sizes))

    def __call__(self, epoch: int) -> list[int]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 104_729)
        out: list[int] = []
        for start, size, quota in zip(self.starts, self.sizes, self.quotas):
            rest = torch.randperm(size, generator=gen)[: quota % size].tolist()
            out += [start + i for i in list(range(size)) * (quota // size) + rest]
        return out
