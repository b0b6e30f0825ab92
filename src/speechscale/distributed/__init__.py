"""Data-parallel training: strategies (how ranks combine their work) and the process group set-up."""
from .strategy import AllReduceStrategy, LocalStrategy, Strategy, build_strategy

__all__ = ["AllReduceStrategy", "LocalStrategy", "Strategy", "build_strategy"]
