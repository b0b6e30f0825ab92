"""Reading a training run's folder (metrics.jsonl, config.json, checkpoints/) into plain series, while it
runs or after it was resumed any number of times."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import finite_number, parse_json
from ..data.dataset import SKIP_REASONS

SKIP_COUNTS = tuple(dict.fromkeys((*SKIP_REASONS, "nonfinite_loss", "nonfinite_grad", "dropped_tail")))


class RunError(ValueError):
    """RUN_DIR is not a training run's folder (one line)."""


@dataclass
class Segment:
    """One process's stretch of training: from a `start` row (or the first row of an old log) to the next."""

    start_time: float
    start_step: int
    world_size: int | None = None
    strategy: str | None = None
    precision: str | None = None
    resumed_from: str | None = None
    end_time: float | None = None
    end_step: int | None = None
    stopped_by: str | None = None
    ended: bool = False  # a `stop` row closed it (otherwise: still running, or killed)


@dataclass
class Run:
    """Everything the report shows."""

    path: Path
    rows: list[dict[str, Any]]
    torn_lines: int
    config: dict[str, Any] | None
    segments: list[Segment] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("kind") == kind]

    @property
    def t0(self) -> float:
        return self.rows[0]["time"] if self.rows else time.time()

    @property
    def status(self) -> str:
        if not self.segments:
            return "no training rows yet"
        last = self.segments[-1]
        if last.ended:
            return f"stopped by {last.stopped_by}" if last.stopped_by else "finished"
        age = time.time() - self.rows[-1]["time"]
        return f"running, or stopped without a stop row (last line {_ago(age)} ago)"


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _segments(rows: list[dict[str, Any]]) -> list[Segment]:
    """Starts and stops from `start`/`stop` rows; for logs without them, a new segment wherever the step
    goes backwards (a resume from an older checkpoint)."""
    segs: list[Segment] = []
    last_step = None
    for r in rows:
        kind = r.get("kind")
        new = kind == "start" or not segs or (last_step is not None and r["step"] < last_step and kind != "stop")
        if new:  # the previous segment keeps the time and step of its own last row
            segs.append(Segment(r["time"], r["step"], r.get("world_size"), r.get("strategy"), r.get("precision"),
                                r.get("resumed_from")))
        seg = segs[-1]
        seg.end_time, seg.end_step = r["time"], r["step"]
        if kind == "stop":
            seg.ended, seg.stopped_by = True, r.get("stopped_by")
        last_step = r["step"]
    return segs


def _well_formed(row: Any) -> bool:
    """A row the report can read: a str kind, a number time, an int step, and numbers where it does arithmetic."""
    return isinstance(row, dict) and isinstance(row.get("kind"), str) and finite_number(row.get("time")) \
        and isinstance(row.get("step"), int) and not isinstance(row["step"], bool) \
        and all(finite_number(row[k]) for k in ("samples", *SKIP_COUNTS) if k in row)


def _checkpoints(run_dir: Path) -> list[dict[str, Any]]:
    """Name, size and time of each checkpoint file (read from the file system only: nothing is unpickled)."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    out = []
    for p in sorted(folder.iterdir(), key=lambda q: q.stat().st_mtime):
        if p.is_file() and p.suffix == ".pt":
            st = p.stat()
            out.append({"name": p.name, "mb": round(st.st_size / 2 ** 20, 2), "time": st.st_mtime})
    return out


def load_run(run_dir: str | Path) -> Run:
    """The run in `run_dir`; a torn last line (a run being written) is skipped and counted."""
    path = Path(run_dir)
    metrics = path / "metrics.jsonl"
    if not path.is_dir():
        raise RunError(f"{path}: {'not a folder' if path.exists() else 'no such folder'}")
    if not metrics.is_file():
        raise RunError(f"{path}: no metrics.jsonl (is this a run's trainer.out_dir or trainer.log_dir?)")
    try:
        text = metrics.read_bytes().decode()
    except UnicodeDecodeError as e:
        raise RunError(f"{metrics}: not UTF-8 text (byte {e.start}); not a metrics.jsonl the trainer writes") from None
    rows, torn = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = parse_json(line)
        except ValueError:
            torn += 1
            continue
        if _well_formed(row):
            rows.append(row)
        else:
            torn += 1
    config = None
    if (path / "config.json").is_file():
        try:
            config = parse_json((path / "config.json").read_bytes().decode())
        except ValueError:  # not JSON, or not UTF-8
            config = None
        if not isinstance(config, dict):
            config = None
    return Run(path, rows, torn, config, _segments(rows), _checkpoints(path))


def throughput(run: Run) -> list[tuple[int, float, float]]:
    """(step, seconds since the run began, samples per second) between consecutive `train` rows of the
    same segment."""
    out = []
    bounds = [s.start_time for s in run.segments[1:]]
    prev = None
    for r in run.of("train"):
        if prev is not None and "samples" in r and "samples" in prev and r["time"] > prev["time"] \
                and not any(prev["time"] <= b <= r["time"] for b in bounds) and r["samples"] >= prev["samples"]:
            out.append((r["step"], r["time"] - run.t0, (r["samples"] - prev["samples"]) / (r["time"] - prev["time"])))
        prev = r
    return out


def skipped(run: Run) -> dict[str, list[tuple[int, int]]]:
    """Per skip reason, (step, count so far) at each validation; reasons that never occurred are left out."""
    out = {k: [(r["step"], int(r.get(k, 0))) for r in run.of("val")] for k in SKIP_COUNTS}
    return {k: v for k, v in out.items() if any(c for _, c in v)}
