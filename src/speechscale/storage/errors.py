"""The errors of reading and writing model files: each is one line on the command line (exit 2)."""
from __future__ import annotations

from ..config import ConfigError


class CheckpointError(RuntimeError):
    """The checkpoint is missing, torn or not a speechscale checkpoint."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (a full disk, a quota, a lost mount): the run stops on every rank."""


class ModelFileError(CheckpointError, ConfigError):
    """A model file (checkpoint, run folder, ONNX or TorchScript export, or a URL to one) that speechscale refuses
    to load: missing, unreadable, over a bound, malformed, or asking for something a model file never does. Raised
    before anything is built from the file; the message is one line naming the file and what is wrong. It is a
    CheckpointError and a ConfigError (a ValueError), so handlers of either catch it."""


def error_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type when the message is blank."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
