"""Long recordings cut into training segments at the pauses between their timed words (a model's transcript, or a
known transcript's forced alignment). A stretch longer than `max_seconds` is cut at its longest pause, and each side
again until every segment fits, so sentences stay whole where the speaker paused between them. Each segment becomes a
manifest line with an `offset` into its recording (data.manifest).

    >>> words = [{"word": "yes", "start": 0.5, "end": 0.9}, {"word": "no", "start": 2.0, "end": 2.3}]
    >>> [(s.start, s.end, s.text) for s in cut_at_pauses(words, duration=3.0, max_seconds=2.0)]
    [(0.2, 1.2, 'yes'), (1.7, 2.6, 'no')]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

EDGE_S = 0.3  # a segment keeps at most this much of the pause before its first word and after its last
MIN_SPEECH = 0.1  # a segment with less of it sound is silence with a label, not a training example


@dataclass
class Segment:
    """The words (each with start and end, s) of [start, end] s of a recording."""

    start: float
    end: float
    words: list[dict[str, Any]]
    speech: float | None = None  # the share of it that is sound (speech_share), where the audio was measured
    untimed: float = 0.0  # seconds of speech in it that no word of a known transcript covers (align's `untimed`)

    @property
    def duration(self) -> float:
        return round(self.end - self.start, 3)

    @property
    def text(self) -> str:
        return " ".join(w["word"] for w in self.words)

    @property
    def confidence(self) -> float:
        return confidence(self.words)


def confidence(words: list[dict[str, Any]]) -> float:
    """A transcript's confidence: the mean of its words' (each the mean probability of the CTC path over the word's
    frames); 0 without words."""
    scores = [w["confidence"] for w in words if "confidence" in w]
    return round(sum(scores) / len(scores), 4) if scores else 0.0


def cut_at_pauses(words: list[dict[str, Any]], duration: float, max_seconds: float,
                  pauses: list[tuple[float, float]] | None = None) -> list[Segment]:
    """`words` of a recording of `duration` s, in time order, grouped into segments of at most `max_seconds`, each cut
    at the longest pause within a stretch that is too long (of equal pauses, the one nearest the stretch's middle).
    `pauses`: (start, end) s of the pause before each word and after the last (audio_pauses'; default: the gaps
    between the words' own times). A segment's bounds lie in the pauses around its words, at most EDGE_S into them
    and at most halfway across. A single word longer than `max_seconds` stays a segment of its own, longer than
    asked."""
    if not words:
        return []
    pauses = pauses or word_gaps(words, duration)
    out: list[Segment] = []
    todo = [(0, len(words))]  # word index ranges [lo, hi) still to place, the last one first
    while todo:
        lo, hi = todo.pop()
        start, end = _start(pauses, lo), _end(pauses, hi, len(words))
        if end - start <= max_seconds or hi - lo == 1:
            out.append(Segment(round(start, 3), min(round(end, 3), duration), words[lo:hi]))
            continue
        middle = (start + end) / 2
        k = max(range(lo + 1, hi), key=lambda j: (round(pauses[j][1] - pauses[j][0], 2),
                                                  -abs(pauses[j][0] - middle)))
        todo += [(k, hi), (lo, k)]
    return sorted(out, key=lambda s: s.start)


def word_gaps(words: list[dict[str, Any]], duration: float) -> list[tuple[float, float]]:
    """The pauses the words' own times leave: before the first, between each two (none where they overlap), after
    the last."""
    gaps = [(0.0, words[0]["start"])]
    gaps += [(a["end"], max(a["end"], b["start"])) for a, b in zip(words, words[1:])]
    return gaps + [(words[-1]["end"], max(words[-1]["end"], duration))]


def in_speech(words: list[dict[str, Any]], wav: np.ndarray, rate: int) -> tuple[list[dict[str, Any]],
                                                                               list[tuple[float, float]], np.ndarray]:
    """The words moved to where the audio (T,) float32 at `rate` has speech, the pauses around them
    (audio_pauses) and the recording's quiet runs (merged_runs, s). A word whose start lies in a quiet run starts
    where the run ends (a CTC model times a first word from the space said before it, which may lie in the
    silence before any speech), one whose end lies in a quiet run ends where it begins, a word that lies wholly
    in a quiet run moves, as long, to the next sound's onset (ending by the next word's start), and one whose
    times span a pause of SPLIT_S or more keeps one of the sounds it parts (_word_part: the first when it goes on
    from the previous word, else the loudest: a click or a breath before the pause is not the word); starts stay in
    order.
    Copies: `words` are not changed."""
    duration = wav.shape[0] / rate
    runs = merged_runs(quiet_runs(wav, rate))
    level = frame_levels(wav, rate)[0]
    moved: list[dict[str, Any]] = []
    for w in words:
        start, end = float(w["start"]), float(w["end"])
        k = int(np.searchsorted(runs[:, 0], start, "right")) - 1  # the run that begins at or before the start
        if k >= 0 and start < runs[k, 1]:  # the start lies in a quiet run: the word begins after it
            if end <= runs[k, 1]:  # wholly in it: moved on, as long as it was
                end = float(runs[k, 1]) + end - start
            start = float(runs[k, 1])
        k = int(np.searchsorted(runs[:, 0], end, "left")) - 1  # the run that begins before the end
        if k >= 0 and runs[k, 0] > start and end <= runs[k, 1]:  # the end lies in a quiet run after the start
            end = float(runs[k, 0])
        joined = bool(moved) and start - moved[-1]["end"] <= JOINED_S
        start, end = _word_part(level, runs, start, end, joined)
        start = min(max(start, moved[-1]["start"] if moved else 0.0), duration)
        moved.append({**w, "start": start, "end": min(max(end, start), duration)})
    for a, b in zip(moved, moved[1:]):  # a word moved on ends where the next begins
        a["end"] = max(a["start"], min(a["end"], b["start"]))
    _share_onsets(moved, [max(float(w["end"]) - float(w["start"]), 0.0) for w in words])
    moved = [{**w, "start": round(w["start"], 3), "end": round(w["end"], 3)} for w in moved]
    return moved, audio_pauses(moved, wav, rate, runs), runs


def _share_onsets(words: list[dict[str, Any]], lengths: list[float]) -> None:
    """Words moved to the same onset (a model that timed them in the quiet before it) share the time from there to
    the last one's end, in proportion to the lengths they were timed with, in order (in place)."""
    i = 0
    while i < len(words):
        j = i
        while j + 1 < len(words) and words[j + 1]["start"] == words[i]["start"]:
            j += 1
        if j > i:
            start, end, total = words[i]["start"], words[j]["end"], sum(lengths[i:j + 1]) or 1.0
            for k in range(i, j + 1):
                words[k]["start"] = start
                start = words[k]["end"] = start + (end - words[i]["start"]) * lengths[k] / total
            words[j]["end"] = end
        i = j + 1


SPLIT_S = 0.15  # a quiet run this long inside a word's times parts two sounds, of which the word is one
JOINED_S = 0.05  # a word that starts this close to the previous one's end goes on from it


def _word_part(level: np.ndarray, runs: np.ndarray, start: float, end: float, joined: bool) -> tuple[float, float]:
    """(start, end) s of the part of [start, end] that is the word, when quiet runs of at least SPLIT_S part it: when
    it goes on from the previous word (`joined`), the first part (a model says a word's last letter late, after the
    pause that ends it); else the loudest (a first word timed from a click or a breath before a pause, across it, to
    the speech after it); as given when nothing parts it. `level`: each FRAME_S frame's energy (dB)."""
    inside = runs[(runs[:, 0] > start) & (runs[:, 1] < end) & (runs[:, 1] - runs[:, 0] >= SPLIT_S)]
    if not len(inside) or not len(level):
        return start, end
    bounds = [start, *inside.reshape(-1), end]
    parts = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]  # the sounds between the runs
    if joined:
        return parts[0]
    energy = [float(np.power(10.0, level[int(a / FRAME_S):max(int(a / FRAME_S) + 1, int(b / FRAME_S))] / 10).sum())
              for a, b in parts]
    return parts[int(np.argmax(energy))]


