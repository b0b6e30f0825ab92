"""Issue #24 §2: the ds2-large CPU step of this checkout against another checkout (default: 4933e4b), both
run by `speechscale bench train` in alternating subprocesses (A B A B ..., so drift of a shared machine hits
both alike), fp32, 2 threads, deepspeech.pytorch's layout (5 x 800 biGRU summed, no FC: 41.2 M parameters).

    git worktree add /tmp/base 4933e4b
    python docs/figures/cpu-step/compare.py --baseline /tmp/base --rounds 3 > docs/figures/cpu-step/compare.jsonl

Prints one JSON line per run and, last, the summary: per shape the median ms/step of each side and the
median of the per-round ratios (baseline / this)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHAPES = [(8, 2.0), (16, 1.0)]
OVERRIDES = "{rnn_merge: sum, fc_hidden: 0}"


def step_ms(src: Path, batch: int, seconds: float, steps: int) -> float:
    cmd = [sys.executable, "-m", "speechscale.cli", "bench", "train", "--model", "ds2-large", "--model-overrides",
           OVERRIDES, "--batch-size", str(batch), "--seconds", str(seconds), "--steps", str(steps), "--warmup", "1",
           "--threads", "2"]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "2"}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise SystemExit(f"{src}: {out.stderr.strip().splitlines()[-1]}")
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    row = rows[0] if isinstance(rows, list) else rows
    return float(row.get("ms_per_step") or row["results"][0]["ms_per_step"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", type=Path, required=True, help="a checkout of the baseline commit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="timed steps per run")
    a = p.parse_args()
    sides = {"baseline": a.baseline / "src", "this": ROOT / "src"}
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    base = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=a.baseline, capture_output=True, text=True)
    summary = {"this_commit": commit.strip(), "baseline_commit": base.stdout.strip(), "shapes": []}
    for batch, seconds in SHAPES:
        ms: dict[str, list[float]] = {"baseline": [], "this": []}
        for r in range(a.rounds):
            for side in (("baseline", "this") if r % 2 == 0 else ("this", "baseline")):
                ms[side].append(step_ms(sides[side], batch, seconds, a.steps))
                print(json.dumps({"batch": batch, "seconds": seconds, "round": r, "side": side,
                                  "ms_per_step": round(ms[side][-1], 1), "time": time.time()}), flush=True)
        ratios = [b / t for b, t in zip(ms["baseline"], ms["this"])]
        summary["shapes"].append({"batch": batch, "seconds": seconds,
                                  "baseline_ms": round(statistics.median(ms["baseline"]), 1),
                                  "this_ms": round(statistics.median(ms["this"]), 1),
                                  "speedup_median": round(statistics.median(ratios), 3),
                                  "speedup_range": [round(min(ratios), 3), round(max(ratios), 3)]})
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
