"""PNG plots of `bench all` results (one per bench; the straggler bench draws its own)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from speechscale.plotting import pyplot as _plt


def _finish(fig: Any, ax: Any, path: Path, **labels: str) -> None:
    """Labels, legend, layout, save, close."""
    ax.set(**labels)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    fig.clf()
    _plt().close(fig)


def plot_train(rows: list[dict[str, Any]], path: Path) -> None:
    """Audio seconds per second by model and precision, with the 10th-90th percentile step range."""
    plt = _plt()
    models = list(dict.fromkeys(r["model"] for r in rows))
    precisions = list(dict.fromkeys(r["precision"] for r in rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(precisions)
    for j, p in enumerate(precisions):
        xs, ys, lo, hi = [], [], [], []
        for i, m in enumerate(models):
            r = next((r for r in rows if r["model"] == m and r["precision"] == p), None)
            if r is None:
                continue
            audio = r["batch_size"] * r["utterance_seconds"]
            fast, slow = r.get("ms_per_step_p10_p90", [r["ms_per_step"]] * 2)
            y = r["audio_seconds_per_second"]
            xs.append(i + j * width)
            ys.append(y)
            lo.append(y - audio / (slow / 1000))
            hi.append(audio / (fast / 1000) - y)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=p)
    ax.set_xticks([i + width * (len(precisions) - 1) / 2 for i in range(len(models))], models)
    _finish(fig, ax, path, ylabel="audio seconds / second", title="Training throughput (median step, p10-p90)")


def plot_loader(rows: list[dict[str, Any]], path: Path) -> None:
    """Real-time factor against loader workers, one line per source and augmentation setting."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for src in dict.fromkeys(r["source"] for r in rows):
        for aug in dict.fromkeys(r["augment"] for r in rows):
            pts = sorted((r["workers"], r["x_realtime"]) for r in rows if r["source"] == src and r["augment"] == aug)
            ax.plot(*zip(*pts), "o-" if not aug else "s--", label=f"{src}, {'augmented' if aug else 'plain'}")
    _finish(fig, ax, path, xlabel="loader worker processes (0 = main process)", ylabel="x real time",
            title="Loader throughput (median pass)")


def plot_scaling(rows: list[dict[str, Any]], path: Path) -> None:
    """Speedup against processes, one line per model, with linear scaling for reference."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    procs = sorted({r["processes"] for r in rows})
    ax.plot(procs, procs, "k:", label="linear")
    for model in dict.fromkeys(r["model"] for r in rows):
        pts = sorted((r["processes"], r["speedup"]) for r in rows if r["model"] == model)
        ax.plot(*zip(*pts), "o-", label=model)
    _finish(fig, ax, path, xlabel="processes (gloo)", ylabel="speedup", title="Data-parallel scaling on this machine")


def plot_calibration(rows: list[dict[str, Any]], path: Path) -> None:
    """Predicted against published for every calibration case: predictions filled (red when they miss the
    goal), fitted figures hollow, consistency checks as crosses."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 5))
    for r in rows:
        marker = "x" if r["role"] == "check" else "o"
        ax.plot(r["published"], r["predicted"], marker, mfc="none" if r["role"] == "fit" else None,
                color="C3" if r.get("ok") is False else "C0")
    lo = min(min(r["published"], r["predicted"]) for r in rows) * 0.8
    hi = max(max(r["published"], r["predicted"]) for r in rows) * 1.2
    ax.plot([lo, hi], [lo, hi], "k:")
    ax.set(xscale="log", yscale="log", xlabel="published", ylabel="planner", title="Planner calibration "
           "(hollow: fitted on it; x: check; red: missed)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_recipes(rows: list[dict[str, Any]], path: Path) -> None:
    """Validation WER (or CER, where that is the recipe's goal) by step for each recipe trained to its end,
    with its goal dotted."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, r in enumerate(rows):
        metric = r.get("goal_metric", "wer")
        pts = [(v["step"], 100 * v[metric]) for v in r["val"] if v.get(metric) is not None]
        ax.plot(*zip(*pts), "o-", ms=3, color=f"C{i}", label=f"{r['recipe']} {metric.upper()} "
                f"({r['scored_on'].split(' (')[0]})")
        ax.axhline(100 * r.get("goal", r["goal_wer"]), color=f"C{i}", ls=":")
    ax.set_xscale("symlog", linthresh=10)
    _finish(fig, ax, path, xlabel="step", ylabel="validation error (%)", title="Recipes trained to their end")


def plot_export(rows: list[dict[str, Any]], path: Path) -> None:
    """Median ms per clip for each model and backend (log scale; whiskers to the 90th percentile)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    backends = ("torch", "onnx", "torchscript")
    width = 0.8 / len(backends)
    for j, b in enumerate(backends):
        ys = [r[f"{b}_ms"] for r in rows]
        ax.bar([i + j * width for i in range(len(rows))], ys, width, label=b,
               yerr=[[0] * len(rows), [r[f"{b}_p90_ms"] - r[f"{b}_ms"] for r in rows]], capsize=3)
    ax.set_xticks([i + width for i in range(len(rows))], [r["model"] for r in rows])
    ax.set_yscale("log")
    _finish(fig, ax, path, ylabel=f"ms per {rows[0]['seconds']:g} s clip (median, p90)",
            title="Inference latency by backend")


def plot_serve(rows: list[dict[str, Any]], path: Path) -> None:
    """Requests per second and p50/p95 latency against the number of concurrent clients."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    levels = [r["concurrency"] for r in rows]
    ax.plot(levels, [r["requests_per_s"] for r in rows], "o-", color="C0", label="requests/s")
    ax.set_xscale("log", base=2)
    right = ax.twinx()
    right.plot(levels, [r["p50_ms"] for r in rows], "s--", color="C1", label="p50 ms")
    right.plot(levels, [r["p95_ms"] for r in rows], "^--", color="C2", label="p95 ms")
    right.set_ylabel("latency (ms)")
    right.legend(fontsize=8, loc="lower right")
    _finish(fig, ax, path, xlabel="concurrent clients", ylabel="requests per second",
            title="Transcription service")


def plot_stream(result: dict[str, Any], path: Path) -> None:
    """Chunk-to-answer latency (p50/p95) against concurrent live streams, and the server's RSS over the memory
    run's streams."""
    plt = _plt()
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(10, 4))
    levels = [r["streams"] for r in result["levels"]]
    ax.plot(levels, [r["p50_ms"] for r in result["levels"]], "s--", color="C1", label="p50 ms")
    ax.plot(levels, [r["p95_ms"] for r in result["levels"]], "^--", color="C2", label="p95 ms")
    ax.axhline(150, color="grey", lw=0.8, ls=":", label="goal: p95 150 ms")
    ax.legend(fontsize=8)
    ax.set_xlabel("concurrent real-time streams")
    ax.set_ylabel("chunk to answer (ms)")
    ax.set_title("WS /v1/stream latency")
    if result.get("memory"):
        by = result["memory"]["rss_mb_by_streams"]
        mem.plot([k for k, _ in by], [v for _, v in by], "o-", color="C0")
    mem.set_xlabel("streams opened and closed")
    mem.set_ylabel("server VmRSS (MB)")
    mem.set_title("Server memory")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
