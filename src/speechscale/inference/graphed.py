"""Inference forward passes replayed as CUDA graphs, one per batch shape: what `bench infer` measures as `graphed`.

A model's eval forward on a GPU launches thousands of small kernels per batch (a recurrent layer runs every time
step as its own kernels); a captured graph replays them at once. Lengths go to the device with the features, and the
model is made capturable (its recurrent layers take their padded, read-back-free paths: the bidirectional layers'
exact schemes), so any lengths up to the shape's frames replay the same graph.

    >>> forward = GraphedForward(model.eval().cuda(), torch.bfloat16)  # doctest: +SKIP
    >>> log_probs = forward(feats_on_gpu, lengths_on_gpu)  # (B, T', V), the graph's own buffer  # doctest: +SKIP

`eval --graphs` and `transcribe --graphs` take batches of any shape through `FixedShapeForward`: each batch padded
to one of a few shapes (rows to a power of two, frames to one of eight steps an octave), so a run captures a
handful of graphs, not one per batch.

    >>> bucket_frames(237), bucket_frames(1000), bucket_frames(1024)
    (240, 1024, 1024)
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable

import torch
from torch import nn

log = logging.getLogger(__name__)


def log_probs(model: nn.Module, feats: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype | None = None,
              cast_cache: bool = True) -> torch.Tensor:
    """`model`'s forward as inference runs it: feats (B, F, T), lengths (B,) -> log-probabilities (B, T', V) in
    fp32, under autocast in `dtype` (None: the model's own precision). `cast_cache=False` for a graph capture,
    which must not keep autocast's weight casts across replays."""
    with torch.autocast(feats.device.type, dtype=dtype or torch.float32, enabled=dtype is not None,
                        cache_enabled=cast_cache):
        logits, _ = model(feats, lengths)  # (B, T', V)
    return logits.float().log_softmax(-1)


class GraphedForward:
    """`model`'s inference forward (log-probabilities, fp32) captured per (B, F, T) shape and dtype, replayed on later
    batches of that shape. `dtype`: the autocast precision (None: the model's own). The returned tensor is the
    graph's static output: read or copy it before the next call of the same shape."""

    def __init__(self, model: nn.Module, dtype: torch.dtype | None = None, warmup: int = 2) -> None:
        from ..models.rnn import set_capturable

        self.model, self.dtype, self.warmup = model, dtype, warmup
        set_capturable(model)
        self.graphs: dict[tuple[Any, ...], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle()

    def _forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return log_probs(self.model, feats, lengths, self.dtype, cast_cache=False)

    @torch.inference_mode()
    def __call__(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """feats (B, F, T) and lengths (B,) on the CUDA device -> log-probabilities (B, T', V)."""
        key = (tuple(feats.shape), feats.dtype)
        if key not in self.graphs:
            self.graphs[key] = self._capture(feats, lengths)
        graph, static_feats, static_lens, out = self.graphs[key]
        static_feats.copy_(feats)
        static_lens.copy_(lengths)
        graph.replay()
        return out

    def _capture(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[Any, ...]:
        static_feats, static_lens = feats.clone(), lengths.clone()
        side = torch.cuda.Stream(feats.device)
        side.wait_stream(torch.cuda.current_stream(feats.device))
        with torch.cuda.stream(side):  # warm-up off the capture stream (cuDNN and cuBLAS pick their kernels here)
            for _ in range(self.warmup):
                self._forward(static_feats, static_lens)
        torch.cuda.current_stream(feats.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self._forward(static_feats, static_lens)
        log.info("captured an inference CUDA graph for batches of shape %s", tuple(feats.shape))
        return graph, static_feats, static_lens, out


def check_graphs_device(device: str) -> None:
    """--graphs replays CUDA graphs: a ConfigError in one line unless `device` resolves to a CUDA device."""
    from ..components import resolve_device
    from ..config import ConfigError

    if resolve_device(device, "--device").type != "cuda":
        raise ConfigError(f"--graphs replays CUDA graphs: it needs a CUDA device, not --device {device}")


STEPS_PER_OCTAVE = 8  # frame buckets between two powers of two: a batch is padded by at most an eighth


def bucket_frames(frames: int) -> int:
    """The padded frame count of a batch `frames` long: the next multiple of 2**(octave - 3), at least 16."""
    if frames <= 16:
        return 16
    step = 2 ** (math.floor(math.log2(frames)) - int(math.log2(STEPS_PER_OCTAVE)))
    return -(-frames // step) * step


def bucket_rows(rows: int) -> int:
    """The padded row count of a batch of `rows`: the next power of two."""
    return 1 << (rows - 1).bit_length()


class FixedShapeForward:
    """`model`'s inference forward for batches of any shape, each padded to a bucket (`bucket_rows`, `bucket_frames`):
    rows beyond the batch repeat its last row, frames beyond the longest are zeros (the models are exact under
    padding). On a CUDA device the padded batch replays a GraphedForward graph (one per bucket); `graphed=False`
    runs the same padding eagerly. Called like the model: feats (B, F, T), lengths (B,) on the model's device ->
    log-probabilities (B, T', V) in fp32 (a copy, T' the unpadded batch's frames out) and output lengths (B,)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype | None = None, graphed: bool = True) -> None:
        self.model = model.eval()
        self.run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (
            GraphedForward(self.model, dtype) if graphed else lambda f, n: log_probs(self.model, f, n, dtype))

    @torch.inference_mode()
    def __call__(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, num_features, frames = feats.shape
        padded = feats.new_zeros(bucket_rows(rows), num_features, bucket_frames(frames))  # (B*, F, T*)
        padded[:rows, :, :frames] = feats
        padded[rows:] = padded[rows - 1]
        lens = torch.cat([lengths, lengths[-1:].expand(padded.shape[0] - rows)])  # (B*,)
        frames_out = int(self.model.output_lengths(torch.tensor([frames]))[0])  # the unpadded batch's T'
        log_probs = self.run(padded, lens)[:rows, :frames_out].clone()  # (B, T', V), off the graph's buffer
        return log_probs, self.model.output_lengths(lengths)
