"""Shared fixtures: paths to ../shared/data, a tiny trained checkpoint, a CLI runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def shared(*parts: str) -> Path:
    """A path inside ../shared/data; skips the test when the shared data is absent."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not found: {p}")
    return p


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m speechscale.cli ARGS` as a real process; returns the completed process."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "speechscale.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"speechscale {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def main_cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run `speechscale ARGS` in this process (no interpreter start-up: for argument and config errors);
    returns (exit code, stdout, stderr)."""
    from speechscale.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse: --version, --help, usage errors
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="session")
def ldc_checkpoint(tmp_path_factory) -> Path:
    """A ds2-tiny model overfit on LDC93S1 by the real CLI (`configs/ldc93s1.yaml`)."""
    shared("ldc93s1", "manifest.jsonl")
    out = tmp_path_factory.mktemp("ldc")
    proc = run_cli("-q", "train", "--config", "configs/ldc93s1.yaml", f"trainer.out_dir={out}")
    assert (out / "checkpoints" / "best.pt").is_file(), proc.stderr
    return out / "checkpoints" / "best.pt"
