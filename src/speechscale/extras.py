"""Optional dependencies, named by the extra that installs them: a missing one is one line saying what to run.

    >>> require("json", "report", "a plot").__name__
    'json'
    >>> require("no_such_module_here", "report", "speechscale report")
    Traceback (most recent call last):
    ...
    speechscale.extras.MissingExtra: speechscale report needs no_such_module_here: pip install 'speechscale[report]'
"""
from __future__ import annotations

import importlib
from types import ModuleType

from .config import ConfigError


class MissingExtra(ConfigError):
    """An optional dependency is not installed (the message names the extra that installs it)."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import `module`, or raise MissingExtra: `what` needs it, and `pip install 'speechscale[extra]'` brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(f"{what} needs {module.split('.')[0]}: pip install 'speechscale[{extra}]'") from None
