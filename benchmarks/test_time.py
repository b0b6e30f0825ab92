"""How long CI's check takes: `.ci/run` on a fresh clone of this checkout's HEAD, timed, one JSON line appended to
docs/figures/test-time/DATE.jsonl; and the paragraph of docs/development.md that states the newest such run.

    python -m benchmarks test-time --where "the closing check of a stop, machine otherwise idle"

The clone goes to a temporary folder (its ../shared/data is this checkout's), installs everything itself as CI does
(.venv, torch, the browser, the SLURM check) and is removed afterwards. Recorded: the tests passed and skipped,
pytest's own seconds, the whole run's wall and CPU seconds, the machine's fp32 matmul rate just before (the
machines here run 3-7x slower on some days), and the slowest tests as pytest's --durations listed them.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .checkout import ROOT

FIGURES = ROOT / "docs" / "figures" / "test-time"
COMMAND = "CI=true bash .ci/run"
# `make test`'s goal: 8 minutes on a normal hour (fp32 matmul >= 250 GFLOP/s), 12 on a slow one (about 70); an hour
# between the two gets the goal on the line between them
GOALS = ((70.0, 720.0), (250.0, 480.0))
BLOCK = ("<!-- test-time -->", "<!-- /test-time -->")


def matmul_gflops(size: int = 2048, repeats: int = 10) -> float:
    """This machine's fp32 matmul rate now (one thread per core, as torch picks)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(2):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size ** 3 * repeats / (time.perf_counter() - started) / 1e9


def goal_seconds(gflops: float) -> float:
    """The suite's time goal on an hour whose fp32 matmul runs at `gflops`."""
    (slow, slow_s), (fast, fast_s) = GOALS
    if gflops >= fast:
        return fast_s
    if gflops <= slow:
        return slow_s
    return slow_s + (gflops - slow) / (fast - slow) * (fast_s - slow_s)


def parse_pytest(output: str) -> dict[str, Any]:
    """passed, skipped, pytest_seconds, the slowest tests and the failed ones from pytest's output (its last summary
    line, the --durations list and the short summary's FAILED/ERROR lines)."""
    summary = [line for line in output.splitlines() if re.search(r"\d+ passed.* in [\d.]+s", line)]
    if not summary:
        raise ValueError("no pytest summary line in the output")
    last = summary[-1]
    count = {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped|failed|errors?)", last)}
    seconds = float(re.search(r" in ([\d.]+)s", last).group(1))
    slowest = [{"seconds": float(s), "phase": phase, "test": test}
               for s, phase, test in re.findall(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", output, flags=re.M)]
    return {"passed": count.get("passed", 0), "skipped": count.get("skipped", 0), "failed": count.get("failed", 0),
            "pytest_seconds": seconds, "slowest": slowest,
            "failures": re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.M)}


def run_fresh_clone(where: str) -> dict[str, Any]:
    """Clone HEAD into a temporary folder (its ../shared is this checkout's), run CI's command there, and return the
    record."""
    parent = Path(tempfile.mkdtemp(prefix="speechscale-ci-"))
    try:
        (parent / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
        clone = parent / "main"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                                check=True).stdout.strip()
        gflops = matmul_gflops()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "MAKE"))}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(["bash", ".ci/run"], cwd=clone, env={**env, "CI": "true"}, capture_output=True,
                              text=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    output = proc.stdout + proc.stderr
    record: dict[str, Any] = {
        "provenance": {"machine": _machine(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "commit": commit, "command": COMMAND, "where": f"fresh clone, {where}",
                       "fp32_matmul_gflops": round(gflops)},
        **parse_pytest(output), "wall_seconds": round(wall, 1),
        "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "returncode": proc.returncode}
    if proc.returncode:
        record["tail"] = proc.stdout[-3000:]  # pytest's own end (stderr holds pip's warnings)
    return record


def _machine() -> str:
    from speechscale.bench.harness import provenance

    return provenance([])["machine"]


def append(record: dict[str, Any]) -> Path:
    """Add `record` to its day's file under docs/figures/test-time."""
    path = FIGURES / f"{record['provenance']['date'][:10]}.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
    return path


def _min_s(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def newest(folder: Path = FIGURES) -> dict[str, Any]:
    """The newest run of CI's command on a fresh clone."""
    rows = [json.loads(x) for f in sorted(folder.glob("*.jsonl")) for x in f.read_text().splitlines() if x.strip()]
    return max((r for r in rows if r["provenance"]["command"] == COMMAND), key=lambda r: r["provenance"]["date"])


def render(record: dict[str, Any]) -> str:
    """The paragraph docs/development.md states the suite's time with, from one record."""
    p, secs = record["provenance"], record["pytest_seconds"]
    goal = goal_seconds(p["fp32_matmul_gflops"])
    status = "reached" if secs <= goal else f"**not reached** (gap {secs - goal:.0f} s)"
    slow = max((s for s in record["slowest"] if s["phase"] == "call"), key=lambda s: s["seconds"], default=None)
    over = [s for s in record["slowest"] if s["seconds"] > 60]
    lines = [
        f"Newest: `{COMMAND}` on a fresh clone at `{p['commit']}`, {p['date']} ({p['machine']}, fp32 matmul "
        f"{p['fp32_matmul_gflops']} GFLOP/s; {p['where']}): {record['passed']} tests passed"
        + (f" and {record['failed']} failed" if record.get("failed") else "") + " "
        f"({record['skipped']} skipped: the gpu tier) in **{_min_s(secs)}** ({_min_s(record['wall_seconds'])} in "
        f"all, with the set-up), against a goal of {_min_s(goal)} for an hour that fast: {status}.",
        f"The slowest test took {slow['seconds']:.0f} s (`{slow['test']}`); "
        + (f"{len(over)} phase(s) took over 60 s." if over else "none took over 60 s.") if slow else "",
        f"Its record: `docs/figures/test-time/{p['date'][:10]}.jsonl`.",
    ]
    return "\n".join(line for line in lines if line)


def update(doc: Path, record: dict[str, Any]) -> bool:
    """Rewrite the paragraph between docs/development.md's test-time markers; whether it changed."""
    text = doc.read_text()
    start, end = text.index(BLOCK[0]) + len(BLOCK[0]), text.index(BLOCK[1])
    new = text[:start] + "\n" + render(record) + "\n" + text[end:]
    if new != text:
        doc.write_text(new)
    return new != text
