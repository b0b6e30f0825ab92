"""Straggler benchmark: real training runs under torchrun, each strategy with and without one slow learner.

    speechscale bench straggler --data-root DATA/yesno --procs 4 --epochs 4 --slowdown 2 --out runs/bench_straggler

Every run trains the same recipe (default: yesno, its recordings under --data-root) for
the same number of epochs on `procs` CPU processes of one thread each. The slow learner sleeps (slowdown
- 1) x its own compute after every step (`distributed.simulate_straggler`), which uses no CPU, so the
other learners' speed is what the strategy allows. Reported per run: utterances per second of training,
its ratio to the same strategy without a straggler, and the validation curve (loss, WER, consensus
distance) against wall time and epochs, and per epoch each ADPSGD run's validation loss relative to
allreduce's. With `--seeds 1,2,3 --target-wer 0.05` every run is repeated per seed and timed to the
target: the wall time from launch to the first validation at or below the target WER (the paper's measure
is time to a target held-out loss); a run stops there, so --epochs is a cap that lets the slowest reach it.
`summarize` gives per strategy and straggler setting the median and range over seeds. Writes results.json
and straggler.png to --out.
"""
from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from .harness import run_cli
from .ports import free_port

# name -> overrides
STRATEGY_RUNS: dict[str, list[str]] = {
    "allreduce": ["distributed.strategy=allreduce"],
    **{f"adpsgd-{v}": ["distributed.strategy=adpsgd", f"distributed.adpsgd.variant={v}"]
       for v in ("fixed_ring", "random_ring", "delay_by_one")},
}


