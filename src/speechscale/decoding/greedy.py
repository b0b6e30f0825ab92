"""Greedy CTC decoding: best class per frame, merge repeats, drop blanks."""
from __future__ import annotations

import torch

from ..data.text import BLANK, Tokenizer


def greedy_decode(logits: torch.Tensor, lengths: torch.Tensor, tokenizer: Tokenizer) -> list[str]:
    """logits (B, T, V), lengths (B,) -> one string per utterance."""
    best = logits.argmax(dim=-1).cpu()  # (B, T)
    out = []
    for b, n in enumerate(lengths.cpu().tolist()):
        ids = torch.unique_consecutive(best[b, :n]).tolist()
        text = tokenizer.decode([i for i in ids if i != BLANK])
        out.append(" ".join(text.split()))
    return out
