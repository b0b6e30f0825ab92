"""`speechscale report RUN_DIR`: PNG plots of a run and one self-contained HTML page that embeds them
(it opens from anywhere, offline). Curves are drawn against steps and against wall time; each start of
training after the first (a resume, or a restart by torchrun) is a dashed vertical line."""
from __future__ import annotations

import base64
import html
import json
import logging
import time
from pathlib import Path
from typing import Any

from ..config import finite_number
from .runs import Run, load_run, skipped, throughput

Series = list[tuple[float, float]]
log = logging.getLogger(__name__)


def _series(rows: list[dict[str, Any]], key: str, t0: float, unit: float) -> tuple[Series, Series]:
    """(step, value) and (wall time since t0 in `unit` seconds, value) of `key` where it is a number."""
    pts = [(r["step"], r["time"], r[key]) for r in rows if finite_number(r.get(key))]
    return [(s, v) for s, _, v in pts], [((t - t0) / unit, v) for _, t, v in pts]


def _broken(pts: Series, cuts: list[float]) -> Series:
    """`pts` with a gap (NaN) wherever a restart lies between two points, so no line joins two starts."""
    out: Series = []
    for a, b in zip(pts, pts[1:] + [None]):  # type: ignore[operator]
        out.append(a)
        if b is not None and any(a[0] <= c < b[0] for c in cuts):
            out.append((a[0], float("nan")))
    return out


def _figure(path: Path, title: str, panels: list[tuple[str, dict[str, Series]]], starts: list[tuple[float, float]],
            ylabel: str, log_y: bool = False) -> None:
    """Two panels (over steps, over wall hours); one line per series; restarts as dashed lines."""
    from ..plotting import pyplot

    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, (xlabel, lines), restart_x in zip(axes, panels, ([s for s, _ in starts], [h for _, h in starts])):
        for i, (label, pts) in enumerate(lines.items()):
            if pts:
                ax.plot(*zip(*_broken(pts, restart_x)), marker="o" if len(pts) < 30 else None, ms=3, label=label,
                        color=f"C{i}")
        for x in restart_x:
            ax.axvline(x, color="grey", ls="--", lw=1)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        if log_y:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plots(run: Run, out: Path) -> list[tuple[str, str]]:
    """Write every plot the run has data for; returns (file name, caption) pairs."""
    from ..plotting import pyplot

    pyplot()  # without matplotlib: the extra's one line, before any figure
    train, val, t0 = run.of("train"), run.of("val"), run.t0
    span = run.rows[-1]["time"] - t0 if run.rows else 0
    unit, unit_name = (3600, "wall hours") if span > 7200 else (60, "wall minutes")
    starts = [(s.start_step, (s.start_time - t0) / unit) for s in run.segments[1:]]
    made: list[tuple[str, str]] = []

    def draw(name: str, caption: str, ylabel: str, series: dict[str, tuple[Series, Series]], log_y: bool = False
             ) -> None:
        if not any(steps for steps, _ in series.values()):
            return
        panels = [("step", {k: v[0] for k, v in series.items()}), (unit_name, {k: v[1] for k, v in series.items()})]
        try:
            _figure(out / name, caption, panels, starts, ylabel, log_y)
        except (ValueError, OverflowError) as e:  # values no axis can span (a hand-edited or foreign log)
            log.warning("%s not drawn: %s", name, e)
            return
        made.append((name, caption))

    draw("loss.png", "Loss (CTC per target token)", "loss",
         {"train (logging interval)": _series(train, "loss", t0, unit), "train (epoch)": _series(val, "train_loss", t0, unit),
          "validation": _series(val, "val_loss", t0, unit)}, log_y=True)
    draw("error_rates.png", "Validation WER and CER", "error rate",
         {"WER": _series(val, "wer", t0, unit), "CER": _series(val, "cer", t0, unit)})
    draw("lr.png", "Learning rate", "lr", {"lr": _series(train, "lr", t0, unit)})
    thr = throughput(run)
    draw("throughput.png", "Training throughput", "utterances / s",
         {"utterances/s": ([(s, v) for s, _, v in thr], [(t / unit, v) for _, t, v in thr])})
    counts = skipped(run)
    draw("skipped.png", "Skipped, cumulative, by reason", "count",
         {k: (v, [((r["time"] - t0) / unit, c) for r, (_, c) in zip(val, v)]) for k, v in counts.items()})
    draw("loss_scale.png", "fp16 loss scale", "loss scale", {"loss scale": _series(train, "loss_scale", t0, unit)},
         log_y=True)
    draw("consensus.png", "ADPSGD consensus distance", "mean L2 distance",
         {"consensus distance": _series(val, "consensus_distance", t0, unit)})
    draw("memory.png", "GPU peak memory per logging interval", "MB", {"peak MB": _series(train, "peak_mem_mb", t0, unit)})
    return made


