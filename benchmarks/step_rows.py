"""BENCHMARKS.md's rows for the GPU step at the card's limit: the exact bidirectional schemes' training
rates against their goals, `speechscale train` against the bench, the loader's cores per GPU with the features on the
device, and graphed inference; read from docs/figures/gpu/gpu-step.json and gpu-infer.json."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .summary_rows import _load, _row, _status

# (model, batch) -> the goal for audio-s/s of the step without its data phase, bf16, graphed
STEP_GOALS = {("ds2-large", 32): 3500, ("ds2-large", 128): 6000, ("conformer", 32): 4500, ("lstm-ctc", 32): 5000,
              ("wav2letter+", 32): 7500}
TRAIN_VS_BENCH = 0.9  # speechscale train's rate against the bench's at the same batch
LOADER_CORES = 1.0  # loader cores per GPU at ds2-large's graphed rate, with the features on the device
INFER_GOALS = {"ds2-large": 2.0, "conformer": 1.4}  # graphed against eager: set from the first run, for the next


def graphed_best(res: list[dict[str, Any]], model: str, batch: int) -> dict[str, Any] | None:
    """The fastest bf16 graphed bench row of `model` at `batch` rows of 10 s (every scheme is exact)."""
    rows = [r for r in res if r.get("kind", "bench") == "bench" and r["model"] == model and r["batch_size"] == batch
            and r["utterance_seconds"] == 10.0 and r["precision"].startswith("bf16+graphs")]
    return max(rows, key=lambda r: r["audio_seconds_per_second_compute"], default=None)


def probe(res: list[dict[str, Any]], batch: int) -> dict[str, Any] | None:
    return next((r for r in res if r.get("kind") == "probe" and r["B"] == batch and r["path"] == "graphed-model"), None)


def train_ratio(res: list[dict[str, Any]]) -> tuple[float, float, float] | None:
    """(train's median audio-s/s over its log rows after the first, the bench at the train's batch, their ratio):
    the loader-features run logged beside the bench (lease2). The first row holds the first shape's capture."""
    log = next((r for r in res if r.get("kind") == "train-log" and r["lease"] == "lease2"), None)
    bench = next((r for r in res if r.get("file") == "train-bench.jsonl"), None)
    if not log or not bench:
        return None
    train = statistics.median(x["audio_s_per_s"] for x in log["rows"][1:])
    return train, bench["audio_seconds_per_second_compute"], train / bench["audio_seconds_per_second_compute"]


def gpu_step_rows(gpu: Path) -> list[dict[str, Any]]:
    doc = _load(gpu / "gpu-step.json")
    if not doc:
        return []
    res, prov, rows = doc["results"], doc["provenance"], []
    for (model, batch), goal in STEP_GOALS.items():
        r = graphed_best(res, model, batch)
        if r is None:
            continue
        rate = r["audio_seconds_per_second_compute"]
        limit = probe(res, batch) if model == "ds2-large" else None
        note = f"{r.get('rnn_scheme', 'no RNN')}" + (f"; the probe's inexact limit {limit['audio_s_per_s']:,}"
                                                      if limit else "")
        rows.append(_row("gpu", f"{model} bf16 graphed, exact, batch {batch} x 10 s (issue #56)",
                         f"{rate:,.0f} audio-s/s ({note})", f"≥ {goal:,}", _status(rate >= goal, f"gap {goal - rate:,.0f}"),
                         prov, "gpu/gpu-step.json"))
    ratio = train_ratio(res)
    if ratio:
        train, bench, x = ratio
        rows.append(_row("gpu", "`speechscale train` ds2-large bf16 graphed against `bench train` at its batch",
                         f"{100 * x:.0f} % ({train:,.0f} against {bench:,.0f} audio-s/s)", f"≥ {100 * TRAIN_VS_BENCH:.0f} %",
                         _status(x >= TRAIN_VS_BENCH, f"gap {100 * (TRAIN_VS_BENCH - x):.0f} points"), prov,
                         "gpu/gpu-step.json"))
    best = graphed_best(res, "ds2-large", 32)
    for r in (r for r in res if r.get("kind") == "loader" and r["features"] == "step" and best):
        cores = best["audio_seconds_per_second_compute"] / r["x_realtime_per_worker"]
        rows.append(_row("data", f"loader cores per GPU, features on the device, augmentation {'on' if r['augment'] else 'off'}"
                         f" (ds2-large's graphed rate)", f"{cores:.2f} cores ({r['x_realtime_per_worker']:,.0f}x real time "
                         "per worker, one pass)", f"≤ {LOADER_CORES:g}", _status(cores <= LOADER_CORES,
                                                                                  f"gap {cores - LOADER_CORES:.2f}"),
                         prov, "gpu/gpu-step.json"))
    return rows + gpu_infer_rows(gpu)


def gpu_infer_rows(gpu: Path) -> list[dict[str, Any]]:
    doc = _load(gpu / "gpu-infer.json")
    if not doc:
        return []
    rows = []
    for r in doc["results"]:
        if r["mode"] == "graphed" and "rtfx" in r:
            eager = next(e for e in doc["results"] if e["model"] == r["model"] and e["mode"] == "eager")
            rows.append(_row("inference", f"{r['model']} {r['precision']} inference, batch {r['batch_size']} x "
                             f"{r['utterance_seconds']:g} s, graphed against eager", f"{r['rtfx']:,.0f} RTFx against "
                             f"{eager['rtfx']:,.0f} ({r['vs_eager']:.2f}x)",
                             f"≥ {INFER_GOALS[r['model']]}x on the next card" if r["model"] in INFER_GOALS else "-",
                             "first run: the goal is set from it", doc["provenance"], "gpu/gpu-infer.json"))
    return rows
