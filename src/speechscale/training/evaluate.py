"""Evaluation: greedy-decode a loader and score corpus WER/CER (a fresh metric every call)."""
from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import torch

from ..data.dataset import Batch
from ..data.text import CharTokenizer
from ..decoding.greedy import greedy_decode
from ..decoding.metrics import ErrorRate


@dataclass
class EvalResult:
    wer: float
    cer: float
    utterances: int
    skipped: int
    skipped_reasons: dict[str, int] = field(default_factory=dict)  # reason -> utterances dropped
    hyps: dict[int, str] = field(default_factory=dict)  # dataset index -> hypothesis
    metric: ErrorRate = field(default_factory=ErrorRate)  # the counts behind wer/cer (summed over ranks)


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, tokenizer: CharTokenizer, device: torch.device | None = None,
             autocast: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> EvalResult:
    """Run `model` in eval mode over `loader` (yielding Batch) and score; restores the previous mode.
    Batches move to `device` (default: the model's); `autocast` gives the forward pass's precision region."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    metric = ErrorRate()
    hyps: dict[int, str] = {}
    reasons: Counter = Counter()
    try:
        for batch in loader:
            batch: Batch
            reasons.update(batch.skipped)
            if len(batch) == 0:
                continue
            batch = batch.to(device)
            with autocast():
                logits, out_lens = model(batch.feats, batch.feat_lens)
            logits = logits.float()
            texts = greedy_decode(logits, out_lens, tokenizer)
            metric.update(batch.texts, texts)
            hyps.update(zip(batch.indices, texts))
    finally:
        model.train(was_training)
    return EvalResult(metric.wer, metric.cer, metric.utterances, sum(reasons.values()), dict(reasons), hyps, metric)
