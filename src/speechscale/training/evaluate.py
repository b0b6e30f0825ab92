"""Evaluation: greedy-decode a loader and score corpus WER/CER and the CTC loss (a fresh metric every call)."""
from __future__ import annotations

import contextlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager

import torch

from ..data.dataset import Batch
from ..data.text import CharTokenizer
from ..decoding.greedy import greedy_decode
from ..decoding.metrics import ErrorRate
from .step import ctc_criterion

if TYPE_CHECKING:
    from ..distributed.strategy import Strategy


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


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, tokenizer: CharTokenizer, device: torch.device | None = None,
             autocast: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
             decoder: Callable[[torch.Tensor, torch.Tensor], list[str]] | None = None) -> EvalResult:
    """Run `model` in eval mode over `loader` (yielding Batch) and score; restores the previous mode.
    Batches move to `device` (default: the model's); `autocast` gives the forward pass's precision region;
    `decoder` (decoding/decoders.py) turns log-probabilities into texts (default greedy)."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    metric = ErrorRate()
    hyps: dict[int, str] = {}
    refs: dict[int, str] = {}
    reasons: Counter = Counter()
    loss_sum = 0.0
    ctc = ctc_criterion()
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
            # the training criterion (mean over the batch of loss per target token), summed back over the batch
            loss_sum += float(ctc(logits.log_softmax(-1).transpose(0, 1), batch.targets, out_lens,
                                  batch.target_lens)) * len(batch)
            texts = decoder(logits.log_softmax(-1), out_lens) if decoder else greedy_decode(logits, out_lens, tokenizer)
            metric.update(batch.texts, texts)
            hyps.update(zip(batch.indices, texts))
            refs.update(zip(batch.indices, batch.texts))
    finally:
        model.train(was_training)
    return EvalResult(metric.wer, metric.cer, metric.utterances, sum(reasons.values()), dict(reasons), hyps, refs,
                      metric, loss_sum)


def validate(model: torch.nn.Module, loader, tokenizer: CharTokenizer, strategy: "Strategy", device: torch.device,
             autocast: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> dict[str, float]:
    """Corpus WER/CER of the strategy's consensus weights; each rank scores its share, counts are summed."""
    with strategy.consensus(model) as consensus:
        res = evaluate(consensus, loader, tokenizer, device, autocast)
    m = res.metric
    counts = torch.tensor([m.word_errors, m.words, m.char_errors, m.chars, m.utterances, res.skipped, res.loss_sum],
                          dtype=torch.float64)
    we, w, ce, c, n, skipped, loss = strategy.all_reduce_sum(counts).tolist()
    return {"wer": we / w if w else math.nan, "cer": ce / c if c else math.nan, "val_loss": loss / n if n else math.nan,
            "utterances": int(n), "skipped": int(skipped)}
