"""speechscale: train end-to-end speech recognition models, from one CPU to many GPUs.

    import speechscale
    speechscale.train("yesno", data={"root": "data/yesno"})          # a built-in recipe; returns the summary
    model = speechscale.load("runs/yesno/checkpoints/best.pt")        # a checkpoint, ONNX or TorchScript file
    model.transcribe("speech.flac").text                               # a Transcript: text, duration, words

A model file `load` refuses (missing, malformed, over a bound, or asking for what a model file never does) raises
`speechscale.ModelFileError`, one line saying why, before anything is built from it.

The API lives in `speechscale.api` (examples there); importing the package loads nothing else until one of
these names is used.
"""
from typing import Any

__version__ = "0.1.0"
__all__ = ["Model", "ModelFileError", "Transcript", "Word", "load", "train", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "ModelFileError":  # what `load` raises for a model file it refuses (docs/untrusted-files.md)
        from .storage.errors import ModelFileError

        return ModelFileError
    if name in ("Model", "Transcript", "Word", "load", "train"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'speechscale' has no attribute {name!r}")
