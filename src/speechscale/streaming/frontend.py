"""A stream's front end: audio at any rate in chunks of any size -> the feature frames they complete, as the offline
FeatureExtractor computes them for the whole signal.

    front = FrontEnd(comps.features, sample_rate=44100)
    cut = front(samples)                           # the samples of the frames they complete, or None
    last = front.finish()                          # the rest: the end's reflection and the resampler's tail
    raws = spectra(comps.features, [cut, ...])     # (F, n) per cut: one STFT for the cuts of many streams
    feats = front.normalize(raws[0])               # normalized as offline, each stream with its own statistics

A stream only cuts its samples (cheap, in its own thread); the spectra of every stream in a round are one STFT.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from ..data.features import framed


class Cut(NamedTuple):
    """The samples of `frames` consecutive STFT windows ((frames - 1) * hop + n_fft of them)."""

    samples: np.ndarray
    frames: int


def spectra(features: Any, cuts: list[Cut]) -> list[torch.Tensor]:
    """Each cut's log feature frames before normalization (F, frames), as torch.stft (center=False) and the
    extractor's compression compute them, for all cuts in one call: each cut starts at a multiple of the hop in one
    signal, and the windows that straddle two cuts are dropped."""
    hop = features.hop_length
    parts, starts, at = [], [], 0
    for cut in cuts:
        span = -(-len(cut.samples) // hop) * hop  # rounded up to whole hops
        parts += [cut.samples, np.zeros(span - len(cut.samples), np.float32)]
        starts.append(at // hop)
        at += span
    feats = features.spectrum(torch.from_numpy(np.concatenate(parts)))  # (F, windows): the offline STFT
    return [feats[:, a:a + cut.frames] for a, cut in zip(starts, cuts)]


class StreamFeatures:
    """Waveform samples at the model's rate -> feature frames, as FeatureExtractor computes them for the whole
    signal (torch.stft with center=True: reflected at both ends, or zeros; pre-emphasis carried across chunks)."""

    def __init__(self, features: Any) -> None:
        self.fx = features
        self.hop, self.n_fft, self.pad = features.hop_length, features.n_fft, features.n_fft // 2
        self.wav = np.zeros(0, dtype=np.float32)  # samples [start, start + len)
        self.start, self.received, self.frames = 0, 0, 0
        self.head = np.zeros(0, dtype=np.float32)  # the first pad + 1 samples: the start's reflection
        self.last = None  # the previous raw sample (pre-emphasis)

    def __call__(self, samples: np.ndarray, final: bool = False) -> Cut | None:
        """New samples (n,) -> the samples of the feature frames they complete, or None."""
        a = self.fx.cfg.preemphasis
        if a > 0 and len(samples):
            prev = np.concatenate([[samples[0] if self.last is None else self.last], samples[:-1]]).astype(np.float32)
            self.last = samples[-1]
            samples = (samples - a * prev).astype(np.float32)
        self.wav = np.concatenate([self.wav, samples.astype(np.float32, copy=False)])
        self.received += len(samples)
        if len(self.head) <= self.pad:
            self.head = np.concatenate([self.head, samples[: self.pad + 1 - len(self.head)]])
        zeros = self.fx.cfg.stft_pad == "zeros"
        if self.received <= self.pad and not (zeros and final and self.received):  # a reflection needs pad + 1 samples
            return None
        if final:
            total = self.received // self.hop + 1
        else:  # frames whose window ends before the last sample received (no reflection at the end yet)
            total = max(0, (self.received + self.pad - self.n_fft) // self.hop + 1)
        if total <= self.frames:
            return None
        first = self.frames * self.hop - self.pad  # sample index of the first window's start
        last = (total - 1) * self.hop - self.pad + self.n_fft  # one past the last window's end
        # the offline framing (data.features.framed); the end is reflected only once the stream has ended
        idx, sample = framed(np.arange(first, last), self.received if final else np.inf, zeros=zeros)
        idx = idx.astype(np.int64)
        seg = np.where(idx <= self.pad, self.head[np.clip(idx, 0, len(self.head) - 1)], 0.0)  # the start's samples
        kept = idx >= self.start
        seg = np.where(kept, self.wav[np.clip(idx - self.start, 0, len(self.wav) - 1)], seg)
        seg = np.where(sample, seg, 0.0).astype(np.float32)
        cut = Cut(seg, total - self.frames)
        self.frames = total
        keep_from = max(0, self.frames * self.hop - self.pad - self.start)  # later windows start at or after this
        if not final:
            keep_from = min(keep_from, max(0, self.received - self.pad - 1 - self.start))  # the end's reflection
        self.wav, self.start = self.wav[keep_from:], self.start + keep_from
        return cut


class FrontEnd:
    """Audio at the stream's rate -> feature frames: a streaming resampler (soxr) to the model's rate when they
    differ, then StreamFeatures."""

    def __init__(self, features: Any, sample_rate: int | None = None) -> None:
        import soxr

        self.rate = features.cfg.sample_rate
        self.in_rate = sample_rate or self.rate
        self.resampler = (soxr.ResampleStream(self.in_rate, self.rate, 1, dtype="float32", quality="HQ")
                          if self.in_rate != self.rate else None)
        self.features = StreamFeatures(features)
        self.carry: Any = None  # what the normalization keeps from the frames so far (normalize=running's sums)

    def normalize(self, raw: torch.Tensor) -> torch.Tensor:
        """The stream's next log feature frames (F, n) (`spectra`) -> normalized as the offline extractor normalizes
        them in the whole signal (FeatureExtractor.normalize_next)."""
        feats, self.carry = self.features.fx.normalize_next(raw, self.carry)
        return feats

    def __call__(self, samples: np.ndarray) -> Cut | None:
        """Mono float samples at the stream's rate -> the samples of the feature frames they complete, or None."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self.resampler is not None:
            samples = self.resampler.resample_chunk(samples, last=False)
        return self.features(samples)

    def finish(self) -> Cut | None:
        """The stream's end: the samples of the frames its last samples complete."""
        tail = self.resampler.resample_chunk(np.zeros(0, np.float32), last=True) if self.resampler else np.zeros(0)
        return self.features(tail.astype(np.float32), final=True)
