"""Validation during training: the strategy's consensus weights scored on every rank's share, counts summed."""
from __future__ import annotations

import contextlib
import logging
import math
from typing import TYPE_CHECKING, Any, Callable, ContextManager

import torch

from .._compat import drop_loader_workers, loader_worker_died
from ..data.text import Tokenizer
from ..decoding.evaluate import evaluate

if TYPE_CHECKING:
    from ..distributed.strategy import Strategy

log = logging.getLogger(__name__)


def validate(model: torch.nn.Module, loader, tokenizer: Tokenizer, strategy: "Strategy", device: torch.device,
             autocast: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> dict[str, float]:
    """Corpus WER/CER of the strategy's consensus weights; each rank scores its share, counts are summed."""
    with strategy.consensus(model) as consensus:
        try:
            res = evaluate(consensus, loader, tokenizer, device, autocast)
        except Exception as e:  # a loader worker died (the OOM killer): this rank scores its share again
            if not loader_worker_died(e):
                raise
            log.warning("%s during validation: scoring again with new workers", e)
            drop_loader_workers(loader)
            res = evaluate(consensus, loader, tokenizer, device, autocast)
    m = res.metric
    counts = torch.tensor([m.word_errors, m.words, m.char_errors, m.chars, m.utterances, res.skipped, res.loss_sum],
                          dtype=torch.float64)
    we, w, ce, c, n, skipped, loss = strategy.all_reduce_sum(counts).tolist()
    return {"wer": we / w if w else math.nan, "cer": ce / c if c else math.nan, "val_loss": loss / n if n else math.nan,
            "utterances": int(n), "skipped": int(skipped)}
