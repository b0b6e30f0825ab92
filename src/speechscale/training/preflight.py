"""Checks that need the file system or the data, run before any work starts; each fails in one line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import ConfigError
from . import storage


def check_writable(where: str | Path, key: str) -> None:
    """ConfigError when a local folder cannot be created or written (remote URLs: the first write tells)."""
    if storage.is_remote(where):
        return
    try:
        storage.check_writable(where)
    except OSError as e:
        raise ConfigError(f"{key}: cannot write to {where} ({e.strerror or e})") from None


def check_batch_bound(utts: list[Any], batch_seconds: float) -> None:
    """A batch holds at least one utterance: one longer than data.batch_seconds would break the bound."""
    longest = max(utts, key=lambda u: u.duration)
    if longest.duration > batch_seconds:
        raise ConfigError(f"data.batch_seconds={batch_seconds:g} is shorter than the longest training utterance "
                          f"({longest.duration:g} s, manifest line {longest.line}); raise data.batch_seconds or "
                          f"set data.max_duration={batch_seconds:g} to skip longer ones")
