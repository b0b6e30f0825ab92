"""A streaming model's step (models.streaming) as one ONNX graph: a chunk of feature frames and the carried state
in, logits, the decided frames and the new state out (`speechscale export --format onnx --streaming`). The batch
axis is dynamic: one file serves any number of streams at once."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..models.streaming import UNKNOWN

STEP_FRAMES = 32  # feature frames per exported streaming step, unless export --chunk says


class StreamStep(nn.Module):
    """model.stream_step with the state as separate tensors (ONNX inputs and outputs are flat)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model.eval()

    def forward(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits, ok, new = self.model.stream_step(feats, frames_in, total, list(state))
        return (logits, ok, *new)


def export_stream_step(checkpoint: str | Path, out: str | Path, chunk: int = STEP_FRAMES,
                       int8: bool = False) -> dict[str, Any]:
    """Write the checkpoint's streaming step for chunks of `chunk` feature frames (and the frames it reads after
    them, models.streaming) as ONNX to `out` (`int8`: exporter.INT8_OPS' weights int8), with the model description
    and the step's shapes as metadata; returns a summary. A model that cannot stream is a ConfigError in one line."""
    import io
    import json
    import warnings

    from ..components import components_from_checkpoint, describe
    from ..config import ConfigError
    from ..extras import require
    from ..models.streaming import streaming_problem
    from ..storage.cards import card_of_checkpoint, write_card
    from ..storage.checkpoints import load_checkpoint
    from .exporter import with_int8, with_streaming, write_onnx
    from .stream_runtime import TorchStep

    usage = "export --format onnx --streaming"
    require("onnx", "export", usage)  # before any work
    state = load_checkpoint(checkpoint)
    comps = components_from_checkpoint(state, str(checkpoint))
    model = comps.model.eval()
    problem = streaming_problem(model, comps.features.cfg, comps.model_name)  # the rule the recognizer applies
    if problem:
        raise ConfigError(f"--streaming: this model cannot stream: {problem}")
    card = with_streaming(card_of_checkpoint(state, lambda: sum(p.numel() for p in model.parameters())), comps, chunk)
    card, int8_summary = with_int8(card, model, comps.model_name) if int8 else (card, {})
    try:
        TorchStep(model, chunk)  # the step's own check of the chunk
    except ValueError as e:
        raise ConfigError(f"--streaming: {e}") from None
    init = model.stream_init(2)  # batch 2 while tracing, so no size is taken for a constant
    names = model.stream_state_names()
    example = (torch.zeros(2, model.num_features, chunk + model.stream_lookahead), torch.zeros(2, dtype=torch.long),
               torch.full((2,), UNKNOWN, dtype=torch.long), *init)
    inputs, outputs = ["features", "frames_in", "total", *names], ["logits", "decided", *[f"{n}_out" for n in names]]
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings: the shapes other than the batch are fixed by design
        torch.onnx.export(StreamStep(model), example, buffer, dynamo=False, opset_version=17, input_names=inputs,
                          output_names=outputs, dynamic_axes={n: {0: "batch"} for n in inputs + outputs})
    spec = {"chunk": chunk, "lookahead": model.stream_lookahead, "out_frames": chunk // model.stream_stride,
            "state": {n: [1, *t.shape[1:]] for n, t in zip(names, init)}}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_onnx(buffer, json.dumps({**describe(state), "stream_step": spec, "card": card}), out, usage, int8)
    write_card(out.parent, {**card, "file": f"{out.name} (onnx, the streaming step{', int8 weights' if int8 else ''}, "
                                            "exported)"}, prefix=f"{out.name}.")
    return {"format": "onnx", "streaming": True, "out": str(out), "bytes": out.stat().st_size,
            "model": comps.model_name, "chunk": chunk, **int8_summary}
