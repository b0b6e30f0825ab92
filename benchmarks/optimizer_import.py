"""What training/optim.py's optimizers save: a fresh process builds AdamW, takes a step, zeroes, saves and loads
its state, once with torch's own class and once with speechscale's (beneath the compiler guards,
speechscale/_compat.py), in alternating order; the wall time of that work in each process, and whether torch's
compiler got imported.

    python -m benchmarks.optimizer_import [--rounds 5] [--out docs/figures/startup/optimizer-import.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import sys, time, torch
t0 = time.perf_counter()
m = torch.nn.Linear(64, 64)
if sys.argv[1] == "speechscale":
    from speechscale.training.optim import AdamW
else:
    AdamW = torch.optim.AdamW
opt = AdamW(m.parameters(), lr=1e-3, fused=True)
m(torch.randn(4, 64)).sum().backward()
opt.step(); opt.zero_grad(); opt.load_state_dict(opt.state_dict())
print(time.perf_counter() - t0, "torch._dynamo" in sys.modules)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=None, help="also write the result with its provenance here")
    args = p.parse_args()
    seconds: dict[str, list[float]] = {"torch": [], "speechscale": []}
    compiler: dict[str, bool] = {}
    for r in range(args.rounds):
        for kind in (("torch", "speechscale") if r % 2 == 0 else ("speechscale", "torch")):
            out = subprocess.run([sys.executable, "-c", PROBE, kind], capture_output=True, text=True, check=True)
            secs, dynamo = out.stdout.split()
            seconds[kind].append(float(secs))
            compiler[kind] = dynamo == "True"
    med = {k: statistics.median(v) for k, v in seconds.items()}
    result = {"rounds": args.rounds, "median_s": {k: round(v, 3) for k, v in med.items()},
              "saved_s": round(med["torch"] - med["speechscale"], 3), "imports_compiler": compiler}
    print(json.dumps(result))
    if args.out:
        from pathlib import Path

        from benchmarks.checkout import pin_commit
        from speechscale.bench.harness import write_json

        pin_commit()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(Path(args.out), result, ["python", "-m", "benchmarks.optimizer_import", *sys.argv[1:]],
                   settings={"rounds": args.rounds})


if __name__ == "__main__":
    main()
