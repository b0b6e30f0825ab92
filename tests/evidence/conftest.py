"""The workshop's helpers (benchmarks/, this repository's own figures): only tests/evidence imports it."""
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import main_cli, run_cli


def run_benchmarks(*args: str, **kwargs: Any) -> subprocess.CompletedProcess:
    """Run the workshop's `python -m benchmarks ARGS` from the checkout as a real process (as `run_cli`)."""
    return run_cli(*args, module="benchmarks", **kwargs)


def main_benchmarks(capsys, *args: str) -> tuple[int, str, str]:
    """The workshop's `python -m benchmarks ARGS` in this process (as `main_cli`)."""
    from benchmarks.__main__ import main

    return main_cli(capsys, *args, main=main)


@pytest.fixture
def workshop(capsys):
    """The workshop's `python -m benchmarks ARGS` in this process, answered as the `cli` fixture answers."""
    def call(*args: str, check: bool = True) -> SimpleNamespace:
        code, out, err = main_benchmarks(capsys, *args)
        assert not check or code == 0, err
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return call
