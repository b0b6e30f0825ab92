"""Distribution strategies (how ranks combine their work), chosen by `distributed.strategy`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .adpsgd import DelayByOneStrategy
from .allreduce import AllReduceStrategy
from .rings import RING_VARIANTS, RingStrategy
from .strategy import LocalStrategy, Strategy, join_process_group, launched_distributed

if TYPE_CHECKING:
    from ..config import DistributedConfig

# distributed.strategy -> how to build it under a distributed launcher (one process is always local)
STRATEGIES: dict[str, Callable[["DistributedConfig", int], Strategy]] = {
    "allreduce": lambda cfg, seed: AllReduceStrategy(cfg.timeout_s),
    "adpsgd": lambda cfg, seed: (RingStrategy(cfg.adpsgd.variant, timeout_s=cfg.adpsgd.timeout_s,
                                              skip_after_s=cfg.adpsgd.skip_after_s, seed=seed)
                                 if cfg.adpsgd.variant in RING_VARIANTS
                                 else DelayByOneStrategy(cfg.adpsgd.variant, timeout_s=cfg.adpsgd.timeout_s)),
}


def build_strategy(cfg: "DistributedConfig", seed: int = 0, device: str = "auto") -> Strategy:
    """The configured strategy under a distributed launcher, else the local strategy (a single process).
    `seed` (trainer.seed) draws random_ring's pairings; `device` (trainer.device) picks the default group's
    backend: nccl where ranks train on GPUs, gloo where they train on the CPU (also on a GPU machine)."""
    if not launched_distributed():
        return LocalStrategy()
    join_process_group(device, cfg.timeout_s if cfg.strategy == "allreduce" else cfg.adpsgd.timeout_s)
    return STRATEGIES[cfg.strategy](cfg, seed)


__all__ = ["STRATEGIES", "DelayByOneStrategy", "AllReduceStrategy", "RingStrategy", "LocalStrategy", "Strategy",
           "build_strategy"]
