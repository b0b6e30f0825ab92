"""BENCHMARKS.md's per-area tables, rendered from the committed data (issue #43 §1): one row per headline figure
with its goal, reached or not (with the gap), when and on which machine it was measured, the file it comes from,
and under each table the command and commit that made each file.

    python -m benchmarks all --tables-only --out docs/figures/bench-all   # re-renders these blocks too

No figure here is typed by hand: each is read from `docs/figures/` (bench-all, gpu, loso, multinode, test-time),
and tests/bench/test_summary.py fails when a block in BENCHMARKS.md differs from this rendering. A goal is
"reached" only when every measured value clears it (a figure with one run says "1 run"; one over seeds or
repeats is judged on its worst). The rows themselves are built in benchmarks/summary_rows.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .summary_rows import SECTIONS, summary_rows
from .tables import _md, _replace, read_block

__all__ = ["SECTIONS", "block", "render", "summary_rows", "update"]


def _tag(section: str) -> str:
    return f"summary:{section}"


def render(figures: Path, section: str, rows: list[dict[str, Any]] | None = None) -> str:
    """The body of one area's block: its table, then each data file's command and commit. `rows`: every area's
    rows when the caller has read them already (summary_rows reads every file under `figures`)."""
    rows = [r for r in (rows if rows is not None else summary_rows(figures)) if r["section"] == section]
    table = _md(["what", "figure", "goal", "status", "measured", "machine", "data"],
                [[r["what"], r["figure"], r["goal"], r["status"], r["date"], r["machine"], f"`{r['source']}`"]
                 for r in rows])
    made: dict[str, str] = {}
    for r in rows:
        made.setdefault(r["source"].split("#")[0], f"`{r['command']}` at {r['commit']}")
    return table + "\nMade by:\n" + "".join(f"- `{src}`: {how}\n" for src, how in made.items())


def block(text: str, section: str) -> str | None:
    """One area's block body in a BENCHMARKS.md text."""
    return read_block(text, _tag(section))


def update(path: Path, figures: Path) -> list[str]:
    """Re-render every area block `path` (BENCHMARKS.md) and its area pages have, and the table of convergence runs;
    returns the blocks written."""
    from .summary_runs import render_runs
    from .tables import pages

    written, rows = [], summary_rows(figures)
    bodies = {_tag(section): (section, render(figures, section, rows)) for section in SECTIONS}
    bodies["convergence-runs"] = ("convergence runs", render_runs(figures / "convergence"))
    for page in [p for p in pages(path) if p.is_file()]:  # BENCHMARKS.md and its area pages, each in one write
        text = page.read_text()
        for tag, (name, body) in bodies.items():
            replaced = _replace(text, tag, body)
            if replaced is not None:
                text = replaced
                written.append(name)
        page.write_text(text)
    return written
