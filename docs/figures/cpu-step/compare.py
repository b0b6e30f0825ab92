"""Issue #24 §2: the ds2-large CPU training step of this checkout against another checkout (default: the
baseline 4933e4b), interleaved step by step: two worker processes, one importing each checkout's
`speechscale`, take turns (A B, B A, ...), so the drift of a shared machine hits both alike. fp32, 2 threads
each (never at once), deepspeech.pytorch's layout (5 x 800 biGRU summed, no FC: 41.2 M parameters); each
side's own model and optimizer defaults, one step = forward, CTC, backward, clip, optimizer step.

    git worktree add /tmp/base 4933e4b
    python docs/figures/cpu-step/compare.py --baseline /tmp/base --steps 12 > docs/figures/cpu-step/compare.jsonl
    python docs/figures/cpu-step/compare.py --baseline /tmp/base --model ds2-tiny --shapes 32x3 \
        > docs/figures/cpu-step/compare-ds2-tiny.jsonl   # the demo's model and batch

Prints one JSON line per step and, last, the summary per shape: median ms/step of each side and the median
(and range) of the per-pair ratios baseline / this."""
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
OVERRIDES = {"rnn_merge": "sum", "fc_hidden": 0}  # deepspeech.pytorch's ds2-large

WORKER = r'''
import json, sys, time, torch
from speechscale.config import OptimConfig
from speechscale.models.registry import build_model
from speechscale.training.optim import build_optimizer
torch.set_num_threads(2)
batch, seconds, name, overrides = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
torch.manual_seed(0)
model = build_model(name, overrides, 161, 29).train()
opt = build_optimizer(model, OptimConfig())
frames = int(seconds * 100) + 1  # 10 ms hop
x = torch.randn(batch, 161, frames)
lens = torch.full((batch,), frames)
y = torch.randint(1, 29, (batch, int(seconds * 12)))
ylens = torch.full((batch,), y.shape[1])
def step():
    t0 = time.perf_counter()
    logits, out_lens = model(x, lens)
    loss = torch.nn.functional.ctc_loss(logits.float().log_softmax(-1).transpose(0, 1), y, out_lens, ylens,
                                        zero_infinity=True)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 400.0)
    opt.step()
    return 1000 * (time.perf_counter() - t0)
for _ in range(2):
    step()
print("ready", flush=True)
for line in sys.stdin:
    print(json.dumps(step()), flush=True)
'''


def start(src: Path, batch: int, seconds: float, model: str, overrides: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "2"}
    p = subprocess.Popen([sys.executable, "-c", WORKER, str(batch), str(seconds), model, json.dumps(overrides)],
                         cwd=ROOT,
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready", f"{src}: worker failed"
    return p


def step(p: subprocess.Popen) -> float:
    p.stdin.write("step\n")
    p.stdin.flush()
    return float(p.stdout.readline())


def torch_matmul_gflops() -> float:
    """The machine's speed today: a 2048x2048 fp32 matmul on 2 threads (about 300 GFLOP/s on a normal day)."""
    code = ("import time, torch; torch.set_num_threads(2); a = torch.randn(2048, 2048); a @ a; t = time.perf_counter();"
            " [a @ a for _ in range(5)]; print(5 * 2 * 2048 ** 3 / (time.perf_counter() - t) / 1e9)")
    return round(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True).stdout), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the baseline commit")
    ap.add_argument("--steps", type=int, default=12, help="timed step pairs per shape")
    ap.add_argument("--model", default="ds2-large", help="a registry preset (ds2-large gets deepspeech.pytorch's "
                    "layout; any other its own preset)")
    ap.add_argument("--shapes", default=None, help="BATCHxSECONDS,... (default 8x2,16x1)")
    a = ap.parse_args()
    overrides = OVERRIDES if a.model == "ds2-large" else {}
    shapes = SHAPES if a.shapes is None else [(int(b), float(s)) for b, s in (x.split("x") for x in a.shapes.split(","))]
    matmul = torch_matmul_gflops()
    rev = ["git", "rev-parse", "--short=10", "HEAD"]
    summary = {"this_commit": subprocess.run(rev, cwd=ROOT, capture_output=True, text=True).stdout.strip(),
               "baseline_commit": subprocess.run(rev, cwd=a.baseline, capture_output=True, text=True).stdout.strip(),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count(), "model": a.model,
               "overrides": overrides, "matmul_gflops_2048": matmul, "command": " ".join(sys.argv), "shapes": []}
    for batch, seconds in shapes:
        procs = {side: start(src, batch, seconds, a.model, overrides)
                 for side, src in (("baseline", a.baseline / "src"), ("this", ROOT / "src"))}
        ms: dict[str, list[float]] = {"baseline": [], "this": []}
        try:
            for i in range(a.steps):
                for side in (("baseline", "this") if i % 2 == 0 else ("this", "baseline")):
                    ms[side].append(step(procs[side]))
                    print(json.dumps({"batch": batch, "seconds": seconds, "pair": i, "side": side,
                                      "ms": round(ms[side][-1], 1)}), flush=True)
        finally:
            for p in procs.values():
                p.kill()
        ratios = [b / t for b, t in zip(ms["baseline"], ms["this"])]
        summary["shapes"].append({"batch": batch, "seconds": seconds,
                                  "baseline_ms": round(statistics.median(ms["baseline"]), 1),
                                  "this_ms": round(statistics.median(ms["this"]), 1),
                                  "speedup_median": round(statistics.median(ratios), 3),
                                  "speedup_range": [round(min(ratios), 3), round(max(ratios), 3)]})
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
