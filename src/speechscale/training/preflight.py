"""Checks that need the file system or the data, run before any work starts; each fails in one line."""
from __future__ import annotations

from pathlib import Path

from .. import storage
from ..config import ConfigError


def check_writable(where: str | Path, key: str) -> None:
    """ConfigError when a local folder cannot be created or written (remote URLs: the first write tells)."""
    if storage.is_remote(where):
        return
    try:
        storage.check_writable(where)
    except OSError as e:
        raise ConfigError(f"{key}: cannot write to {where} ({e.strerror or e})") from None

