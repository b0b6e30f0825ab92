"""How well words are timed, against speech whose word starts are known: sentences of the demo's grammar spoken by
espeak-ng (its word events say where each word starts), after a random lead of faint noise.

    speechscale bench align --checkpoint runs/demo/checkpoints/best.pt --sentences 40 --long-minutes 10

For each sentence the model times the known text (`align`) and transcribes it (`transcribe`'s greedy word times);
each word's start is compared with espeak-ng's (words it speaks with the one before, as "in the", have no start
of their own and are not scored). Greedy's words are scored only where its transcript is the
sentence (elsewhere a word has no counterpart). Reported: the absolute start error's median and 90th percentile,
the mean signed error (negative: early), and the share within 50 and 100 ms, with the model's output frame; `align`'s
also apart for each sentence's first word (after a pause) and for the words inside sentences, and for the same path
with each word started at its first letter instead of the space said before it (decoding.alignment.path_words).
`--long-minutes` also times the same sentences as one long recording (repeated to that length): `align` in
segments, scored the same way.
"""
from __future__ import annotations

import random
import statistics
import time
from typing import Any

import numpy as np


def _errors_summary(errors_ms: list[float]) -> dict[str, Any]:
    absolute = sorted(abs(e) for e in errors_ms)
    if not absolute:
        return {"words": 0}
    return {"words": len(absolute), "median_abs_ms": round(statistics.median(absolute), 1),
            "p90_abs_ms": round(absolute[min(len(absolute) - 1, int(0.9 * len(absolute)))], 1),
            "mean_ms": round(statistics.fmean(errors_ms), 1),
            "within_50_ms": round(sum(a <= 50 for a in absolute) / len(absolute), 3),
            "within_100_ms": round(sum(a <= 100 for a in absolute) / len(absolute), 3)}


def speech_with_word_starts(sentences: int, seed: int, sample_rate: int, voice: str | None = None,
                            lead_s: tuple[float, float] = (0.2, 0.8)) -> list[tuple[str, np.ndarray, dict[int, float]]]:
    """`sentences` of the demo's grammar spoken by espeak-ng (the demo's test voice unless `voice`) at `sample_rate`,
    each after a lead of lead_s seconds and before 0.3 s, under noise at -60 dBFS: (text, audio, {word index: its
    start in s}) for the words espeak-ng gave a start of their own."""
    from ..data.audio import resample
    from ..data.espeak import Espeak
    from ..data.synth import TEST_VOICE, sentence

    tts, rng = Espeak(), random.Random(seed)
    tts.seed(seed)
    noise = np.random.default_rng(seed)
    out = []
    for _ in range(sentences):
        text = sentence(rng)
        wav = tts.synthesize(text, voice=voice or TEST_VOICE, rate=165, pitch=50)
        starts = [i for i, c in enumerate(text) if c != " " and (i == 0 or text[i - 1] == " ")]  # each word's
        lead = rng.uniform(*lead_s)
        known = {starts.index(i): lead + t for i, w, t in tts.last_words if i in starts and text[i:].startswith(w)}
        wav = resample(wav, tts.sample_rate, sample_rate)
        wav = wav / (float(np.abs(wav).max()) or 1.0) * 0.9
        audio = np.concatenate([np.zeros(int(lead * sample_rate), np.float32), wav,
                                np.zeros(int(0.3 * sample_rate), np.float32)]).astype(np.float32)
        audio += (10 ** (-60 / 20) * noise.standard_normal(audio.shape[0])).astype(np.float32)
        out.append((text, audio, known))
    return out


def long_recording(speech: list[tuple[str, np.ndarray, dict[int, float]]], sample_rate: int, minutes: float
                   ) -> tuple[str, np.ndarray, dict[int, float]]:
    """The sentences of `speech` one after another, again from the first until `minutes` of audio: (the whole text,
    its audio, {word index in the whole text: its start in s})."""
    texts, parts, known, offset, before = [], [], {}, 0.0, 0
    while offset < 60 * minutes:
        for text, audio, starts in speech:
            texts.append(text)
            parts.append(audio)
            known.update({before + k: offset + t for k, t in starts.items()})
            offset, before = offset + audio.shape[0] / sample_rate, before + len(text.split())
            if offset >= 60 * minutes:
                break
    return " ".join(texts), np.concatenate(parts), known


def bench_align(checkpoints: list[str], sentences: int = 40, seed: int = 1, voice: str | None = None,
                long_minutes: float = 0.0) -> list[dict[str, Any]]:
    """Word start errors of `align` and of greedy word times for each checkpoint, on the same `sentences`
    synthesized sentences (speech_with_word_starts; at the first checkpoint's sample rate, resampled for others).
    With `long_minutes`, also of `align` over one recording of those sentences, repeated to that length (aligned in
    segments past two minutes), with the seconds it took."""
    from ..data.audio import resample
    from ..data.synth import TEST_VOICE
    from ..inference.align import align_waveform
    from ..inference.transcribe import Transcriber

    asrs = [Transcriber(c) for c in checkpoints]  # every checkpoint read before any work
    rate = asrs[0].sample_rate
    speech = speech_with_word_starts(sentences, seed, rate, voice)
    rows = []
    for checkpoint, asr in zip(checkpoints, asrs):
        greedy_err, exact, started = [], 0, time.perf_counter()
        first_err, later_err, letter_err = [], [], []  # `align`'s on each sentence's first word (after its lead of
        for text, audio, known in speech:                # noise), on the rest; every word from its first letter
            audio = audio if asr.sample_rate == rate else resample(audio, rate, asr.sample_rate)
            words = align_waveform(asr, audio, text)["words"]
            errors = {k: 1000 * (words[k]["start"] - t) for k, t in known.items()}
            letters = align_waveform(asr, audio, text, space_lead_s=0.0)["words"]
            letter_err += [1000 * (letters[k]["start"] - t) for k, t in known.items()]
            first_err += [e for k, e in errors.items() if k == 0]
            later_err += [e for k, e in errors.items() if k > 0]
            greedy = asr.transcribe_batch([audio])[0]
            if greedy["text"] == text:
                exact += 1
                greedy_err += [1000 * (greedy["words"][k]["start"] - t) for k, t in known.items()]
        pieces = len(getattr(asr.comps.tokenizer, "pieces", []))  # a word-piece model's units; 0: characters
        row = {"checkpoint": str(checkpoint), "model": asr.comps.model_name, "word_pieces": pieces, "sentences": sentences,
               "voice": voice or TEST_VOICE, "frame_ms": round(10_000 / asr.comps.output_frames([10.0])[0], 1),
               "align": _errors_summary(first_err + later_err), "align_first": _errors_summary(first_err),
               "align_later": _errors_summary(later_err), "align_letters": _errors_summary(letter_err),
               "greedy": {**_errors_summary(greedy_err), "sentences": exact},
               "seconds": round(time.perf_counter() - started, 1)}
        if long_minutes > 0:
            text, audio, known = long_recording(speech, rate, long_minutes)
            audio = audio if asr.sample_rate == rate else resample(audio, rate, asr.sample_rate)
            started = time.perf_counter()
            words = align_waveform(asr, audio, text)["words"]
            took = time.perf_counter() - started
            row["long"] = {**_errors_summary([1000 * (words[k]["start"] - t) for k, t in known.items()]),
                           "minutes": round(audio.shape[0] / asr.sample_rate / 60, 2), "seconds": round(took, 1)}
        rows.append(row)
    return rows
