"""Run a streaming step (export/stream_step.py) on feature frames as they arrive: the torch StreamStep or its
ONNX file through onnxruntime, behind one interface that StreamingSession (serving/streaming.py) calls.

    feeder = StepFeeder(OnnxStep("step.onnx"), comps.model)
    logits = feeder(frames)             # (F, n) feature frames -> the logits they decide (m, V), or None
    logits = feeder(frames, final=True) # the stream's end: the rest

The feeder collects frames into the step's fixed chunk, passes the frame count and state along, and at the end
tells the step the stream's length and feeds zero chunks until every output frame (the offline model's count)
has come out.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import ConfigError
from .exporter import META_KEY
from .stream_step import UNKNOWN, StreamStep


class TorchStep:
    """The StreamStep module in PyTorch: (feats, frames_in, total, state) -> (logits, valid, state)."""

    def __init__(self, model: Any, chunk: int = 32) -> None:
        self.step = StreamStep(model, chunk).eval()
        self.chunk = chunk

    def initial_state(self) -> list[Any]:
        return self.step.initial_state()

    @torch.no_grad()
    def __call__(self, feats: np.ndarray, frames_in: int, total: int, state: list[Any]) -> tuple[Any, Any, list]:
        logits, valid, *state = self.step(torch.from_numpy(feats), torch.tensor([frames_in]), torch.tensor([total]),
                                          *state)
        return logits.numpy(), valid.numpy(), state


class OnnxStep:
    """A streaming step written by `speechscale export --format onnx --streaming`, through onnxruntime."""

    def __init__(self, path: str | Path) -> None:
        from ..extras import require

        onnx = require("onnx", "export", "an ONNX streaming step")
        ort = require("onnxruntime", "export", "an ONNX streaming step")
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: no such ONNX streaming step")
        try:
            meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        except Exception as e:  # protobuf's decode errors have several types
            raise ConfigError(f"{path}: not an ONNX file ({type(e).__name__})") from None
        desc = json.loads(meta.get(META_KEY, "{}"))
        if "stream_step" not in desc:
            raise ConfigError(f"{path}: not a streaming step (export it with `speechscale export --streaming`)")
        self.description = desc
        spec = desc["stream_step"]
        self.chunk, self.shapes = spec["chunk"], spec["state"]
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def initial_state(self) -> list[np.ndarray]:
        return [np.zeros(shape, np.float32) for shape in self.shapes.values()]

    def __call__(self, feats: np.ndarray, frames_in: int, total: int, state: list[Any]) -> tuple[Any, Any, list]:
        feed = {"features": feats, "frames_in": np.array([frames_in], np.int64), "total": np.array([total], np.int64),
                **dict(zip(self.shapes, state))}
        logits, valid, *state = self.session.run(None, feed)
        return logits, valid, state


def is_stream_step(path: str | Path) -> bool:
    """Whether `path` is an ONNX streaming step (by its metadata)."""
    try:
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        return "stream_step" in json.loads(meta.get(META_KEY, "{}"))
    except Exception:  # noqa: BLE001 - anything else is not one
        return False


class StepFeeder:
    """Feature frames in any numbers -> the logits a fixed-chunk step decides (see the module doc)."""

    def __init__(self, step: TorchStep | OnnxStep, model: Any) -> None:
        self.step, self.model, self.chunk = step, model, step.chunk
        self.state = step.initial_state()
        self.pending = np.zeros((model.num_features, 0), np.float32)
        self.fed = self.received = self.emitted = 0

    def __call__(self, feats: torch.Tensor | None, final: bool = False) -> torch.Tensor | None:
        """New frames (F, n) -> logits (m, V) of the frames they decide, or None."""
        if feats is not None and feats.shape[-1]:
            self.pending = np.concatenate([self.pending, feats.numpy().astype(np.float32)], axis=1)
            self.received += feats.shape[-1]
        out = []
        while self.pending.shape[1] >= self.chunk:
            out.append(self._step(UNKNOWN))
        if final:
            total = self.received
            expected = int(self.model.output_lengths(torch.tensor([total]))[0]) if total else 0
            while self.emitted < expected:
                out.append(self._step(total))
        out = [x for x in out if len(x)]
        return torch.from_numpy(np.concatenate(out)) if out else None

    def _step(self, total: int) -> np.ndarray:
        take = self.pending[:, : self.chunk]
        self.pending = self.pending[:, self.chunk:]
        if take.shape[1] < self.chunk:  # the end: zeros after the last frame, as the offline padding
            take = np.pad(take, ((0, 0), (0, self.chunk - take.shape[1])))
        logits, valid, self.state = self.step(take[None], self.fed, total, self.state)
        self.fed += self.chunk
        decided = logits[valid.astype(bool)]
        self.emitted += len(decided)
        return decided
