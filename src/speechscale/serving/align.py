"""Forced alignment (`speechscale align`): a known transcript's words timed on its recording, as the most likely CTC
path of its text over the model's output frames (decoding.alignment).

    asr = Transcriber("runs/demo/checkpoints/best.pt")
    aligned = align_waveform(asr, wav, "She had your dark suit in greasy wash water all year.")
    aligned["words"]   # [{"word": "she", "start": 0.12, "end": 0.3, "confidence": 0.98}, ...]

Long audio runs through the model in chunks cut at quiet points (serving.transcribe); their frames are aligned as
one sequence, each frame at its own chunk's time. The search holds a byte per frame and state, so a file is at most
MAX_ALIGN_SECONDS long.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..decoding.alignment import ctc_align, path_words
from .transcribe import Transcriber

MAX_ALIGN_SECONDS = 600.0


class AlignError(ValueError):
    """This text cannot be aligned to this audio (one line: why)."""


def frame_log_probs(asr: Transcriber, wav: np.ndarray) -> tuple[torch.Tensor, list[float], list[float]]:
    """(T,) float32 at the model's rate -> log-probabilities (N, V) of every output frame of its chunks in order, each
    frame's start (s) and length (s)."""
    pieces, log_probs, out_lens, frame_s = asr.forward_pieces([wav])
    rows, starts, lengths = [], [], []
    for i, (_, offset) in enumerate(pieces):
        n = int(out_lens[i])
        rows.append(log_probs[i, :n])
        starts += [offset + j * frame_s[i] for j in range(n)]
        lengths += [frame_s[i]] * n
    return (torch.cat(rows) if rows else torch.zeros(0, log_probs.shape[-1])), starts, lengths


def align_waveform(asr: Transcriber, wav: np.ndarray, text: str) -> dict[str, Any]:
    """`text` (any case and punctuation: normalized as the model's training targets were) timed on `wav` (T,) at the
    model's rate -> {"text": the normalized text, "duration", "words": [{word, start, end, confidence}]}.
    AlignError when the audio is too long, the text has nothing the model spells, or no path spells it."""
    duration = wav.shape[0] / asr.sample_rate
    if duration > MAX_ALIGN_SECONDS:
        raise AlignError(f"{duration:.0f} s of audio: align takes at most {MAX_ALIGN_SECONDS:g} s a file; cut it "
                         "(e.g. by chapter) and align the pieces")
    normalized = asr.comps.normalizer(text)
    labels = asr.comps.tokenizer.encode(normalized)
    if not normalized.strip() or not labels:
        raise AlignError(f"nothing to align: {text[:40]!r} has no character the model spells")
    log_probs, starts, lengths = frame_log_probs(asr, wav)
    space = asr.comps.tokenizer.encode(" ")
    path = ctc_align(log_probs, labels, space[0] if space else None) if len(starts) else None
    if path is None:
        raise AlignError(f"the text ({len(labels)} characters) is longer than the audio lets the model spell "
                         f"({len(starts)} output frames, {duration:.1f} s)")
    probs = log_probs.gather(1, torch.tensor(path)[:, None])[:, 0].exp().tolist()  # (N,) the path's, a frame
    words = path_words(path, probs, asr.comps.tokenizer, 1.0, 0.0)  # start and end in frames
    for w in words:
        first, last = int(w["start"]), int(w["end"]) - 1
        w["start"] = round(starts[first], 3)
        w["end"] = round(min(duration, starts[last] + lengths[last]), 3)
    return {"text": normalized, "duration": round(duration, 3), "words": words}
