"""Word times and confidences from the greedy CTC alignment (the best class of each output frame)."""
from __future__ import annotations

from typing import Any

import torch

from ..data.text import BLANK, CharTokenizer


def word_times(log_probs: torch.Tensor, frames: int, tokenizer: CharTokenizer, frame_s: float,
               offset_s: float = 0.0) -> list[dict[str, Any]]:
    """Words of the greedy path over log_probs (T, V)[:frames], each with start and end (s, from the first
    and last frame of its characters, plus `offset_s`) and a confidence: the mean probability of the path
    over those frames."""
    best = log_probs[:frames].float().max(dim=-1)  # values (T,), indices (T,)
    probs, ids = best.values.exp().tolist(), best.indices.tolist()
    words: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    prev = BLANK

    def close() -> None:
        if cur is not None:
            words.append({"word": "".join(cur["chars"]), "start": round(offset_s + cur["start"] * frame_s, 3),
                          "end": round(offset_s + cur["end"] * frame_s, 3),
                          "confidence": round(sum(cur["p"]) / len(cur["p"]), 3)})

    for t, k in enumerate(ids):
        if k != BLANK and k == prev and cur is not None:  # the same character held over frames
            cur["end"], cur["p"] = t + 1, [*cur["p"], probs[t]]
        elif k != BLANK:
            ch = tokenizer.decode([k])
            if ch == " ":
                close()
                cur = None
            else:
                if cur is None:
                    cur = {"start": t, "chars": [], "p": []}
                cur["chars"].append(ch)
                cur["end"], cur["p"] = t + 1, [*cur["p"], probs[t]]
        prev = k
    close()
    return words
