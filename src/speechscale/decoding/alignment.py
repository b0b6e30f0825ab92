"""Word times and confidences from a CTC alignment: the greedy path (the best class of each output frame), or the
most likely path of a given text (`ctc_align`, a Viterbi search over CTC's states), which times the words of any
decoder's text, a beam search's included."""
from __future__ import annotations

from typing import Any

import torch

from ..data.text import BLANK, Tokenizer

SPACE_LEAD_S = 0.3  # how far before a word's first letter a space said may start the word


def word_times(log_probs: torch.Tensor, frames: int, tokenizer: Tokenizer, frame_s: float,
               offset_s: float = 0.0) -> list[dict[str, Any]]:
    """Words of the greedy path over log_probs (T, V)[:frames], each with start and end (s, plus `offset_s`: see
    path_words) and a confidence: the mean probability of the path over its characters' or pieces' frames."""
    best = log_probs[:frames].float().max(dim=-1)  # values (T,), indices (T,)
    return path_words(best.indices.tolist(), best.values.exp().tolist(), tokenizer, frame_s, offset_s)


def text_word_times(log_probs: torch.Tensor, frames: int, text: str, tokenizer: Tokenizer, frame_s: float,
                    offset_s: float = 0.0) -> list[dict[str, Any]]:
    """The words of `text`, timed as word_times times the greedy path's, on the most likely CTC path of `text`
    over log_probs (T, V)[:frames]. Words without times when no path spells it in that many frames."""
    lp = log_probs[:frames].float()
    space = tokenizer.encode(" ")
    path = ctc_align(lp, tokenizer.encode(text), space[0] if space else None) if text.strip() else None
    if path is None:
        return [{"word": w} for w in text.split()]
    probs = lp.gather(1, torch.tensor(path)[:, None])[:, 0].exp().tolist()  # (T,) the path's probability a frame
    return path_words(path, probs, tokenizer, frame_s, offset_s)


def ctc_align(log_probs: torch.Tensor, labels: list[int], space: int | None = None) -> list[int] | None:
    """The most likely CTC path of `labels` over log_probs (T, V): one token a frame (BLANK or a label; a label
    held over frames repeats), or None when T frames cannot spell them (each label a frame, a blank between
    repeats). `space`: a token the path may say again after a blank wherever the labels hold it, and also before
    the first label and after the last (a text's single spaces, spoken as a model emits them)."""
    if space is not None and labels:
        labels = [space, *labels, space]
    frames, n = log_probs.shape[0], 2 * len(labels) + 1
    ext = torch.full((n,), BLANK, dtype=torch.long)  # (S,) blank, l1, blank, l2, ..., blank
    ext[1::2] = torch.tensor(labels, dtype=torch.long)
    skip = torch.zeros(n, dtype=torch.bool)  # a label may follow the label before it unless they are the same
    skip[3::2] = ext[3::2] != ext[1:-2:2]
    again = torch.zeros(n, dtype=torch.bool)  # a space state, re-entered from the blank after it
    if space is not None:
        again[1::2] = ext[1::2] == space
    never = torch.tensor(float("-inf"))
    first = 4 if space is not None and labels else 2  # the states a path may start in (the edge space skipped)
    score = torch.full((n,), float("-inf"))
    score[:first] = log_probs[0, ext[:first]]
    steps = torch.tensor([0, 1, 2, -1], dtype=torch.int8)  # states stepped back along each way in
    back = torch.zeros(frames, n, dtype=torch.int8)  # (T, S): a byte per frame and state
    for t in range(1, frames):
        one = torch.cat([never[None], score[:-1]])
        two = torch.where(skip, torch.cat([never.expand(2), score[:-2]]), never)
        rep = torch.where(again, torch.cat([score[1:], never[None]]), never)
        best, way = torch.stack([score, one, two, rep]).max(dim=0)  # (S,)
        back[t] = steps[way]
        score = best + log_probs[t, ext]  # (S,) each state's token at frame t
    lo = max(0, n - first)  # a path ends in one of the last `first` states, as it starts in one of the first
    last = lo + int(score[lo:].argmax())
    if not torch.isfinite(score[last]):
        return None
    path = [0] * frames
    for t in range(frames - 1, -1, -1):
        path[t] = int(ext[last])
        last -= int(back[t, last])
    return path


def lead_frames(frame_s: float, lead_s: float = SPACE_LEAD_S) -> int:
    """Output frames of `frame_s` seconds in `lead_s`: how far before a word's first letter its space may be."""
    return int(lead_s / frame_s + 1e-9)


def path_words(path: list[int], probs: list[float], tokenizer: Tokenizer, frame_s: float,
               offset_s: float, lead: int | None = None) -> list[dict[str, Any]]:
    """The words a CTC path spells (`path`: a token a frame; `probs`: its probability at each frame), each with start
    and end (s) and the mean probability over its characters' (or pieces') frames.

    A word ends with the last frame of its characters. It starts with its first character's frame, or earlier when
    the path says a space in the `lead` frames before it (default: lead_frames(frame_s)): where the latest space run
    before it began, but no more than `lead` frames early. A CTC model says a word's first letter after the word has
    begun, and the space between two words close to where the second begins (BENCHMARKS.md, "Word times against
    known ones")."""
    lead = lead_frames(frame_s) if lead is None else lead
    words: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    prev, space_at, space_end = BLANK, -1, -1  # the latest space run since a word's characters: its first, last frame (-1: none)

    def close() -> None:
        if cur is not None:
            words.append({"word": "".join(cur["chars"]), "start": round(offset_s + cur["start"] * frame_s, 3),
                          "end": round(offset_s + cur["end"] * frame_s, 3),
                          "confidence": round(sum(cur["p"]) / len(cur["p"]), 3)})

    for t, k in enumerate(path):
        if k != BLANK and k == prev and cur is not None:  # the same character (or piece) held over frames
            cur["end"], cur["p"] = t + 1, [*cur["p"], probs[t]]
        elif k != BLANK:
            unit = tokenizer.decode([k])
            if unit.startswith(" "):  # a space, or a word piece that starts a word
                close()
                cur = None
                space_at, space_end = (t if k != prev else space_at), t
            if unit.strip():
                if cur is None:
                    spaced = space_at >= 0 and space_end >= t - lead
                    cur = {"start": max(space_at, t - lead) if spaced else t, "chars": [], "p": []}
                space_at = space_end = -1
                cur["chars"].append(unit.strip())
                cur["end"], cur["p"] = t + 1, [*cur["p"], probs[t]]
        prev = k
    close()
    return words
