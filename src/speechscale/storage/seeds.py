"""Seeds: one function derives every per-purpose seed; the generators' states saved and restored as plain data.

`derive_seed(seed, purpose, *keys)` replaces the mixing constants that were spread over the data, sampler,
mixing, ring and trainer modules. Each purpose keeps the exact formula it had, so runs and checkpoints made
before it draw the same numbers.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

_A, _B, _C = 7919, 1_000_003, 104_729  # primes that keep the per-purpose streams apart


def derive_seed(seed: int, purpose: str, *keys: int) -> int:
    """The seed for one `purpose` ("order", "item", "mix", "pairs", "process") and its keys (epoch, index, rank...).

    >>> derive_seed(1, "order", 2) == 1 * 1_000_003 + 2
    True
    """
    if purpose == "order":  # (epoch,) or (round,): a sampler's shuffle, a ring's pairing
        (epoch,) = keys
        return seed * _B + epoch
    if purpose == "item":  # (epoch, index): one utterance's (or stream worker's) augmentation
        epoch, index = keys
        return (seed * _A + epoch) * _B + index
    if purpose == "mix":  # (epoch,): a domain mixture's draws
        (epoch,) = keys
        return seed * _B + epoch + _C
    if purpose == "process":  # (rank,) or (rank, step): a process's dropout and other global streams
        rank, step = (*keys, 0) if len(keys) == 1 else keys
        return seed + _A * rank + _C * step
    raise ValueError(f"unknown seed purpose {purpose!r}")


def generator(seed: int, purpose: str, *keys: int) -> torch.Generator:
    """A torch CPU generator seeded with `derive_seed(seed, purpose, *keys)`."""
    return torch.Generator().manual_seed(derive_seed(seed, purpose, *keys))


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states as tensors/plain data (weights_only-safe)."""
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]),
                  int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])
