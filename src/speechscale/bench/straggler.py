"""Straggler benchmark: real training runs under torchrun, each strategy with and without one slow learner.

    speechscale bench straggler --procs 4 --epochs 4 --slowdown 2 --out runs/bench_straggler

Every run trains the same recipe (default: configs/yesno.yaml, real recordings from ../shared/data) for
the same number of epochs on `procs` CPU processes of one thread each. The slow learner sleeps (slowdown
- 1) x its own compute after every step (`distributed.simulate_straggler`), which uses no CPU, so the
other learners' speed is what the strategy allows. Reported per run: utterances per second of training,
its ratio to the same strategy without a straggler, and the validation curve (loss, WER, consensus
distance) against wall time and epochs. Writes results.json and straggler.png to --out.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# name -> overrides; the asynchronous rings join this list when they exist
STRATEGY_RUNS: dict[str, list[str]] = {
    "allreduce": ["distributed.strategy=allreduce"],
    "adpsgd-delay_by_one": ["distributed.strategy=adpsgd", "distributed.adpsgd.variant=delay_by_one"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(procs: int, config: str, overrides: list[str], out: Path, timeout: float) -> dict[str, Any]:
    """One torchrun training run; returns its summary line and its validation rows."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={procs}", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "-m", "speechscale.cli", "-q", "train", "--config", config,
           f"trainer.out_dir={out}", "trainer.threads=1", "trainer.target_wer=-1", "trainer.progress=false",
           *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PYTHONWARNINGS": "ignore"}
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"bench straggler: {' '.join(overrides)} failed:\n{proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    val = [{"seconds": round(r["time"] - started, 2), "epoch": r["epoch"], "loss": r["train_loss"], "wer": r["wer"],
            "consensus_distance": r.get("consensus_distance")} for r in rows if r["kind"] == "val"]
    return {"summary": summary, "val": val}


def bench_straggler(procs: int = 4, epochs: int = 4, slowdown: float = 2.0, config: str = "configs/yesno.yaml",
                    out: str | Path = "runs/bench_straggler", extra: list[str] | None = None,
                    strategies: list[str] | None = None, timeout: float = 1800) -> list[dict[str, Any]]:
    """Each strategy with no straggler and with the last rank `slowdown` times slower; one result per run."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in strategies or list(STRATEGY_RUNS):
        base_rate = None
        for slow in (False, True):
            straggler = [f"distributed.simulate_straggler={{rank: {procs - 1}, slowdown: {slowdown}}}"] if slow else []
            run = _train(procs, config, [f"trainer.max_epochs={epochs}", *STRATEGY_RUNS[name], *straggler,
                                         *(extra or [])], out / f"{name}{'-straggler' if slow else ''}", timeout)
            s = run["summary"]
            rate = s["train_utterances"] * s["epoch"] / (s["minutes"] * 60)
            base_rate = base_rate or rate
            res = {"strategy": name, "procs": procs, "straggler": f"rank {procs - 1} x{slowdown:g}" if slow else None,
                   "epochs": s["epoch"], "minutes": round(s["minutes"], 3), "utterances_per_second": round(rate, 2),
                   "throughput_vs_no_straggler": round(rate / base_rate, 3), "final_val_loss": run["val"][-1]["loss"],
                   "final_wer": s.get("wer"), "val": run["val"]}
            results.append(res)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    plot(results, out / "straggler.png")
    return results


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Validation loss against wall time and against epochs, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_time, by_epoch) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        label = f"{r['strategy']}{', ' + r['straggler'] if r['straggler'] else ''}"
        style = "--" if r["straggler"] else "-"
        by_time.plot([v["seconds"] for v in r["val"]], [v["loss"] for v in r["val"]], style, marker="o", label=label)
        by_epoch.plot([v["epoch"] for v in r["val"]], [v["loss"] for v in r["val"]], style, marker="o", label=label)
    by_time.set(xlabel="wall time (s)", ylabel="training loss at validation", title="against time")
    by_epoch.set(xlabel="epoch", title="against epochs")
    by_time.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
