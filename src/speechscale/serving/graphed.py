"""Inference forward passes replayed as CUDA graphs, one per batch shape: what `bench infer` measures as `graphed`.

A model's eval forward on a GPU launches thousands of small kernels per batch (a recurrent layer runs every time
step as its own kernels); a captured graph replays them at once. Lengths go to the device with the features, and the
model is made capturable (its recurrent layers take their padded, read-back-free paths: the bidirectional layers'
exact schemes), so any lengths up to the shape's frames replay the same graph.

    >>> forward = GraphedForward(model.eval().cuda(), torch.bfloat16)  # doctest: +SKIP
    >>> log_probs = forward(feats_on_gpu, lengths_on_gpu)  # (B, T', V), the graph's own buffer  # doctest: +SKIP
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)


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
        with torch.autocast("cuda", dtype=self.dtype or torch.float32, enabled=self.dtype is not None,
                            cache_enabled=False):
            logits, _ = self.model(feats, lengths)  # (B, T', V)
        return logits.float().log_softmax(-1)

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
