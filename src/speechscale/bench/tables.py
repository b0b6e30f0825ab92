"""Markdown tables of `bench all` results, and their place in BENCHMARKS.md.

Each generated block sits between `<!-- bench-all:NAME -->` and `<!-- /bench-all:NAME -->`; `bench all`
rewrites those blocks from its JSON files and nothing else, and a test renders the committed JSON again
and compares, so the tables cannot drift from what was measured.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable


def _provenance(doc: dict[str, Any]) -> str:
    p = doc["provenance"]
    took = f", took {doc['seconds']:.0f} s" if doc.get("seconds") is not None else ""
    return (f"\n_Measured {p['date']} on {p['machine']}, commit `{p['commit']}`, torch {p['torch']}{took}; "
            f"command: `{p['command']}`._\n")


def _md(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _train(res: list[dict[str, Any]]) -> str:
    rows = [[r["model"], r["precision"], f"{r['params'] / 1e6:.2f} M", r["audio_seconds_per_second"],
             f"{r['ms_per_step']} ({r['ms_per_step_p10_p90'][0]}-{r['ms_per_step_p10_p90'][1]})",
             r.get("speedup_vs_fp32", "-"), r["mfu"] if r["mfu"] is not None else "n/a"] for r in res]
    return _md(["model", "precision", "params", "audio-s/s", "ms/step median (p10-p90)", "vs fp32", "MFU"], rows)


def _loader(res: list[dict[str, Any]]) -> str:
    rows = [[r["source"], "on" if r["augment"] else "off", r["workers"], r["x_realtime"], r["x_realtime_per_worker"],
             f"{r['seconds']} ({r['seconds_min_max'][0]}-{r['seconds_min_max'][1]})"] for r in res]
    return _md(["source", "augment", "workers", "x real time", "per worker", "s per pass median (min-max)"], rows)


def _scaling(res: list[dict[str, Any]]) -> str:
    rows = [[r["model"], r["processes"], r["ms_per_step"], r["audio_seconds_per_second"], r["speedup"],
             r["efficiency"], r["comm_mb_per_step"], r["comm_ms_per_step"]] for r in res]
    return _md(["model", "processes", "ms/step", "audio-s/s", "speedup", "efficiency", "allreduce MB/step",
                "allreduce ms/step"], rows)


def _straggler(res: list[dict[str, Any]]) -> str:
    rows = [[r["strategy"], r["straggler"] or "none", r["epochs"], r["utterances_per_second"],
             r["throughput_vs_no_straggler"], r.get("loss_vs_allreduce_max", "-"), f"{r['final_val_loss']:.3f}",
             f"{100 * r['final_wer']:.1f} %" if r["final_wer"] is not None else "-"] for r in res]
    return _md(["strategy", "straggler", "epochs", "utt/s", "vs no straggler", "loss vs allreduce (max)",
                "final val loss", "final WER"], rows)


def _planner(res: dict[str, Any]) -> str:
    goal = res.get("goal", 0.10)
    cal = [[r["case"], r["published"], round(r["predicted"], 2), f"{100 * r['error']:+.1f} %", r["role"],
            "within" if r.get("ok") else f"**{r['status']}**" if r["role"] == "prediction" else "not graded"]
           for r in res["calibration"]]
    preds = [r for r in res["calibration"] if r["role"] == "prediction"]
    v = res["validation"]
    val = [[r["model"], r["processes"], r["step_ms_measured"], r["step_ms_predicted"],
            f"{100 * (r['step_ms_predicted'] / r['step_ms_measured'] - 1):+.0f} %", r["comm_ms_measured"],
            r["comm_ms_predicted"], r["speedup_measured"], r["speedup_predicted"]] for r in v["rows"]]
    return (f"Goal, fixed before computing: every prediction within ±{100 * goal:.0f} %; "
            f"{sum(bool(r.get('ok')) for r in preds)} of {len(preds)} met it. A *fit* row is the figure a constant "
            "was fitted on; a *check* follows from its inputs by construction and is not graded.\n\n" +
            _md(["case", "published", "predicted", "error", "role", f"±{100 * goal:.0f} %"], cal) +
            f"\ngloo on this machine: fitted link {v['link']['bandwidth_gb_s']} GB/s, {v['link']['latency_us']} µs "
            "per hop.\n\n" +
            _md(["model", "processes", "step ms measured", "predicted", "error", "allreduce ms measured", "predicted",
                 "speedup measured", "predicted"], val))


def _recipes(res: list[dict[str, Any]]) -> str:
    rows = [[f"`{r['config']}`", r["scored_on"], r["epochs"], r["steps"], f"{100 * r['wer']:.1f} %",
             f"{100 * r['cer']:.1f} %", r["stopped_by"] or "its epochs", f"{r['wall_seconds']:.0f} s",
             f"WER ≤ {100 * r['goal_wer']:.0f} %: " + ("reached" if r["reached"] else
                                                      f"**not reached** (gap {100 * (r['wer'] - r['goal_wer']):.1f} points)")]
            for r in res]
    return _md(["recipe", "scored on", "epochs", "steps", "WER", "CER", "stopped by", "wall", "goal"], rows)


RENDER: dict[str, Callable[[Any], str]] = {"train": _train, "loader": _loader, "scaling": _scaling,
                                           "straggler": _straggler, "planner": _planner, "recipes": _recipes}


def render(name: str, doc: dict[str, Any]) -> str:
    """The block for bench `name`: its table and the provenance line (or the error it stopped with)."""
    res = doc["results"]
    body = f"**This bench failed:** `{res['error']}`\n" if isinstance(res, dict) and "error" in res \
        else RENDER[name](res)
    return body + _provenance(doc)


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- bench-all:{re.escape(name)} -->\n)(.*?)(<!-- /bench-all:{re.escape(name)} -->)", re.S)


def blocks(text: str) -> dict[str, str]:
    """The generated blocks in a BENCHMARKS.md text, by bench name."""
    pat = r"<!-- bench-all:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /bench-all:(?P=name) -->"
    return {m.group("name"): m.group("body") for m in re.finditer(pat, text, re.S)}


def update(path: Path, docs: dict[str, dict[str, Any]]) -> list[str]:
    """Replace each bench's block in `path` with its rendering (blocks missing from the file are appended
    under a new heading); returns the names written."""
    text = path.read_text() if path.is_file() else "# Benchmarks\n"
    appended = []
    for name, doc in docs.items():
        block = render(name, doc)
        pat = _pattern(name)
        if pat.search(text):
            text = pat.sub(lambda m: m.group(1) + block + m.group(3), text)
        else:
            appended.append(f"### {name}\n\n<!-- bench-all:{name} -->\n{block}<!-- /bench-all:{name} -->\n")
    if appended:
        text = text.rstrip("\n") + "\n\n## `speechscale bench all` (generated)\n\n" + "\n".join(appended)
    path.write_text(text)
    return list(docs)
