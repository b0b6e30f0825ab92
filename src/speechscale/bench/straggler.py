"""Straggler benchmark: real training runs under torchrun, each strategy with and without one slow learner.

    speechscale bench straggler --procs 4 --epochs 4 --slowdown 2 --out runs/bench_straggler

Every run trains the same recipe (default: configs/yesno.yaml, real recordings from ../shared/data) for
the same number of epochs on `procs` CPU processes of one thread each. The slow learner sleeps (slowdown
- 1) x its own compute after every step (`distributed.simulate_straggler`), which uses no CPU, so the
other learners' speed is what the strategy allows. Reported per run: utterances per second of training,
its ratio to the same strategy without a straggler, and the validation curve (loss, WER, consensus
distance) against wall time and epochs, and per epoch each ADPSGD run's validation loss relative to
allreduce's. Writes results.json and straggler.png to --out.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .ports import free_port

# name -> overrides
STRATEGY_RUNS: dict[str, list[str]] = {
    "allreduce": ["distributed.strategy=allreduce"],
    **{f"adpsgd-{v}": ["distributed.strategy=adpsgd", f"distributed.adpsgd.variant={v}"]
       for v in ("fixed_ring", "random_ring", "delay_by_one")},
}


def _train(procs: int, config: str, overrides: list[str], out: Path, timeout: float) -> dict[str, Any]:
    """One torchrun training run; returns its summary line and its validation rows."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={procs}", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "speechscale.cli", "-q", "train", "--config", config,
           f"trainer.out_dir={out}", "trainer.threads=1", "trainer.target_wer=-1", "trainer.progress=false",
           *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PYTHONWARNINGS": "ignore"}
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        errors = [x for x in proc.stderr.splitlines() if "Error" in x and "elastic" not in x and "ChildFailed" not in x]
        detail = "; ".join(errors[-3:]) or proc.stderr[-2000:]
        raise RuntimeError(f"bench straggler: {' '.join(overrides)} failed: {detail}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    val = [{"seconds": round(r["time"] - started, 2), "epoch": r["epoch"], "loss": r["val_loss"], "wer": r["wer"],
            "train_loss": r["train_loss"], "consensus_distance": r.get("consensus_distance")}
           for r in rows if r["kind"] == "val"]
    return {"summary": summary, "val": val}


def bench_straggler(procs: int = 4, epochs: int = 4, slowdown: float = 2.0, config: str = "configs/yesno.yaml",
                    out: str | Path = "runs/bench_straggler", extra: list[str] | None = None,
                    strategies: list[str] | None = None, timeout: float = 1800,
                    report: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Each strategy with no straggler and with the last rank `slowdown` times slower; one result per run,
    passed to `report` as soon as it is measured (results.json is rewritten after every run)."""
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
            compare_to_allreduce(results)
            (out / "results.json").write_text(json.dumps(results, indent=2))
            if report:
                report(res)
    plot(results, out / "straggler.png")
    return results


def compare_to_allreduce(results: list[dict[str, Any]]) -> None:
    """Per epoch, each run's loss over allreduce's (same straggler setting): `loss_vs_allreduce_max`."""
    ref = {r["straggler"]: r for r in results if r["strategy"] == "allreduce"}
    for r in results:
        base = ref.get(r["straggler"])
        if base is None or r is base:
            continue
        ratios = [v["loss"] / b["loss"] for v, b in zip(r["val"], base["val"]) if b["loss"] > 0]
        r["loss_vs_allreduce_max"] = round(max(ratios), 3) if ratios else None


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Loss and WER against wall time and against epochs, and consensus distance; one line per run."""
    from ..plotting import pyplot

    plt = pyplot()

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    panels = [("seconds", "loss", "wall time (s)"), ("epoch", "loss", "epoch"),
              ("epoch", "consensus_distance", "epoch"),
              ("seconds", "wer", "wall time (s)"), ("epoch", "wer", "epoch")]
    names = list(dict.fromkeys(r["strategy"] for r in results))
    for r in results:
        label = f"{r['strategy']}{', ' + r['straggler'] if r['straggler'] else ''}"
        style = "--" if r["straggler"] else "-"
        color = f"C{names.index(r['strategy'])}"  # one colour per strategy in every panel; dashed: straggler
        for ax, (x, y, _) in zip(axes.flat, panels):
            points = [(v[x], v[y]) for v in r["val"] if v.get(y) is not None]
            if points:
                ax.plot(*zip(*points), style, color=color, marker="o", label=label)
    for ax, (_, y, xlabel) in zip(axes.flat, panels):
        ax.set(xlabel=xlabel, ylabel={"loss": "validation loss", "wer": "validation WER"}.get(y, "consensus distance"))
    axes.flat[-1].axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
