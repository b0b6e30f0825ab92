"""Planner workloads from the model registry's analytic counts, or from a bench JSON's measurement."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import finite_number, parse_json
from .model import PlanError


def registry_cost(name: str, overrides: dict[str, Any] | None = None, features: dict[str, Any] | None = None,
                  seconds: float = 10.0) -> tuple[int, float]:
    """(parameters, training FLOPs per audio second) of a registry model, counted analytically over
    `seconds` of audio (models/flops.py)."""
    from ..config import FeatureConfig, from_dict
    from ..data.features import FeatureExtractor
    from ..data.text import CharTokenizer
    from ..models.registry import RECOMMENDED_FEATURES, build_model

    feats = FeatureExtractor(from_dict(FeatureConfig, features or RECOMMENDED_FEATURES.get(name, {})))
    model = build_model(name, overrides, feats.num_features, CharTokenizer("abcdefghijklmnopqrstuvwxyz' ").vocab_size)
    fwd, bwd = model.flops(feats.frames_for_seconds(seconds))  # type: ignore[operator]
    return sum(p.numel() for p in model.parameters()), (fwd + bwd) / seconds


def measured_throughput(path: str | Path, model: str, precision: str) -> float:
    """Audio-s/s of one device for `model` in `precision` from `bench train` output (a JSON list, JSON lines,
    or `bench all`'s train.json)."""
    p = Path(path)
    if not p.is_file():
        raise PlanError(f"--throughput-json {p}: no such file")
    text = p.read_text()
    try:
        try:
            data = parse_json(text)
            rows = data["results"] if isinstance(data, dict) else data
        except ValueError:
            rows = [parse_json(line) for line in text.splitlines() if line.strip().startswith("{")]
    except (ValueError, KeyError, TypeError) as e:
        raise PlanError(f"--throughput-json {p}: not a bench's JSON or JSON lines ({e})") from None
    want = {"amp": ("bf16", "fp16")}.get(precision, (precision,))
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and row.get("model") == model and row.get("precision") in want:
            speed = row.get("audio_seconds_per_second")
            if not finite_number(speed) or speed <= 0:
                raise PlanError(f"--throughput-json {p}: the {model} row's audio_seconds_per_second is {speed!r}, "
                                f"not a positive number")
            return float(speed)
    raise PlanError(f"--throughput-json {p}: no row for model {model} in {'/'.join(want)}")



SHIPPED = Path(__file__).with_name("data") / "measured.json"


def shipped_throughput(gpu: str, model: str, precision: str, batch_seconds: float) -> tuple[float, str] | None:
    """(audio-s/s, where it comes from) of this project's own measurement of `model` on `gpu` at the
    measured batch nearest to `batch_seconds` (planning/data/measured.json). On a GPU with no measurement, the
    measured GPU's figure scaled by the ratio of the two data-sheet dense peaks at that precision (said so in
    the source: an estimate, not a measurement); None when the model was measured on no GPU."""
    from .hardware import GPUS

    doc = parse_json(SHIPPED.read_text())
    want = {"amp": ("bf16", "fp16")}.get(precision, (precision,))
    rows = [r for r in doc["rows"] if (r["gpu"], r["model"]) == (gpu, model) and r["precision"] in want]
    if not rows:
        measured = sorted({r["gpu"] for r in doc["rows"] if r["model"] == model and r["precision"] in want})
        if not measured or gpu == "cpu":
            return None
        base = min(measured, key=lambda g: abs(GPUS[g][precision] - GPUS[gpu][precision]))  # the nearest peak
        rate, source = shipped_throughput(base, model, precision, batch_seconds)  # type: ignore[misc]
        ratio = GPUS[gpu][precision] / GPUS[base][precision]
        return rate * ratio, (f"estimated: {rate * ratio:.0f} audio-s/s = the {base} measurement x {ratio:.2f}, the "
                              f"data-sheet dense {precision} peak ratio {gpu}/{base} ({GPUS[gpu][precision]:g} / "
                              f"{GPUS[base][precision]:g} TFLOP/s); not measured on {gpu}. The {base} figure: "
                              f"{source}")
    # what training runs by default: the CUDA-graphed step (trainer.cuda_graphs=auto) where it was measured
    row = min(rows, key=lambda r: (abs(r["batch_seconds"] - batch_seconds), not r.get("cuda_graphs"),
                                   want.index(r["precision"])))
    prov = doc["graphs_provenance" if row.get("cuda_graphs") else "provenance"]
    how = ", CUDA graphs" if row.get("cuda_graphs") else ""
    return float(row["audio_seconds_per_second"]), (
        f"measured: {row['audio_seconds_per_second']} audio-s/s, {model} {row['precision']}{how} at "
        f"{row['batch_seconds']} s per batch on {prov['machine'].split(' (')[0]}, {prov['date']}, commit {prov['commit']}")
