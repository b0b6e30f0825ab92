"""Convergence benchmark: does asynchronous decentralized training reach the accuracy of synchronous SGD?

    python -m benchmarks convergence --config configs/fsdd.yaml --data-root DATA/fsdd --procs 4 \
        --seeds 1,2,3 --parallel 3 --out docs/figures/convergence

The ADPSGD paper's claim, measured as it states it: at equal epochs, each strategy's final held-out WER
against one process training the same recipe. Every seed trains the recipe once in one process ("single")
and once per strategy with `procs` learners (torchrun, one thread each unless overridden), all for the
recipe's epochs (or --epochs). Reported per run: the final validation (the recipe's last.pt figure) and the
curve; per strategy over its seeds: median and range of the final WER, and of its gap to the single process
of the same seed.

The runs are long (FSDD: 15 runs of 36 epochs), so the bench keeps every finished run as one line of
OUT/runs.jsonl, with the commit and machine that made it, and a second call skips what is there: it can be
stopped, resumed, or split over machines. A folder of runs made with other settings is refused.
"""
from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from speechscale.bench.harness import provenance
from speechscale.bench.straggler import STRATEGY_RUNS, _spread, _train

log = logging.getLogger(__name__)
SINGLE = "single"
STRATEGIES = (SINGLE, *STRATEGY_RUNS)


def _settings(config: str, procs: int, epochs: int | None, extra: list[str]) -> dict[str, Any]:
    """What makes two runs comparable: where the data lies is not (a folder of runs may be resumed on another
    machine), so `data.root` is left out."""
    return {"config": config, "procs": procs, "epochs": epochs,
            "overrides": [x for x in extra if not x.startswith("data.root=")]}


def load_runs(out: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs already in OUT/runs.jsonl; ValueError when they were made with other settings."""
    path = out / "runs.jsonl"
    if not path.is_file():
        return []
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in runs:
        if r["settings"] != settings:
            raise ValueError(f"{path} holds runs made with other settings ({r['settings']}); "
                             f"use another --out for {settings}")
    return runs


def _run_one(strategy: str, seed: int, procs: int, config: str, epochs: int | None, extra: list[str],
             single_threads: int, out: Path, timeout: float, start_by: float) -> dict[str, Any] | None:
    if time.monotonic() >= start_by:  # too late to start: left for the next call
        return None
    if strategy == SINGLE:
        n, plan = 1, ["distributed.strategy=allreduce", f"trainer.threads={single_threads}"]
    else:
        n, plan = procs, STRATEGY_RUNS[strategy]
    # the epochs end every run: a recipe's time guard (trainer.max_minutes) would cut a slow run short, so the
    # bench's own timeout is the guard
    length = [*([f"trainer.max_epochs={epochs}"] if epochs else []), f"trainer.max_minutes={timeout / 60:g}"]
    folder = out / f"{strategy}-seed{seed}"
    run = _train(n, config, [*length, *plan, f"trainer.seed={seed}", *extra], folder, timeout)
    val = run["val"]
    last = val[-1]
    threads = json.loads((folder / "config.json").read_text())["trainer"]["threads"]  # as the run resolved it
    if run["summary"]["stopped_by"]:
        raise RuntimeError(f"bench convergence: {strategy} seed {seed} stopped by {run['summary']['stopped_by']} at "
                           f"epoch {last['epoch']}, before its last: not kept")
    return {"strategy": strategy, "seed": seed, "learners": n, "threads": threads, "epochs": last["epoch"],
            "minutes": round(run["summary"]["minutes"], 3), "final_wer": last["wer"], "final_cer": last["cer"],
            "final_val_loss": last["loss"],
            "best_wer": min(v["wer"] for v in val if v["wer"] is not None), "val": val}


def bench_convergence(config: str, procs: int = 4, seeds: list[int] | None = None, out: str | Path = "runs/conv",
                      extra: list[str] | None = None, strategies: list[str] | None = None, epochs: int | None = None,
                      parallel: int = 1, single_threads: int = 1, timeout: float = 7200,
                      start_within: float | None = None,
                      report: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Each strategy for each seed (the ones not yet in OUT/runs.jsonl), `parallel` runs at a time; every
    finished run is appended to runs.jsonl and passed to `report`. No run starts later than `start_within`
    seconds (runs under way finish; the others are left for the next call). Returns all runs, old and new, in
    order."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    extra = list(extra or [])
    settings = _settings(config, procs, epochs, extra)
    done = load_runs(out, settings)
    have = {(r["strategy"], r["seed"]) for r in done}
    todo = [(s, seed) for seed in seeds or [1] for s in strategies or STRATEGIES if (s, seed) not in have]
    with ThreadPoolExecutor(max(1, parallel)) as pool:
        start_by = time.monotonic() + (start_within if start_within is not None else float("inf"))
        jobs = [pool.submit(_run_one, s, seed, procs, config, epochs, extra, single_threads, out / "work", timeout,
                            start_by)
                for s, seed in todo]
        for job in as_completed(jobs):  # results arrive in this thread only: one writer, no lock
            try:
                result = job.result()
            except RuntimeError as e:  # a failed or cut run is left out (the next call trains it again); the
                log.warning("%s", e)     # others go on
                continue
            if result is None:
                continue
            row = {**result, "settings": settings, "provenance": provenance()}
            with (out / "runs.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
            if report:
                report(row)
    order = {s: i for i, s in enumerate(STRATEGIES)}
    return sorted(done, key=lambda r: (order.get(r["strategy"], len(order)), r["seed"]))


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy over its seeds: the final WER's (and CER's, where every run has one) median and range, and its
    gap to the single process of the same seed (WER points; positive: worse than one process), with how many seeds
    end at or below it."""
    single = {r["seed"]: r["final_wer"] for r in runs if r["strategy"] == SINGLE}
    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in runs):
        mine = [r for r in runs if r["strategy"] == strategy]
        gaps = [r["final_wer"] - single[r["seed"]] for r in mine if r["seed"] in single]
        rows.append({"strategy": strategy, "learners": mine[0]["learners"], "runs": len(mine),
                     "seeds": sorted(r["seed"] for r in mine), "epochs": mine[0]["epochs"],
                     "final_wer": _spread([r["final_wer"] for r in mine], 4),
                     "final_cer": _spread([r["final_cer"] for r in mine], 4)
                     if all(r.get("final_cer") is not None for r in mine) else None,
                     "gap_to_single": None if strategy == SINGLE else _spread(gaps, 4),
                     "at_or_below_single": None if strategy == SINGLE else sum(g <= 0 for g in gaps)})
    return rows
