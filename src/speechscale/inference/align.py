"""Forced alignment (`speechscale align`): a known transcript's words timed on its recording, as the most likely CTC
path of its text over the model's output frames (decoding.alignment).

    asr = Transcriber("runs/demo/checkpoints/best.pt")
    aligned = align_waveform(asr, wav, "She had your dark suit in greasy wash water all year.")
    aligned["words"]   # [{"word": "she", "start": 0.12, "end": 0.3, "confidence": 0.98}, ...]

Long audio runs through the model in chunks cut at quiet points (inference.transcribe); their frames are aligned as
one sequence, each frame at its own chunk's time. The search holds a byte per frame and state, so audio longer than
`segment_seconds` is aligned a segment at a time: from each cut on, the model's own greedy transcript of the next
`segment_seconds` is matched to the text (a least-edit alignment of their words), and the audio and the text are
cut together again at the last point between two words inside a run of at least ANCHOR_WORDS words on which both
agree. A file is at most MAX_ALIGN_SECONDS long.
"""
from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import torch

from ..decoding.alignment import SPACE_LEAD_S, ctc_align, lead_frames, path_words
from .segments import in_speech
from .transcribe import Transcriber

MAX_ALIGN_SECONDS = 3 * 3600.0
MIN_SEGMENT_SECONDS = 5.0  # a shorter segment holds too few words to find a run of ANCHOR_WORDS to cut in
ANCHOR_WORDS = 3  # a cut lies inside a run of this many words on which the text and the greedy transcript agree
MAX_SEARCH_CELLS = 600_000_000  # frames x states of one search (its bytes of back-pointers)


class AlignError(ValueError):
    """This text cannot be aligned to this audio (one line: why)."""


def frame_log_probs(asr: Transcriber, wav: np.ndarray) -> tuple[torch.Tensor, list[float], list[float]]:
    """(T,) float32 at the model's rate -> log-probabilities (N, V) of every output frame of its chunks in order, each
    frame's start (s) and length (s)."""
    pieces, log_probs, out_lens, frame_s = asr.forward_pieces([wav], trim=False)  # frames that tile the audio
    rows, starts, lengths = [], [], []
    for i, (_, offset) in enumerate(pieces):
        n = int(out_lens[i])
        rows.append(log_probs[i, :n])
        starts += [offset + j * frame_s[i] for j in range(n)]
        lengths += [frame_s[i]] * n
    return (torch.cat(rows) if rows else torch.zeros(0, log_probs.shape[-1])), starts, lengths


