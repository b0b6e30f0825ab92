"""Inference latency of one clip: PyTorch against the exported ONNX (onnxruntime) and TorchScript files.

    speechscale bench export --model ds2-tiny,ds2-large --seconds 5 --repeats 20

Each model (initial weights, its recommended features) is exported to a temporary folder; the three
backends then run the same features (batch 1) in turn, round after round, so they share the machine's
state; the median and the 90th percentile of the timed rounds are reported with the ratio to PyTorch.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ..components import build_components
from ..config import to_dict
from ..export.exporter import LogProbs, export_model
from ..export.runtime import ExportedModel
from ..recipe import load_recipe
from .harness import keeps_torch_threads


def initial_checkpoint(model: str, path: Path) -> tuple[Path, Any]:
    """A checkpoint of `model`'s initial weights with its default config (latency does not depend on the
    weights); returns the path and the built components."""
    cfg = load_recipe(None, [f"model.name={model}"])
    comps = build_components(cfg)
    torch.save({"format_version": 3, "config": to_dict(cfg), "model": comps.model.state_dict()}, path)
    return path, comps


@keeps_torch_threads
def bench_export(models: list[str], seconds: float = 5.0, repeats: int = 20, warmup: int = 3,
                 threads: int = 0) -> list[dict[str, Any]]:
    """One row per model: ms per clip (median, p90) for torch, onnx and torchscript, and the ratios."""
    if threads:
        torch.set_num_threads(threads)
    rows = []
    for name in models:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt, comps = initial_checkpoint(name, Path(tmp) / "m.pt")
            runners = {"torch": LogProbs(comps.model.eval())}
            for fmt in ("onnx", "torchscript"):
                export_model(ckpt, fmt, Path(tmp) / f"m.{fmt}")
                runners[fmt] = ExportedModel(Path(tmp) / f"m.{fmt}", fmt)
            frames = comps.features.frames_for_seconds(seconds)
            feats, lengths = torch.randn(1, comps.features.num_features, frames), torch.tensor([frames])
            times: dict[str, list[float]] = {k: [] for k in runners}
            for r in range(warmup + repeats):
                for k, run in runners.items():
                    started = time.perf_counter()
                    with torch.no_grad():
                        run(feats, lengths)
                    if r >= warmup:
                        times[k].append(1000 * (time.perf_counter() - started))
        med = {k: statistics.median(v) for k, v in times.items()}
        row: dict[str, Any] = {"model": name, "seconds": seconds, "threads": torch.get_num_threads()}
        for k, v in times.items():
            row[f"{k}_ms"] = round(med[k], 2)
            row[f"{k}_p90_ms"] = round(sorted(v)[int(0.9 * (len(v) - 1))], 2)
        row["onnx_vs_torch"] = round(med["torch"] / med["onnx"], 2)
        row["torchscript_vs_torch"] = round(med["torch"] / med["torchscript"], 2)
        rows.append(row)
    return rows
