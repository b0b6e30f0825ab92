"""speechscale: train end-to-end speech recognition models, from one CPU to many GPUs.

    import speechscale
    speechscale.train("yesno", data={"root": "data/yesno"})          # a built-in recipe; returns the summary
    model = speechscale.load("runs/yesno/checkpoints/best.pt")        # a checkpoint, ONNX or TorchScript file
    model.transcribe("speech.flac").text                               # a Transcript: text, duration, words

The API lives in `speechscale.api` (examples there); importing the package loads nothing else until one of
these names is used.
"""
from typing import Any

__version__ = "0.1.0"
__all__ = ["Model", "Transcript", "Word", "load", "train", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Model", "Transcript", "Word", "load", "train"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'speechscale' has no attribute {name!r}")
