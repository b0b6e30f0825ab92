"""Data-parallel training: strategies (how ranks combine their work) and the process group set-up."""
from .strategy import STRATEGIES, AllReduceStrategy, LocalStrategy, Strategy, build_strategy

__all__ = ["STRATEGIES", "AllReduceStrategy", "LocalStrategy", "Strategy", "build_strategy"]
