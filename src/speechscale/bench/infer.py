"""Batched inference throughput as RTFx (audio seconds per second): eager PyTorch, the forward replayed as a CUDA
graph, and the exported ONNX file on onnxruntime, side by side.

    speechscale bench infer --model ds2-large,conformer --batch-size 32 --seconds 10 --device cuda --precision bf16

Each model (its initial weights: speed does not depend on them) runs batches of `batch-size` windows of real
speech (LDC93S1 by default) whose features are computed once, outside the clock, as a loader would. The clock covers
the features' copy to the device, the forward pass and the log-softmax, until the log-probabilities are on the device
(`sync`). Modes, interleaved round after round (bench/harness.py):
  eager   - the model in eval mode under inference_mode (autocast in --precision on a GPU), lengths on the host
            (cuDNN's packed RNN path), as `eval` and `transcribe` run it;
  graphed - the same forward captured once as a CUDA graph and replayed (inference/graphed.py), lengths on the device;
  onnx    - `speechscale export`'s file on onnxruntime: its CUDA provider on a GPU (onnxruntime-gpu), else the CPU;
  onnx-int8 - `speechscale export --int8`'s file (matrix products and LSTMs with int8 weights), the same way.
Each row also gives its largest difference from eager's log-probabilities on the valid frames.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..training.precision import resolve_device
from .export import initial_checkpoint
from .harness import interleave, keeps_torch_threads
from .throughput import _clips, _sync

MODES = ("eager", "graphed", "onnx", "onnx-int8")
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def _runner(mode: str, comps: Any, ckpt: Path, tmp: Path, device: torch.device, dtype: torch.dtype | None
            ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One mode's callable: features (B, F, T) and lengths (B,) on the host -> log-probabilities (B, T', V)."""
    model = comps.model
    if mode == "eager":
        from ..inference.graphed import log_probs

        def eager(feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return log_probs(model, feats.to(device, non_blocking=True), lengths, dtype)
        return eager
    if mode == "graphed":
        from ..inference.graphed import GraphedForward

        if device.type != "cuda":
            raise ValueError("graphed needs a CUDA device")
        graphed = GraphedForward(model, dtype)
        return lambda feats, lengths: graphed(feats.to(device, non_blocking=True), lengths.to(device, non_blocking=True))
    from ..export.exporter import export_model
    from ..export.runtime import ExportedModel

    export_model(ckpt, "onnx", tmp / f"{mode}.onnx", int8=mode == "onnx-int8")
    onnx = ExportedModel(tmp / f"{mode}.onnx", "onnx", device)
    return lambda feats, lengths: onnx(feats, lengths)[0].to(device)


@keeps_torch_threads
def bench_infer(models: list[str], batch_size: int = 8, seconds: float = 5.0, steps: int = 5, warmup: int = 2,
                modes: tuple[str, ...] = ("eager", "onnx"), device: str = "auto", precision: str = "fp32",
                manifest: str | None = None, threads: int = 0) -> list[dict[str, Any]]:
    """One row per (model, mode): ms per batch (median, p10-p90), RTFx, the ratio to eager, and the largest
    log-probability difference from eager on valid frames. A mode that cannot run here gives its reason instead."""
    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    dtype = DTYPES[precision] if dev.type == "cuda" else None  # the CPU runs fp32: eager and onnx alike
    rows = []
    for name in models:
        with tempfile.TemporaryDirectory() as tmp:
            rows += _bench_model(name, Path(tmp), dev, dtype, batch_size, seconds, steps, warmup, modes, manifest)
    for r in rows:
        r["precision"] = "int8" if r["mode"] == "onnx-int8" else \
            precision if dev.type == "cuda" and r["mode"] != "onnx" else "fp32"
    return rows


def _bench_model(name: str, tmp: Path, dev: torch.device, dtype: torch.dtype | None, batch_size: int, seconds: float,
                 steps: int, warmup: int, modes: tuple[str, ...], manifest: str | None) -> list[dict[str, Any]]:
    ckpt, comps = initial_checkpoint(name, tmp / "m.pt")  # the exported file holds these weights
    comps.model.to(dev).eval()
    clips = _clips(manifest, comps.features.cfg.sample_rate, seconds, batch_size, seed=0)
    feats = torch.stack([comps.features(torch.from_numpy(c)) for c in clips])  # (B, F, T)
    if dev.type == "cuda":
        feats = feats.pin_memory()
    lengths = torch.full((batch_size,), feats.shape[-1], dtype=torch.long)
    runners, reasons = {}, {}
    for mode in modes:
        try:
            runners[mode] = _runner(mode, comps, ckpt, tmp, dev, dtype)
        except Exception as e:  # a missing runtime or provider is a row that says so, not a crash
            reasons[mode] = f"{type(e).__name__}: {e}".splitlines()[0]
    outs: dict[str, torch.Tensor] = {}

    def timed(mode: str) -> None:
        outs[mode] = runners[mode](feats, lengths)

    stats = interleave({m: (lambda m=m: timed(m)) for m in runners}, repeats=steps, warmup=warmup,
                       sync=lambda: _sync(dev))
    rows = []
    for mode in modes:
        row: dict[str, Any] = {"model": name, "mode": mode, "device": _device_name(dev), "batch_size": batch_size,
                               "utterance_seconds": seconds, "steps": steps, "threads": torch.get_num_threads()}
        if mode in reasons:
            rows.append({**row, "unavailable": reasons[mode]})
            continue
        st = stats[mode]
        row.update(ms_per_batch=round(1000 * st.median, 2), ms_p10_p90=[round(1000 * st.p10, 2), round(1000 * st.p90, 2)],
                   rtfx=round(batch_size * seconds / st.median, 1))
        if "eager" in stats and mode != "eager":
            row["vs_eager"] = round(stats["eager"].median / st.median, 3)
            row["max_abs_diff_vs_eager"] = float((outs[mode].float() - outs["eager"].float()).abs().max())
        rows.append(row)
    return rows


def _device_name(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