def frame_levels(wav: np.ndarray, rate: int) -> tuple[np.ndarray, float, float]:
    """Each FRAME_S frame's energy (dB) of `wav` (T,), and its 5th and 95th percentiles (the quiet floor, loud
    speech), as quiet_runs measures them."""
    frame = max(1, int(FRAME_S * rate))
    n = wav.shape[0] // frame
    if n == 0:
        return np.zeros(0), 0.0, 0.0
    frames = wav[:n * frame].reshape(n, frame)  # (n, frame): a view
    level = 10 * np.log10(np.einsum("ij,ij->i", frames, frames) / frame + 1e-10)  # (n,) dB
    return level, float(np.percentile(level, 5)), float(np.percentile(level, 95))


def merged_runs(runs: np.ndarray) -> np.ndarray:
    """Quiet runs (R, 2) s with those that a sound of at most CLICK_S parts joined into one (a click or a tap inside a
    pause leaves it one pause)."""
    if len(runs) < 2:
        return runs
    first = np.concatenate([[True], runs[1:, 0] - runs[:-1, 1] > CLICK_S + 1e-9])  # begins a merged run
    last = np.concatenate([first[1:], [True]])
    return np.stack([runs[first, 0], runs[last, 1]], axis=1)


def speech_share(start: float, end: float, runs: np.ndarray) -> float:
    """The share of [start, end] s that lies outside the quiet `runs` (R, 2) s: how much of a segment is sound."""
    if end <= start:
        return 0.0
    quiet = np.clip(np.minimum(runs[:, 1], end) - np.maximum(runs[:, 0], start), 0.0, None).sum() if len(runs) else 0.0
    return round(float(1.0 - quiet / (end - start)), 4)