def _train(procs: int, config: str, overrides: list[str], out: Path, timeout: float,
           target_wer: float | None = None) -> dict[str, Any]:
    """One torchrun training run, stopped at its first validation at or below `target_wer` (None: runs all
    its epochs); returns its summary line and its validation rows."""
    torchrun = ["torch.distributed.run", f"--nproc-per-node={procs}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
    shutil.rmtree(out, ignore_errors=True)  # a run of its own: a rerun's folder holds the last one's log and checkpoints
    started = time.time()
    try:
        stop_at = -1 if target_wer is None else target_wer
        stdout = run_cli(["train", "--config", config, f"trainer.out_dir={out}", "trainer.threads=1",
                          f"trainer.target_wer={stop_at}", "trainer.progress=false", *overrides], timeout=timeout,
                         launcher=torchrun, env={"OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    except RuntimeError as e:
        raise RuntimeError(f"bench straggler: {' '.join(overrides)}: {e}") from None
    summary = json.loads(stdout.strip().splitlines()[-1])
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    val = [{"seconds": round(r["time"] - started, 2), "epoch": r["epoch"], "loss": r["val_loss"], "wer": r["wer"],
            "cer": r.get("cer"), "train_loss": r["train_loss"], "consensus_distance": r.get("consensus_distance")}
           for r in rows if r["kind"] == "val"]
    return {"summary": summary, "val": val}


def bench_straggler(procs: int = 4, epochs: int = 4, slowdown: float = 2.0, config: str = "configs/yesno.yaml",
                    out: str | Path = "runs/bench_straggler", extra: list[str] | None = None,
                    strategies: list[str] | None = None, timeout: float = 1800,
                    report: Callable[[dict[str, Any]], None] | None = None, seeds: list[int] | None = None,
                    target_wer: float | None = None) -> list[dict[str, Any]]:
    """Each strategy, for each seed, with no straggler and with the last rank `slowdown` times slower; one
    result per run, passed to `report` as soon as it is measured (results.json is rewritten after every run)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for name in strategies or list(STRATEGY_RUNS):
        for seed in seeds or [None]:
            base_rate = None
            for slow in (False, True):
                straggler = [f"distributed.simulate_straggler={{rank: {procs - 1}, slowdown: {slowdown}}}"] if slow else []
                seeded = [f"trainer.seed={seed}"] if seed is not None else []
                folder = out / f"{name}{'' if seed is None else f'-seed{seed}'}{'-straggler' if slow else ''}"
                run = _train(procs, config, [f"trainer.max_epochs={epochs}", *STRATEGY_RUNS[name], *straggler,
                                             *seeded, *(extra or [])], folder, timeout, target_wer)
                s = run["summary"]
                rate = s["train_utterances"] * s["epoch"] / (s["minutes"] * 60)
                base_rate = base_rate or rate
                res = {"strategy": name, "procs": procs, "seed": seed,
                       "straggler": f"rank {procs - 1} x{slowdown:g}" if slow else None,
                       "epochs": s["epoch"], "minutes": round(s["minutes"], 3), "utterances_per_second": round(rate, 2),
                       "throughput_vs_no_straggler": round(rate / base_rate, 3), "final_val_loss": run["val"][-1]["loss"],
                       "final_wer": s.get("wer"), "target_wer": target_wer,
                       "seconds_to_target": time_to_target(run["val"], target_wer), "val": run["val"]}
                results.append(res)
                compare_to_allreduce(results)
                (out / "results.json").write_text(json.dumps(results, indent=2))
                if report:
                    report(res)
    plot(results, out / "straggler.png")
    return results


def time_to_target(val: list[dict[str, Any]], target_wer: float | None) -> float | None:
    """Seconds from launch to the first validation at or below `target_wer` (None: never, or no target)."""
    if target_wer is None:
        return None
    return next((v["seconds"] for v in val if v["wer"] is not None and v["wer"] <= target_wer), None)


def _spread(values: list[float], digits: int = 3) -> dict[str, float] | None:
    """Median, min and max of `values`, rounded to `digits` (None for none)."""
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)} if values else None


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy and straggler setting, over its seeds: median and range of throughput, of the ratio to
    no straggler, and of the time to the target WER (over the runs that reached it; `reached` counts them)."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["strategy"], r["straggler"]), []).append(r)
    rows = []
    for (strategy, straggler), runs in groups.items():
        reached = [r["seconds_to_target"] for r in runs if r.get("seconds_to_target") is not None]
        rows.append({"strategy": strategy, "straggler": straggler, "runs": len(runs),
                     "seeds": [r.get("seed") for r in runs], "epochs": runs[0]["epochs"],
                     "target_wer": runs[0].get("target_wer"), "reached": len(reached),
                     "seconds_to_target": _spread(reached),
                     "utterances_per_second": _spread([r["utterances_per_second"] for r in runs]),
                     "throughput_vs_no_straggler": _spread([r["throughput_vs_no_straggler"] for r in runs]),
                     "final_wer": _spread([r["final_wer"] for r in runs if r["final_wer"] is not None])})
    return rows


def compare_to_allreduce(results: list[dict[str, Any]]) -> None:
    """Per epoch, each run's loss over allreduce's (same straggler setting and seed): `loss_vs_allreduce_max`."""
    ref = {(r["straggler"], r.get("seed")): r for r in results if r["strategy"] == "allreduce"}
    for r in results:
        base = ref.get((r["straggler"], r.get("seed")))
        if base is None or r is base:
            continue
        ratios = [v["loss"] / b["loss"] for v, b in zip(r["val"], base["val"]) if b["loss"] > 0]
        r["loss_vs_allreduce_max"] = round(max(ratios), 3) if ratios else None


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Loss and WER against wall time and against epochs, and consensus distance, one line per run (seeds of
    one setting share colour and style); and the time to the target WER, median with its range over seeds."""
    from ..plotting import pyplot

    plt = pyplot()

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    panels = [("seconds", "loss", "wall time (s)"), ("epoch", "loss", "epoch"),
              ("epoch", "consensus_distance", "epoch"),
              ("seconds", "wer", "wall time (s)"), ("epoch", "wer", "epoch")]
    names = list(dict.fromkeys(r["strategy"] for r in results))
    labelled: set[str] = set()
    for r in results:
        label = f"{r['strategy']}{', ' + r['straggler'] if r['straggler'] else ''}"
        style = "--" if r["straggler"] else "-"
        color = f"C{names.index(r['strategy'])}"  # one colour per strategy in every panel; dashed: straggler
        for ax, (x, y, _) in zip(axes.flat, panels):
            points = [(v[x], v[y]) for v in r["val"] if v.get(y) is not None]
            if points:
                ax.plot(*zip(*points), style, color=color, marker="o", alpha=0.7,
                        label=None if label in labelled else label)
        labelled.add(label)
    for ax, (_, y, xlabel) in zip(axes.flat, panels):
        ax.set(xlabel=xlabel, ylabel={"loss": "validation loss", "wer": "validation WER"}.get(y, "consensus distance"))
    axes.flat[0].legend(fontsize=8)
    ax = axes.flat[-1]
    rows = [r for r in summarize(results) if r["seconds_to_target"]]
    if rows:
        for i, r in enumerate(rows):
            t = r["seconds_to_target"]
            ax.errorbar(i, t["median"], yerr=[[t["median"] - t["min"]], [t["max"] - t["median"]]], fmt="o",
                        color=f"C{names.index(r['strategy'])}", capsize=4)
        ax.set_xticks(range(len(rows)), [f"{r['strategy']}\n{r['straggler'] or 'none'} ({r['reached']}/{r['runs']})"
                                         for r in rows], fontsize=7, rotation=30)
        ax.set(ylabel=f"seconds to WER <= {100 * rows[0]['target_wer']:g} % (median, range)")
    else:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
