"""A model's streaming step (models.streaming) behind one interface, in PyTorch or as the ONNX file `speechscale
export --format onnx --streaming` writes (through onnxruntime), for streaming.recognizer.Recognizer.

    step = OnnxStep("step.onnx")                     # or TorchStep(model)
    state = step.initial_state(batch=4)
    logits, decided, state = step(feats, frames_in, total, state)   # (B, F, chunk + lookahead) ... -> (B, n, V), (B, n)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..components import components_from_description
from ..config import parse_json
from ..storage.errors import ModelFileError
from ..storage.untrusted import limits, regular_file_size
from .metadata import MAX_STATE_VALUES, MAX_STEP_FRAMES, META_KEY, step_problem  # noqa: F401


class TorchStep:
    """The model's own stream_step in PyTorch, on the model's device."""

    pad_batch = False  # any batch size runs as it is

    def __init__(self, model: Any, chunk: int) -> None:
        if chunk <= 0 or chunk % model.stream_stride:
            raise ValueError(f"chunk must be a multiple of the front end's time stride {model.stream_stride}, "
                             f"not {chunk}")
        self.model, self.chunk, self.lookahead = model.eval(), chunk, model.stream_lookahead
        self.device = next(model.parameters()).device

    def initial_state(self, batch: int) -> list[torch.Tensor]:
        return self.model.stream_init(batch)

    @torch.no_grad()
    def __call__(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                 state: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        logits, ok, state = self.model.stream_step(feats.to(self.device), frames_in.to(self.device),
                                                   total.to(self.device), state)
        return logits.float().cpu(), ok.cpu(), state


class OnnxStep:
    """A streaming step written by `speechscale export --format onnx --streaming`, through onnxruntime (batches of
    any size; the recognizer pads them to powers of two, so onnxruntime sees a few shapes)."""

    pad_batch = True

    def __init__(self, path: str | Path) -> None:
        from .runtime import onnx_session

        path = Path(path)
        self.session, desc = onnx_session(path, ["CPUExecutionProvider"], "an ONNX streaming step")
        if "stream_step" not in desc:
            raise ModelFileError(f"{path}: not a streaming step (export it with `speechscale export --streaming`)")
        self.description = desc
        spec = desc["stream_step"]
        inputs = [i.name for i in self.session.get_inputs()]
        problem = step_problem(spec, inputs)
        if problem:
            raise ModelFileError(f"{path}: its streaming step's description {problem}; not a file speechscale export "
                                 "wrote")
        components_from_description(desc, where=str(path))  # the model it describes typed and in range
        self.chunk, self.shapes = spec["chunk"], spec["state"]  # shapes of one row's state
        self.lookahead = spec.get("lookahead", 0)  # frames read after the chunk (models.streaming)

    def initial_state(self, batch: int) -> list[torch.Tensor]:
        return [torch.zeros(batch, *shape[1:]) for shape in self.shapes.values()]

    def __call__(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                 state: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        feed = {"features": feats.numpy().astype(np.float32, copy=False), "frames_in": frames_in.numpy(),
                "total": total.numpy(), **{n: s.numpy() for n, s in zip(self.shapes, state)}}
        logits, ok, *state = self.session.run(None, feed)
        return torch.from_numpy(logits), torch.from_numpy(ok), [torch.from_numpy(s) for s in state]


def is_stream_step(path: str | Path) -> bool:
    """Whether `path` is an ONNX streaming step (by its metadata)."""
    try:
        import onnx

        if regular_file_size(Path(path), "ONNX file") > limits().max_bytes:
            return False  # onnx_session refuses it in one line
        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        return "stream_step" in parse_json(meta.get(META_KEY, "{}"))
    except Exception:  # noqa: BLE001 - anything else is not one
        return False
