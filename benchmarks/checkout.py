"""Which code this checkout's figures come from: its git HEAD, "+changes" when tracked files other than the figures
and BENCHMARKS.md differ (writing figures does not make the measured code changed)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout_commit() -> str:
    """HEAD of this checkout (10 hex digits), "+changes" when measured code differs from it; "unknown" without git."""
    from speechscale.bench.harness import git_commit

    return git_commit(ROOT, ignore=("docs/figures", "BENCHMARKS.md"))


def pin_commit() -> None:
    """Name this checkout's commit in $SPEECHSCALE_COMMIT (unless a launcher already did), which every bench's
    provenance reads, in this process and the ones it starts."""
    os.environ.setdefault("SPEECHSCALE_COMMIT", checkout_commit())