def audio_pauses(words: list[dict[str, Any]], wav: np.ndarray, rate: int,
                 runs: np.ndarray | None = None) -> list[tuple[float, float]]:
    """The pauses around `words` as the audio (T,) float32 at `rate` has them: before word j, the longest quiet run
    that begins between the starts of words j - 1 and j (a CTC model may say a word's last letter late, after the
    pause that ends it; a word's own quiet stretches are shorter), whole up to the next word's start (a model may say
    a word's first letter early, inside the pause before it); before the first word, the last quiet run that ends
    by its start (a click before it stays out of its segment), else the one that reaches the recording's start; after
    the last, the quiet run that reaches the recording's end (none: an empty pause at the edge). Quiet: a FRAME_S
    frame's energy under the level QUIET of the way from the recording's quiet floor to its loud speech. An empty
    pause at the later word's start where there is none."""
    duration = wav.shape[0] / rate
    frame = max(1, int(FRAME_S * rate))  # samples, as quiet_runs reads them
    if wav.shape[0] < frame:
        return word_gaps(words, duration)
    runs = quiet_runs(wav, rate) if runs is None else runs
    end = wav.shape[0] // frame * frame / rate  # the last whole frame's end
    before = runs[runs[:, 1] <= words[0]["start"] + 1e-9] if len(runs) else runs  # quiet runs before the first word
    lead = (float(before[-1, 0]), float(before[-1, 1])) if len(before) else \
        (0.0, min(float(runs[0, 1]), words[0]["start"])) if len(runs) and runs[0, 0] == 0 else (0.0, 0.0)
    tail = (max(float(runs[-1, 0]), words[-1]["start"]), duration) if len(runs) and runs[-1, 1] >= end - 1e-9 else \
        (duration, duration)
    after = [w["start"] for w in words[2:]] + [duration]  # where the run before word j may reach at most
    return [lead, *(_longest(runs, a["start"], b["start"], c) for a, b, c in zip(words, words[1:], after)), tail]


FRAME_S = 0.01
QUIET = 0.3
CLICK_S = 0.05  # a sound no longer than this between two quiet runs is a click, not speech: one pause holds them


def quiet_runs(wav: np.ndarray, rate: int) -> np.ndarray:
    """The quiet runs of `wav` (T,) float32 at `rate`: (R, 2) start and end s, in order, of the stretches of whole
    FRAME_S frames whose energy lies under the level QUIET of the way from the recording's quiet floor (its 5th
    percentile, dB) to its loud speech (95th). None in a recording of one level throughout."""
    frame = max(1, int(FRAME_S * rate))
    level, floor, loud = frame_levels(wav, rate)
    if not len(level):
        return np.zeros((0, 2))
    quiet = np.concatenate([[False], level < floor + QUIET * (loud - floor), [False]])
    edges = np.flatnonzero(quiet[1:] != quiet[:-1])  # quiet runs [edges[2i], edges[2i+1]) in frames
    return edges.reshape(-1, 2) * (frame / rate)  # (R, 2) s


def _longest(runs: np.ndarray, a: float, b: float, c: float) -> tuple[float, float]:
    """The longest of the quiet `runs` (R, 2) s that begin in [a, b), its end clipped to c (only a run that holds b
    reaches past it; one that holds a is the pause before a); (b, b) when none does."""
    first, last = np.searchsorted(runs[:, 0], a, "left"), np.searchsorted(runs[:, 0], b, "left")  # runs are in order
    if last <= first:
        return b, b
    lo, hi = runs[first:last, 0], np.clip(runs[first:last, 1], a, max(b, c))
    if not (hi - lo).max() > 0:
        return b, b
    i = int((hi - lo).argmax())
    return float(lo[i]), float(hi[i])


def _start(pauses: list[tuple[float, float]], i: int) -> float:
    """Where a segment that starts with word i begins: in the pause before it, at most EDGE_S into it and no more than
    halfway across (the segment before has the other half)."""
    q0, q1 = pauses[i]
    return max(q0 if i == 0 else (q0 + q1) / 2, q1 - EDGE_S)


def _end(pauses: list[tuple[float, float]], hi: int, n: int) -> float:
    """Where a segment that ends with word hi - 1 ends (of n words): as _start, in the pause after it."""
    q0, q1 = pauses[hi]
    return min(q1 if hi == n else (q0 + q1) / 2, q0 + EDGE_S)
