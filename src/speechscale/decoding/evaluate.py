"""Evaluation: decode a loader (greedy by default, or any decoder of decoders.py) and score corpus WER/CER
and the CTC loss, a fresh metric every call. Inference only: nothing here imports training code."""
from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import torch

from ..data.dataset import Batch
from ..data.text import Tokenizer
from ..models.ctc import ctc_criterion
from .greedy import greedy_decode
from .metrics import ErrorRate


@dataclass
class EvalResult:
    wer: float
    cer: float
    utterances: int
    skipped: int
    skipped_reasons: dict[str, int] = field(default_factory=dict)  # reason -> utterances dropped
    hyps: dict[int, str] = field(default_factory=dict)  # dataset index -> hypothesis
    refs: dict[int, str] = field(default_factory=dict)  # dataset index -> reference (normalized)
    metric: ErrorRate = field(default_factory=ErrorRate)  # the counts behind wer/cer (summed over ranks)
    loss_sum: float = 0.0  # CTC loss per target token, summed over utterances (the training loss's measure)
    frames: int = 0  # feature frames scored (the audio's length in hops)


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, tokenizer: Tokenizer, device: torch.device | None = None,
             autocast: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
             decoder: Callable[[torch.Tensor, torch.Tensor], list[str]] | None = None,
             forward: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
             ) -> EvalResult:
    """Run `model` in eval mode over `loader` (yielding Batch) and score; restores the previous mode.
    Batches move to `device` (default: the model's); `autocast` gives the forward pass's precision region;
    `decoder` (decoding/decoders.py) turns log-probabilities into texts (default greedy); `forward` runs the model
    instead of calling it (feats, lengths -> logits or log-probabilities, output lengths; e.g. a
    inference.graphed.FixedShapeForward)."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    metric = ErrorRate()
    hyps: dict[int, str] = {}
    refs: dict[int, str] = {}
    reasons: Counter = Counter()
    loss_sum = 0.0
    frames = 0
    ctc = ctc_criterion()
    try:
        for batch in loader:
            batch: Batch
            reasons.update(batch.skipped)
            if len(batch) == 0:
                continue
            frames += int(batch.feat_lens.sum())  # before the batch moves: no device sync
            batch = batch.to(device)
            with autocast():
                logits, out_lens = (forward or model)(batch.feats, batch.feat_lens)
            logits = logits.float()
            # the training criterion (mean over the batch of loss per target token), summed back over the batch
            loss_sum += float(ctc(logits.log_softmax(-1).transpose(0, 1), batch.targets, out_lens,
                                  batch.target_lens)) * len(batch)
            logits, out_lens = logits.cpu(), out_lens.cpu()  # decoders search on the host (no-op on a CPU)
            texts = decoder(logits.log_softmax(-1), out_lens) if decoder else greedy_decode(logits, out_lens, tokenizer)
            metric.update(batch.texts, texts)
            hyps.update(zip(batch.indices, texts))
            refs.update(zip(batch.indices, batch.texts))
    finally:
        model.train(was_training)
    return EvalResult(metric.wer, metric.cer, metric.utterances, sum(reasons.values()), dict(reasons), hyps, refs,
                      metric, loss_sum, frames)
