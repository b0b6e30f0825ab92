"""How a model streams: one fixed-shape step over a chunk of feature frames, its state carried between chunks.

    state = model.stream_init(batch=2)
    logits, decided, state = model.stream_step(feats, frames_in, total, state)  # feats (B, F, chunk + lookahead)

A streamable model provides `streaming_problem()` (None when it can stream), `stream_stride` (feature frames per
output frame; a chunk is a multiple of it), `stream_lookahead` (feature frames the step reads after its chunk: 0,
or a right context's), `stream_reads_ahead` (feature frames after a frame's chunk that the model reads before that
frame's output is decided), `stream_init(batch)` (its state: a list of tensors, batch first) and `stream_step`. The step
takes chunk + lookahead feature frames and consumes the first `chunk` (the next step starts after them), each row's
frames fed before this chunk (`frames_in`, (B,)) and its stream's length in feature frames (`total`, (B,); UNKNOWN
while the stream runs), and returns logits (B, chunk / stride, V) with `decided` (B, chunk / stride) marking the
frames that are the offline model's output frames, in order. The layers compute the offline forward and the step
with one definition each (a `step` beside their `forward`).

Every tensor has a fixed shape, so the step traces to one ONNX graph and rows of different streams batch. A layer
carries its last input frames (zeros at the start); at a stream's start it has more zeros than the offline
model's left padding, so its first outputs come from before the stream: output j of a layer is offline output
j - D, D the layer's delay. Outputs outside [0, N) (N: the offline length, from `total`) are set to zero, which is
exactly the next layer's padding, and leave recurrent states as they were.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

UNKNOWN = 1 << 40  # `total` while a stream's length is not known yet


@runtime_checkable
class StreamingModel(Protocol):
    """The interface a streamable model provides (see the module doc)."""

    stream_stride: int
    stream_lookahead: int
    stream_reads_ahead: int

    def streaming_problem(self) -> str | None: ...

    def stream_init(self, batch: int) -> list[torch.Tensor]: ...

    def stream_state_names(self) -> list[str]: ...

    def stream_step(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                    state: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]: ...


def decided(first: torch.Tensor, n: int, delay: int, length: torch.Tensor) -> torch.Tensor:
    """Which of a layer's n outputs, starting at stream index `first` (B,), are offline outputs 0..length-1 when
    the layer's delay is `delay`: (B, n) bool."""
    o = first[:, None] + torch.arange(n, device=first.device)[None, :] - delay  # (B, n)
    return (o >= 0) & (o < length[:, None])


def streaming_problem(model: Any, features: Any, name: str) -> str | None:
    """Why `model` (preset `name`) with feature config `features` cannot stream (one line), or None."""
    if not isinstance(model, StreamingModel):
        return f"{name} needs the whole utterance (it has no streaming step)"
    problem = model.streaming_problem()
    if problem:
        return f"{name} {problem}"
    mode = features.stream_normalize or features.normalize
    if mode not in ("none", "global", "running") or features.remove_dc:
        return (f"{name} normalizes its features over the whole utterance (features.normalize={features.normalize}"
                f"{', remove_dc' if features.remove_dc else ''}); streaming needs features.normalize=global, running or "
                "none (or features.stream_normalize one of them)"
                + ("; `speechscale import deepspeech-pytorch --stats MANIFEST` gives it statistics to stream with"
                   if name == "deepspeech-pytorch" else ""))
    return None


def streaming_card(model: Any, features: Any, name: str) -> dict[str, Any]:
    """What a model card states about streaming, as plain data: {"streams": False, "why": one line}, or
    {"streams": True, "reads_ahead_ms": audio read past a step before its text is final, "frame_ms": an output
    frame}. `features`: the model's feature extractor (its config and hop)."""
    problem = streaming_problem(model, features.cfg, name)
    if problem:
        return {"streams": False, "why": problem}
    hop_ms = 1000 * features.hop_length / features.cfg.sample_rate
    cfg = features.cfg
    other = cfg.stream_normalize and cfg.stream_normalize != cfg.normalize  # streams normalize otherwise than files
    return {"streams": True, "reads_ahead_ms": round(model.stream_reads_ahead * hop_ms, 3),
            "frame_ms": round(model.stream_stride * hop_ms, 3),
            **({"normalize": cfg.stream_normalize, "offline_normalize": cfg.normalize} if other else {})}
