"""BENCHMARKS.md rows read from JSONL files of runs, one line per run with its own provenance (bench convergence):
a recipe over seeds, and each strategy against one process. The runs of one file may come from several calls,
commits and machines: each row names every commit and machine of the runs it reads and, where the commands
differ, says each line has its command."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from speechscale.bench.straggler import _spread as _stats

from .summary_rows import _pct, _row, _spread, _status


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _provenance(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The newest run's provenance, naming every commit and machine the runs came from (oldest first), and the one
    command or a pointer to each line's."""
    ordered = sorted(runs, key=lambda r: r["provenance"]["date"])
    newest = ordered[-1]["provenance"]
    commits = list(dict.fromkeys(r["provenance"]["commit"] for r in ordered))
    machines = list(dict.fromkeys(r["provenance"]["machine"] for r in ordered))
    commands = {r["provenance"]["command"] for r in runs}
    command = newest["command"] if len(commands) == 1 else \
        f"speechscale bench convergence, {len(commands)} calls (each line's provenance has its command)"
    return {**newest, "commit": "`, `".join(commits), "machine": "; ".join(machines)}, command


def one_process_seeds(path: Path, recipe: str, goal: float) -> list[dict[str, Any]]:
    """A recipe over seeds, from `bench convergence`'s one-process runs of it: WER against its goal on every seed."""
    runs = [r for r in _read(path) if r["strategy"] == "single"]
    if not runs:
        return []
    wer, ok = [100 * r["final_wer"] for r in runs], sum(r["final_wer"] <= goal for r in runs)
    prov, command = _provenance(runs)
    return [_row("accuracy", f"recipe `{recipe}`, one process, seeds {', '.join(str(r['seed']) for r in runs)}",
                 f"WER {_spread(wer, '{:.1f}', ' %')}, CER {_spread([100 * r['final_cer'] for r in runs], '{:.1f}', ' %')}",
                 f"WER ≤ {_pct(goal)} on every seed",
                 _status(ok == len(runs), f"{ok} of {len(runs)} seeds did; gap {statistics.median(wer) - 100 * goal:.1f} "
                         "points at the median"), prov, f"convergence/{path.name}", command)]


def convergence(folder: Path) -> list[dict[str, Any]]:
    """`bench convergence` runs (one JSONL per recipe): each strategy's final WER against one process at equal
    epochs over seeds (the ADPSGD paper's convergence claim), reached where no seed ends above its one process.
    A file with no one-process runs (`fsdd-48ep.jsonl`: a strategy given another schedule) is set against the
    one-process and allreduce runs of the file named by its stem's first word (`fsdd.jsonl`)."""
    from .convergence import SINGLE, summarize

    files = {p: _read(p) for p in sorted(folder.glob("*.jsonl"))} if folder.is_dir() else {}
    rows = []
    for path, own in files.items():
        mine_strategies = {r["strategy"] for r in own}
        refs = [] if SINGLE in mine_strategies else \
            [r for r in files.get(path.with_name(path.stem.split("-")[0] + ".jsonl"), [])
             if r["strategy"] in {SINGLE, "allreduce"} - mine_strategies]
        runs = refs + own
        summary = {s["strategy"]: s for s in summarize(runs)}
        single = summary.get(SINGLE)
        one = {r["seed"]: r["final_wer"] for r in runs if r["strategy"] == SINGLE}
        sync = {r["seed"]: r["final_wer"] for r in runs if r["strategy"] == "allreduce"}
        config = own[0]["settings"]["config"]
        for s in summary.values():
            if s is single or single is None or s["strategy"] not in mine_strategies:
                continue
            w, g, n = s["final_wer"], s["gap_to_single"], s["runs"]
            same = [one[x] for x in s["seeds"] if x in one]  # one process on this strategy's seeds
            # the runs this row reads: the strategy's, and one process's and allreduce's on its seeds
            prov, command = _provenance([r for r in runs if r["seed"] in s["seeds"]
                                         and r["strategy"] in (s["strategy"], SINGLE, "allreduce")])
            what = f"{s['strategy']}, {s['learners']} learners, `{config}`" + (
                f": final WER against one process at equal epochs ({s['epochs']}), over seeds"
                if s["epochs"] == single["epochs"] else
                f", {s['epochs']} epochs: final WER against one process at the recipe's {single['epochs']}, over seeds")
            rows.append(_row("distributed", what,
                             f"{_pct_spread(w)} against {_pct_spread(_stats(same, 6))} on seed{'s' if n != 1 else ''} "
                             f"{', '.join(map(str, s['seeds']))}; gap {100 * g['median']:+.1f} points"
                             + (f" ({100 * g['min']:+.1f} to {100 * g['max']:+.1f})" if n > 1 else "")
                             + _against_allreduce(s, sync, {r["seed"]: r["final_wer"] for r in runs
                                                           if r["strategy"] == s["strategy"]}),
                             "at most one process's WER, every seed",
                             _status(s["at_or_below_single"] == n, f"{s['at_or_below_single']} of {n} did"),
                             prov, f"convergence/{path.name}", command))
    return rows


def _against_allreduce(s: dict[str, Any], sync: dict[int, float], mine: dict[int, float]) -> str:
    """'; allreduce on the same seeds: M %, gap G points (min to max)' for an ADPSGD strategy (the paper's
    comparison), the gap taken seed by seed, where allreduce ran any of its seeds."""
    seeds = [x for x in s["seeds"] if x in sync]
    if not seeds or s["strategy"] == "allreduce":
        return ""
    gap = _stats([mine[x] - sync[x] for x in seeds], 6)
    return (f"; allreduce on the same seed{'s' if len(seeds) > 1 else ''}: {_pct_spread(_stats([sync[x] for x in seeds], 6))}"
            f", gap {100 * gap['median']:+.1f} points"
            + (f" ({100 * gap['min']:+.1f} to {100 * gap['max']:+.1f})" if len(seeds) > 1 else ""))


def _pct_spread(x: dict[str, float]) -> str:
    """'M % (min-max)', or 'M %' when min and max are one value."""
    med = f"{100 * x['median']:.1f} %"
    return med if x["min"] == x["max"] else f"{med} ({100 * x['min']:.1f}-{100 * x['max']:.1f})"


# ---- every run, one row each: the `<!-- convergence-runs -->` block of BENCHMARKS.md -----------------------------


def render_runs(folder: Path) -> str:
    """One row per run of every `bench convergence` file in `folder` (file, strategy, seed, learners x threads,
    epochs, final WER and CER, best WER, minutes, machine, commit), in the bench's order."""
    from .convergence import STRATEGIES
    from .tables import _md

    order = {s: i for i, s in enumerate(STRATEGIES)}
    rows = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        for r in sorted(_read(path), key=lambda r: (order.get(r["strategy"], len(order)), r["seed"])):
            p = r["provenance"]
            rows.append([f"`{path.name}`", r["strategy"], r["seed"], f"{r['learners']} x {r['threads']}", r["epochs"],
                         f"{100 * r['final_wer']:.1f} %", f"{100 * r['final_cer']:.1f} %", f"{100 * r['best_wer']:.1f} %",
                         f"{r['minutes']:.1f}", p["machine"], f"`{p['commit']}`, {p['date']}"])
    return _md(["file", "strategy", "seed", "learners x threads", "epochs", "final WER", "final CER", "best WER",
                "minutes", "machine", "commit, date"], rows) + "\n"