def _table(head: list[str], rows: list[list[Any]]) -> str:
    def cells(r: list[Any], tag: str) -> str:
        return "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in r)
    return f"<table><tr>{cells(head, 'th')}</tr>" + "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows) + "</table>"


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def page(run: Run, figures: list[tuple[str, str]], out: Path) -> str:
    """The HTML page, with the PNGs embedded as data URIs."""
    val = run.of("val")
    last_val = val[-1] if val else {}
    best = min((r["wer"] for r in val if finite_number(r.get("wer"))), default=None)
    last = run.rows[-1] if run.rows else {}
    model_section = (run.config or {}).get("model")
    model = model_section.get("name", "?") if isinstance(model_section, dict) else "?"
    summary = [
        ["status", run.status], ["model", model], ["steps", last.get("step", 0)],
        ["epochs completed", last.get("epoch", 0)],
        ["last validation", f"WER {100 * last_val['wer']:.2f} %, CER {100 * last_val['cer']:.2f} % (step {last_val['step']})"
         if finite_number(last_val.get("wer")) and finite_number(last_val.get("cer")) else "none yet"],
        ["best WER", f"{100 * best:.2f} %" if best is not None else "-"],
        ["wall time", f"{(last.get('time', run.t0) - run.t0) / 3600:.2f} h over {len(run.segments)} start(s)"],
        ["metrics lines", f"{len(run.rows)} ({run.torn_lines} unreadable, skipped)"],
        ["loader restarts (a worker died)", last_val.get("loader_restarts", 0) if last_val else "-"],
    ]
    starts = [[i + 1, _when(s.start_time), s.start_step, s.world_size or "-", s.strategy or "-", s.precision or "-",
               s.resumed_from or ("fresh" if i == 0 else "unknown (old log)"), s.end_step,
               (s.stopped_by or "planned end") if s.ended else "no stop row"] for i, s in enumerate(run.segments)]
    ckpts = [[c["name"], c["mb"], _when(c["time"])] for c in run.checkpoints]
    imgs = "".join(
        f'<figure><img alt="{html.escape(cap)}" src="data:image/png;base64,'
        f'{base64.b64encode((out / name).read_bytes()).decode()}"><figcaption>{html.escape(cap)}</figcaption></figure>'
        for name, cap in figures)
    config = html.escape(json.dumps(run.config, indent=2)) if run.config is not None else "(no config.json)"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>speechscale run report: {html.escape(run.path.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; }}
th {{ background: #f3f3f3; text-align: left; }} figure {{ margin: 1em 0; }} img {{ max-width: 100%; }}
pre {{ background: #f7f7f7; padding: 1em; overflow: auto; max-height: 30em; }}
</style></head><body>
<h1>Run report: {html.escape(str(run.path))}</h1>
<p>Generated {_when(time.time())} by <code>speechscale report</code> from metrics.jsonl, config.json and
checkpoints/. Dashed vertical lines mark each later start (a resume or a restart).</p>
<h2>Summary</h2>{_table(["", ""], summary)}
<h2>Starts, resumes and restarts</h2>
{_table(["#", "started", "at step", "world size", "strategy", "precision", "from", "last step", "ended"], starts)}
<h2>Plots</h2><div id="plots">{imgs or "<p>No rows to plot yet.</p>"}</div>
<h2>Checkpoints</h2>{_table(["file", "MB", "written"], ckpts) if ckpts else "<p>none</p>"}
<h2>Config</h2><pre id="config">{config}</pre>
</body></html>
"""


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write OUT (default RUN_DIR/report)/index.html and its PNGs; returns the HTML path."""
    run = load_run(run_dir)
    folder = Path(out) if out else run.path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    figures = plots(run, folder)
    index = folder / "index.html"
    tmp = index.with_suffix(".tmp")
    tmp.write_text(page(run, figures, folder))
    tmp.replace(index)  # a browser refreshing during a live run never sees half a page
    return index
