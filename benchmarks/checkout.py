"""Which code this checkout's figures come from: its git HEAD, "+changes" when tracked files other than the figures
and BENCHMARKS.md with its area pages differ (writing figures does not make the measured code changed); and the
record a protocol writes, naming the command that made it."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def checkout_commit() -> str:
    """HEAD of this checkout (10 hex digits), "+changes" when measured code differs from it; "unknown" without git."""
    from speechscale.bench.harness import git_commit

    return git_commit(ROOT, ignore=("docs/figures", "docs/benchmarks", "BENCHMARKS.md"))


def pin_commit() -> None:
    """Name this checkout's commit in $SPEECHSCALE_COMMIT (unless a launcher already did), which every bench's
    provenance reads, in this process and the ones it starts."""
    os.environ.setdefault("SPEECHSCALE_COMMIT", checkout_commit())


def record(out: str, module: str, argv: list[str] | None, results: Any, settings: dict[str, Any],
           began: float) -> None:
    """Write a protocol's `results` to `out` (JSON with provenance: bench.harness.write_json), with the command
    `python -m MODULE ARGS` that made them and the seconds since `began` (time.perf_counter)."""
    from speechscale.bench.harness import write_json

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    command = ["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]
    write_json(Path(out), results, command=command, settings=settings, seconds=time.perf_counter() - began)
