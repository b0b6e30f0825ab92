"""BENCHMARKS.md rows read from JSONL files of runs, one line per run with its own provenance (bench convergence):
a recipe over seeds, and each strategy against one process. The runs of one file may come from several calls,
commits and machines: each row names every commit and, where they differ, says each line has its command."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from .straggler import _spread as _stats
from .summary_rows import _pct, _row, _spread, _status


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _provenance(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The newest run's provenance, naming every commit the runs came from, and the one command or a pointer to
    each line's."""
    newest = max((r["provenance"] for r in runs), key=lambda p: p["date"])
    commits = list(dict.fromkeys(r["provenance"]["commit"] for r in runs))
    commands = {r["provenance"]["command"] for r in runs}
    command = newest["command"] if len(commands) == 1 else \
        f"speechscale bench convergence, {len(commands)} calls (each line's provenance has its command)"
    return {**newest, "commit": "`, `".join(commits)}, command


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
    epochs over seeds (the ADPSGD paper's convergence claim), reached where no seed ends above its one process."""
    from .convergence import SINGLE, summarize

    rows = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        runs = _read(path)
        summary = {s["strategy"]: s for s in summarize(runs)}
        single = summary.get(SINGLE)
        prov, command = _provenance(runs)
        one = {r["seed"]: r["final_wer"] for r in runs if r["strategy"] == SINGLE}
        sync = {r["seed"]: r["final_wer"] for r in runs if r["strategy"] == "allreduce"}
        config = runs[0]["settings"]["config"]
        for s in summary.values():
            if s is single or single is None:
                continue
            w, g, n = s["final_wer"], s["gap_to_single"], s["runs"]
            same = [one[x] for x in s["seeds"] if x in one]  # one process on this strategy's seeds
            rows.append(_row("distributed", f"{s['strategy']}, {s['learners']} learners, `{config}`: final WER against "
                             f"one process at equal epochs ({s['epochs']}), over seeds",
                             f"{_pct_spread(w)} against {_pct_spread(_stats(same, 6))} on seed{'s' if n != 1 else ''} "
                             f"{', '.join(map(str, s['seeds']))}; gap {100 * g['median']:+.1f} points"
                             + (f" ({100 * g['min']:+.1f} to {100 * g['max']:+.1f})" if n > 1 else "")
                             + _against_allreduce(s, sync),
                             "at most one process's WER, every seed",
                             _status(s["at_or_below_single"] == n, f"{s['at_or_below_single']} of {n} did"),
                             prov, f"convergence/{path.name}", command))
    return rows


def _against_allreduce(s: dict[str, Any], sync: dict[int, float]) -> str:
    """'; allreduce on the same seeds: M %' for an ADPSGD strategy (the paper's comparison), where there is one."""
    same = [sync[x] for x in s["seeds"] if x in sync]
    return f"; allreduce on the same seed{'s' if len(same) > 1 else ''}: {_pct_spread(_stats(same, 6))}" \
        if same and s["strategy"] != "allreduce" else ""


def _pct_spread(x: dict[str, float]) -> str:
    """'M % (min-max)', or 'M %' when min and max are one value."""
    med = f"{100 * x['median']:.1f} %"
    return med if x["min"] == x["max"] else f"{med} ({100 * x['min']:.1f}-{100 * x['max']:.1f})"
