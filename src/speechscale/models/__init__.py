"""Acoustic models trained with CTC; `build_model` picks one by its config name."""
from .registry import MODELS, build_model

__all__ = ["MODELS", "build_model"]