def align_waveform(asr: Transcriber, wav: np.ndarray, text: str, segment_seconds: float = 120.0,
                   space_lead_s: float = SPACE_LEAD_S) -> dict[str, Any]:
    """`text` (any case and punctuation: normalized as the model's training targets were) timed on `wav` (T,) at the
    model's rate -> {"text": the normalized text, "duration", "words": [{word, start, end, confidence}]}. Audio
    longer than `segment_seconds` is aligned in segments (see the module doc). A word starts where the space said
    before it begins, up to `space_lead_s` before its first letter (decoding.alignment.path_words; 0: at its first
    letter). AlignError when the audio is too long, the text has nothing the model spells or a character it does
    not, no path spells it, or long audio has no point to cut at."""
    if not isinstance(text, str):
        raise AlignError(f"the text to align must be a string, got {type(text).__name__}")
    if not segment_seconds >= MIN_SEGMENT_SECONDS:  # also NaN
        raise AlignError(f"segment_seconds={segment_seconds}: segments must be at least {MIN_SEGMENT_SECONDS:g} s long")
    duration = wav.shape[0] / asr.sample_rate
    if duration > MAX_ALIGN_SECONDS:
        raise AlignError(f"{duration:.0f} s of audio: align takes at most {MAX_ALIGN_SECONDS:g} s a file; cut it "
                         "(e.g. by chapter) and align the pieces")
    normalized = asr.comps.normalizer(text)
    tokenizer = asr.comps.tokenizer
    unknown = sorted(set(normalized) - set(tokenizer.alphabet))
    if unknown:
        raise AlignError(f"the text holds characters the model does not spell: {''.join(unknown[:20])!r} (it spells "
                         f"{''.join(c for c in tokenizer.alphabet if c != ' ')!r} and spaces)")
    if not normalized.strip():
        raise AlignError(f"nothing to align: {text[:40]!r} has no character the model spells")
    log_probs, starts, lengths = frame_log_probs(asr, wav)
    words = normalized.split()
    cuts = [(0, 0), (len(starts), len(words))]  # (output frame, word) where segments start
    if duration > segment_seconds:
        cuts = segment_cuts(log_probs, words, tokenizer, round(len(starts) * segment_seconds / duration))
    space = tokenizer.encode(" ")
    timed: list[dict[str, Any]] = []
    for (f0, w0), (f1, w1) in zip(cuts, cuts[1:]):
        labels = tokenizer.encode(" ".join(words[w0:w1]))
        if (f1 - f0) * (2 * len(labels) + 5) > MAX_SEARCH_CELLS:
            raise AlignError(f"no point in {starts[f0]:.0f}-{starts[f1 - 1]:.0f} s where the model's transcript "
                             "agrees with the text: check that the text is this audio's, or cut the audio there")
        path = ctc_align(log_probs[f0:f1], labels, space[0] if space else None) if f1 > f0 and labels else None
        if path is None:
            where = f" in {starts[f0]:.1f}-{starts[f1 - 1] + lengths[f1 - 1]:.1f} s" if len(cuts) > 2 and f1 > f0 else ""
            raise AlignError(f"the text{where} ({len(labels)} characters) is longer than the audio lets the model "
                             f"spell ({f1 - f0} output frames, {duration:.1f} s)")
        probs = log_probs[f0:f1].gather(1, torch.tensor(path)[:, None])[:, 0].exp().tolist()  # (n,) the path's
        for w in path_words(path, probs, tokenizer, 1.0, float(f0), lead_frames(lengths[f0], space_lead_s)):
            first, last = int(w["start"]), int(w["end"]) - 1
            w["start"] = round(starts[first], 3)
            w["end"] = round(min(duration, starts[last] + lengths[last]), 3)
            timed.append(w)
    timed, _, runs = in_speech(timed, wav, asr.sample_rate)  # each word where the audio has speech
    return {"text": normalized, "duration": round(duration, 3), "words": timed, **coverage(timed, runs, duration)}


UNTIMED_S = 0.5  # speech at least this long that no word of the transcript covers is named


def coverage(words: list[dict[str, Any]], runs: np.ndarray, duration: float) -> dict[str, Any]:
    """How much of a recording's speech (what is not in its quiet `runs`, s) the timed `words` cover: `speech_covered`
    (a share; 1.0 for a recording without speech) and `untimed`, the stretches of speech of at least UNTIMED_S that
    no word covers ([start, end] s): a transcript that leaves words out aligns what it has with high confidence."""
    edges = np.concatenate([[0.0], runs.reshape(-1), [duration]]).reshape(-1, 2)  # (S, 2) sound between quiet runs
    speech = [(float(a), float(b)) for a, b in edges if b - a > 1e-9]
    spans = sorted((w["start"], w["end"]) for w in words if "start" in w and w["end"] > w["start"])
    total = sum(b - a for a, b in speech)
    covered, untimed = 0.0, []
    for a, b in speech:
        at = a  # the stretch's speech is untimed from here until the next word
        for s0, s1 in spans:
            if s1 <= at or s0 >= b:
                continue
            if s0 - at >= UNTIMED_S:
                untimed.append([round(at, 3), round(s0, 3)])
            covered += min(s1, b) - max(s0, at)
            at = max(at, min(s1, b))
        if b - at >= UNTIMED_S:
            untimed.append([round(at, 3), round(b, 3)])
    return {"speech_covered": round(covered / total, 4) if total else 1.0, "untimed": untimed}


