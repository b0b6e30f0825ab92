"""Corpus-level WER and CER: total edit operations over total reference length.

    >>> m = ErrorRate(); m.update(["the cat sat"], ["the cat sad"]); round(m.wer, 4), round(m.cer, 4)
    (0.3333, 0.0909)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


def edit_distance(ref: Sequence, hyp: Sequence) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    if len(ref) < len(hyp):
        ref, hyp = hyp, ref
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, start=1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


@dataclass
class ErrorRate:
    """Accumulates word and character errors; make a new one (or `reset`) for every evaluation."""

    word_errors: int = 0
    words: int = 0
    char_errors: int = 0
    chars: int = 0
    utterances: int = 0

    def reset(self) -> None:
        self.word_errors = self.words = self.char_errors = self.chars = self.utterances = 0

    def update(self, refs: Sequence[str], hyps: Sequence[str]) -> None:
        for ref, hyp in zip(refs, hyps, strict=True):
            self.word_errors += edit_distance(ref.split(), hyp.split())
            self.words += len(ref.split())
            self.char_errors += edit_distance(ref, hyp)
            self.chars += len(ref)
            self.utterances += 1

    @property
    def wer(self) -> float:
        """Word error rate; NaN when nothing was scored (never a misleading 0)."""
        return self.word_errors / self.words if self.words else float("nan")

    @property
    def cer(self) -> float:
        return self.char_errors / self.chars if self.chars else float("nan")


def rates_by(refs: dict[int, str], hyps: dict[int, str], group: dict[int, str]) -> dict[str, dict[str, Any]]:
    """WER and CER of each group of utterances (index -> reference, hypothesis, its group's name), largest group
    first: {name: {utterances, words, wer, cer}}."""
    metrics: dict[str, ErrorRate] = {}
    for i in sorted(hyps):
        metrics.setdefault(group[i], ErrorRate()).update([refs[i]], [hyps[i]])
    ranked = sorted(metrics.items(), key=lambda kv: (-kv[1].utterances, kv[0]))
    return {name: {"utterances": m.utterances, "words": m.words, "wer": m.wer, "cer": m.cer} for name, m in ranked}


def align_words(ref: str, hyp: str) -> tuple[str, str, str]:
    """A word alignment of minimal edit cost as three aligned lines: reference, hypothesis, and the
    operations (S substitution, I insertion, D deletion, blank for a match).

    >>> print("\\n".join(align_words("the cat sat", "the bat sat down")))
    the cat sat ****
    the bat sat down
        S       I
    """
    r, h = ref.split(), hyp.split()
    cost = [[i + j if i * j == 0 else 0 for j in range(len(h) + 1)] for i in range(len(r) + 1)]
    for i in range(1, len(r) + 1):
        for j in range(1, len(h) + 1):
            cost[i][j] = min(cost[i - 1][j] + 1, cost[i][j - 1] + 1, cost[i - 1][j - 1] + (r[i - 1] != h[j - 1]))
    pairs: list[tuple[str, str, str]] = []
    i, j = len(r), len(h)
    while i or j:
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (r[i - 1] != h[j - 1]):
            pairs.append((r[i - 1], h[j - 1], " " if r[i - 1] == h[j - 1] else "S"))
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            pairs.append((r[i - 1], "*" * len(r[i - 1]), "D"))
            i -= 1
        else:
            pairs.append(("*" * len(h[j - 1]), h[j - 1], "I"))
            j -= 1
    pairs.reverse()
    width = [max(len(a), len(b)) for a, b, _ in pairs]
    lines = [" ".join(p[k].ljust(w) for p, w in zip(pairs, width)).rstrip() for k in range(3)]
    return lines[0], lines[1], lines[2]
