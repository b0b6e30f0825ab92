"""Distribution strategies (how ranks combine their work), chosen by `distributed.strategy`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .adpsgd import ADPSGDStrategy
from .allreduce import AllReduceStrategy
from .strategy import LocalStrategy, Strategy, launched_distributed

if TYPE_CHECKING:
    from ..config import DistributedConfig

# distributed.strategy -> how to build it under a distributed launcher (one process is always local)
STRATEGIES: dict[str, Callable[["DistributedConfig"], Strategy]] = {
    "allreduce": lambda cfg: AllReduceStrategy(),
    "adpsgd": lambda cfg: ADPSGDStrategy(cfg.adpsgd.variant),
}


def build_strategy(cfg: "DistributedConfig") -> Strategy:
    """The configured strategy under a distributed launcher, else the local strategy (a single process)."""
    from ..config import check_choice

    check_choice("distributed.strategy", cfg.strategy, tuple(STRATEGIES))
    if not launched_distributed():
        return LocalStrategy()
    return STRATEGIES[cfg.strategy](cfg)


__all__ = ["STRATEGIES", "ADPSGDStrategy", "AllReduceStrategy", "LocalStrategy", "Strategy", "build_strategy"]