def segment_cuts(log_probs: torch.Tensor, words: list[str], tokenizer: Any, frames: int) -> list[tuple[int, int]]:
    """Where to cut frames (N, V) and their text's `words` so that each segment is at most about `frames` long:
    [(frame, word)] from (0, 0) to (N, len(words)). From each cut on, the greedy path's words of the next `frames`
    frames are matched to the text's words from the cut's on (match_words); the next cut is the last point midway
    between two heard words that are two words in a row of the text, inside a run of ANCHOR_WORDS matched words.
    Where none is found the window doubles, so a segment runs past `frames` to the next such point."""
    n = log_probs.shape[0]
    heard = path_words(log_probs.argmax(-1).tolist(), [1.0] * n, tokenizer, 1.0, 0.0, 0)  # in frames, from letters
    first = [int(h["start"]) for h in heard]
    cuts, span = [(0, 0)], frames
    while n - cuts[-1][0] > span:
        f0, w0 = cuts[-1]
        lo, hi = bisect.bisect_left(first, f0), bisect.bisect_right(first, f0 + span)
        window = [h for h in heard[lo:hi] if int(h["end"]) <= f0 + span]  # heard words wholly in the window
        said = words[w0:w0 + 2 * len(window) + 20]  # the text from the cut on, room for words the model missed
        pairs = match_words(said, [h["word"] for h in window])
        runs: list[list[int]] = []  # [first pair, length] of runs of pairs one word on in both
        for k, (i, j) in enumerate(pairs):
            if k and (i - 1, j - 1) == pairs[k - 1]:
                runs[-1][1] += 1
            else:
                runs.append([k, 1])
        anchors = [((int(window[j - 1]["end"]) + int(window[j]["start"])) // 2, w0 + i)  # between heard j-1 and j
                   for first_pair, size in runs if size >= ANCHOR_WORDS
                   for i, j in pairs[first_pair + 1:first_pair + size]]
        anchors = [a for a in anchors if a[0] > f0]  # a segment holds a frame or more
        if not anchors:
            span *= 2
            continue
        cuts.append(max(anchors))
        span = frames
    return [*cuts, (n, len(words))]


def match_words(said: list[str], heard: list[str]) -> list[tuple[int, int]]:
    """The pairs (i, j) with said[i] == heard[j] of the least-edit alignment of `heard` with a prefix of `said` (both
    start together; the rest of `said` is free), in order; a match is preferred where edits tie."""
    vocab: dict[str, int] = {}
    a = np.array([vocab.setdefault(w, len(vocab)) for w in said], dtype=np.int64)  # (S,)
    b = np.array([vocab.setdefault(w, len(vocab)) for w in heard], dtype=np.int64)  # (H,)
    cols = np.arange(a.shape[0] + 1)
    cost = cols.astype(np.int64)  # (S + 1,) edits to reach said[:j] with none of heard: j words missed
    came = np.zeros((b.shape[0] + 1, a.shape[0] + 1), dtype=np.int8)  # 0 diagonal, 1 from above, 2 from the left
    came[0, 1:] = 2
    for h in range(1, b.shape[0] + 1):
        diag = cost[:-1] + (a != b[h - 1])  # (S,) into columns 1..S
        best = cost + 1  # (S + 1,) heard[h - 1] heard but not said
        take = np.zeros(cost.shape, dtype=np.int8) + 1
        better = np.concatenate([[False], diag <= best[1:]])
        best[better], take[better] = diag[better[1:]], 0
        run = np.minimum.accumulate(best - cols) + cols  # said words missed in a row: from the left
        take[run < best] = 2
        came[h], cost = take, run
    pairs, h, j = [], b.shape[0], int(cost.argmin())
    while h > 0 and j >= 0:
        way = came[h, j]
        if way == 0:
            if a[j - 1] == b[h - 1]:
                pairs.append((j - 1, h - 1))
            h, j = h - 1, j - 1
        elif way == 1:
            h -= 1
        else:
            j -= 1
    return pairs[::-1]
