"""Augmentation: added silence, tempo (pitch kept) and speed perturbation, a random channel (frequency
response), gain, reverberation and noise from recordings (recorded.py) and white noise on the waveform; SpecAugment and
frequency warping on features.

All randomness comes from a `torch.Generator` the caller seeds, so a run is reproducible.
"""
from __future__ import annotations

import math

import numpy as np
import soxr
import torch

from ..config import AugmentConfig
from .recorded import RecordedAugment
from .wsola import wsola


def _uniform(gen: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=gen))


class WaveAugment:
    """Tempo (WSOLA, like sox `tempo`: the pitch stays), speed (resampling, like sox `speed`), a random
    channel (`channel_response`), gain, a room's reverberation and recorded noise (when their manifests are
    set), and additive white noise at a random SNR."""

    def __init__(self, cfg: AugmentConfig, sample_rate: int) -> None:
        self.cfg = cfg
        self.sample_rate = sample_rate
        self.recorded = RecordedAugment(cfg.noise_manifest, cfg.noise_manifest_snr_db, cfg.noise_prob,
                                        cfg.rir_manifest, cfg.rir_prob, sample_rate)

    @property
    def active(self) -> bool:
        c = self.cfg
        return bool(c.tempo) or bool(c.speed) or c.channel_db > 0 or c.gain_db > 0 or bool(c.noise_snr_db) or self.recorded.active

    def __call__(self, wav: np.ndarray, gen: torch.Generator) -> np.ndarray:
        """(T,) float32 -> (T',) float32."""
        c = self.cfg
        if c.tempo:
            factor = _uniform(gen, c.tempo[0], c.tempo[1])
            if abs(factor - 1.0) > 1e-3:
                wav = wsola(wav, factor, self.sample_rate)
        if c.speed:
            factor = _uniform(gen, c.speed[0], c.speed[1])
            if abs(factor - 1.0) > 1e-3:
                # Playing back `factor` times faster == resampling from sr*factor down to sr.
                wav = soxr.resample(wav, self.sample_rate * factor, self.sample_rate, quality="MQ")
        if c.channel_db > 0:
            wav = apply_response(wav, channel_response(wav.shape[0], c.channel_db, gen))
        if c.gain_db > 0:
            wav = wav * (10 ** (_uniform(gen, -c.gain_db, c.gain_db) / 20))
        if self.recorded.active:
            wav = self.recorded(np.asarray(wav, dtype=np.float32), gen)
        if c.noise_snr_db:
            snr = _uniform(gen, c.noise_snr_db[0], c.noise_snr_db[1])
            power = float(np.mean(wav.astype(np.float64) ** 2)) + 1e-10
            noise = torch.randn(wav.shape[0], generator=gen).numpy()
            wav = wav + noise * math.sqrt(power / (10 ** (snr / 10)))
        return np.asarray(wav, dtype=np.float32)


def channel_response(n: int, max_db: float, gen: torch.Generator, terms: int = 4) -> np.ndarray:
    """(n + 1,) gain in dB over the rfft bins of a 2n-sample transform: a random smooth curve from 0 Hz to
    Nyquist (cosines of 1..`terms` half-periods, the k-th weighted 1/k), scaled so its largest magnitude is a
    level drawn in [0, max_db]. Speakers' recordings differ this way (FSDD: 10-15 dB apart above 3 kHz)."""
    x = np.linspace(0.0, np.pi, n + 1)
    weights = (2 * torch.rand(terms, generator=gen).numpy() - 1) / np.arange(1, terms + 1)
    curve = (weights[:, None] * np.cos(np.arange(1, terms + 1)[:, None] * x[None, :])).sum(axis=0)  # (n + 1,)
    peak = float(np.abs(curve).max()) or 1.0
    return curve / peak * _uniform(gen, 0.0, max_db)


def apply_response(wav: np.ndarray, gain_db: np.ndarray) -> np.ndarray:
    """(T,) -> (T,): `wav` through the zero-phase filter whose gain (dB) over the bins of a 2T-point rfft is
    `gain_db` ((T + 1,)); the zero padding keeps the circular convolution from wrapping the ends together."""
    n = wav.shape[0]
    spec = np.fft.rfft(wav.astype(np.float64), 2 * n)  # (n + 1,)
    return np.fft.irfft(spec * 10 ** (gain_db / 20), 2 * n)[:n].astype(np.float32)


def _frame_energy_db(wav: np.ndarray, frame: int, remove_mean: bool = False) -> np.ndarray:
    """(k,) energy in dB of the whole `frame`-sample frames of `wav`, optionally of each frame less its mean."""
    k = wav.shape[0] // frame
    x = wav[: k * frame].reshape(k, frame).astype(np.float64)
    if remove_mean:
        x = x - x.mean(axis=1, keepdims=True)
    return 10 * np.log10((x ** 2).mean(axis=1) + 1e-10)


def pause_segments(wav: np.ndarray, sample_rate: int, floor_db: float = -18.0, min_pause: float = 0.1,
                   min_segment: float = 0.1) -> list[tuple[int, int]]:
    """(start, end) sample spans of sound separated by pauses of at least `min_pause` seconds.

    Energy VAD on 20 ms frames: a frame is sound when within `floor_db` of the loudest frame."""
    frame = max(1, int(0.02 * sample_rate))
    energy = _frame_energy_db(wav, frame)  # (k,)
    if energy.size == 0:
        return []
    sound = (energy > energy.max() + floor_db).astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], sound, [0]])))  # run starts and ends, alternating
    runs: list[list[int]] = []
    for start, end in edges.reshape(-1, 2).tolist():
        if runs and (start - runs[-1][1]) * frame < min_pause * sample_rate:
            runs[-1][1] = end  # a short gap inside a word
        else:
            runs.append([start, end])
    return [(a * frame, b * frame) for a, b in runs if (b - a) * frame >= min_segment * sample_rate]


def word_crop(wav: np.ndarray, text: str, cfg: AugmentConfig, sample_rate: int, gen: torch.Generator
              ) -> tuple[np.ndarray, str]:
    """With probability cfg.word_crop, keep a random run of words; cuts fall in the middle of pauses. With
    probability cfg.word_crop_edges the crop starts with a random part (0 to all) of the file's own leading
    silence and ends with one of its trailing silence; otherwise it is compact: at its first and last word as
    much silence as a crop between two words has (half the pause next to the word).

    Only when the pauses split the audio into exactly one segment per word; otherwise unchanged. This
    breaks priors on position, e.g. Kaldi's yesno split, whose training files all begin with "no". The leading
    silence matters there too: a file's lead (0.6-1.3 s) and trail (0.1-1.9 s) are longer than its pauses
    (0.1-0.5 s); when only crops from the first word kept the lead, a long lead announced "no" (test files read
    "noyes ..."). Long silences are now as likely before any word, and never only before the first. With them on
    every crop (edges 1) yesno was much harder to learn: ds2-tiny at 2 files a batch and conformer-tiny stalled
    near 100 % WER; a quarter of the crops is enough."""
    words = text.split()
    if cfg.word_crop <= 0 or len(words) < 2 or float(torch.rand((), generator=gen)) >= cfg.word_crop:
        return wav, text
    segs = pause_segments(wav, sample_rate, cfg.word_crop_floor_db, cfg.word_crop_min_pause)
    if len(segs) != len(words):
        return wav, text
    n = len(words)
    i = int(torch.randint(0, n, (), generator=gen))
    j = int(torch.randint(i, n, (), generator=gen))
    lead, last = segs[0][0], segs[-1][1]  # the file's silence before its first word and after its last
    p = cfg.word_crop_edges  # 1: no draw, so edges 1 crops as the earlier all-edges code did
    if p >= 1 or (p > 0 and float(torch.rand((), generator=gen)) < p):  # random parts of the lead and the trail
        head = int(torch.randint(0, lead + 1, (), generator=gen))
        tail = int(torch.randint(0, wav.shape[0] - last + 1, (), generator=gen))
    else:  # compact: the lead and trail only where the crop reaches the first and last word, half a pause long
        head = min(lead, (segs[1][0] - segs[0][1]) // 2) if i == 0 else 0
        tail = min(wav.shape[0] - last, (segs[-1][0] - segs[-2][1]) // 2) if j == n - 1 else 0
    start = lead if i == 0 else (segs[i - 1][1] + segs[i][0]) // 2
    end = last if j == n - 1 else (segs[j][1] + segs[j + 1][0]) // 2
    return np.concatenate([wav[lead - head:lead], wav[start:end], wav[last:last + tail]]), " ".join(words[i:j + 1])


def sound_span(wav: np.ndarray, sample_rate: int, floor_db: float) -> tuple[int, int]:
    """(start, end) samples from the first to the last 10 ms frame within `floor_db` of the loudest."""
    frame = max(1, int(0.01 * sample_rate))
    energy = _frame_energy_db(wav, frame, remove_mean=True)  # (k,)
    if energy.size == 0:
        return 0, wav.shape[0]
    sound = np.flatnonzero(energy > energy.max() + floor_db)
    return int(sound[0]) * frame, min(wav.shape[0], (int(sound[-1]) + 1) * frame)


def trim_silence(wav: np.ndarray, cfg: AugmentConfig, sample_rate: int, gen: torch.Generator) -> np.ndarray:
    """With probability cfg.trim_silence, keep a random part of the leading and of the trailing silence.

    Speakers differ in how tightly their clips are cut; a model that only heard generous margins learns
    to expect them (FSDD's nicolas has a third of the others' trailing silence)."""
    if cfg.trim_silence <= 0 or float(torch.rand((), generator=gen)) >= cfg.trim_silence:
        return wav
    start, end = sound_span(wav, sample_rate, cfg.trim_floor_db)
    new_start = int(float(torch.rand((), generator=gen)) * start)
    new_end = end + int(float(torch.rand((), generator=gen)) * (wav.shape[0] - end))
    return wav[new_start:new_end]


def add_silence(wav: np.ndarray, cfg: AugmentConfig, sample_rate: int, gen: torch.Generator) -> np.ndarray:
    """(T,) -> (lead + T + trail,): with probability cfg.silence, silence before and after the utterance, each
    drawn in [0, cfg.silence_max_s] seconds, and white noise under all of it at a level drawn (in dBFS RMS) in
    cfg.silence_floor_db. A model that only heard speech from the first frame to the last reads a microphone's
    wait before speech as words."""
    if cfg.silence <= 0 or float(torch.rand((), generator=gen)) >= cfg.silence:
        return wav
    lead, trail = (int(_uniform(gen, 0.0, cfg.silence_max_s) * sample_rate) for _ in range(2))
    out = np.concatenate([np.zeros(lead, np.float32), np.asarray(wav, dtype=np.float32), np.zeros(trail, np.float32)])
    if cfg.silence_floor_db:
        level = 10 ** (_uniform(gen, cfg.silence_floor_db[0], cfg.silence_floor_db[1]) / 20)
        out += torch.randn(out.shape[0], generator=gen).numpy() * np.float32(level)  # float32 throughout
    return out


def longest_seconds(cfg: AugmentConfig, seconds: float) -> float:
    """The longest an utterance of `seconds` becomes under augmentation: added silence, then the slowest speed
    and tempo factors."""
    extra = 2 * cfg.silence_max_s if cfg.silence > 0 else 0.0
    return (seconds + extra) / min(cfg.speed or [1.0]) / min(cfg.tempo or [1.0])


def spec_draws(cfg: AugmentConfig, gen: torch.Generator, n_freq: int, n_time: int) -> list[float]:
    """The random draws of frequency warping and SpecAugment for one utterance's (F, T) features, taken in the
    loader whether the features are computed there or in the training step (features.device): the warp factor
    (1.0 without warping), then (start, width) of each frequency mask, then of each time mask."""
    draws = [_uniform(gen, 1.0 - cfg.freq_warp, 1.0 + cfg.freq_warp) if cfg.freq_warp > 0 else 1.0]
    for _ in range(cfg.freq_masks):
        w = int(torch.randint(0, cfg.freq_mask_width + 1, (), generator=gen))
        draws += [int(torch.randint(0, max(1, n_freq - w), (), generator=gen)), w]
    max_t = min(cfg.time_mask_width, int(0.2 * n_time))
    for _ in range(cfg.time_masks):
        w = int(torch.randint(0, max_t + 1, (), generator=gen))
        draws += [int(torch.randint(0, max(1, n_time - w), (), generator=gen)), w]
    return draws


def freq_warp(feats: torch.Tensor, factor: float) -> torch.Tensor:
    """Stretch the frequency axis of (F, T) features by `factor` (vocal tract length perturbation).

    Output bin f reads input bin f / factor, linearly interpolated; bins beyond the top repeat the top."""
    if factor == 1.0:
        return feats
    n_freq = feats.shape[0]
    src = torch.clamp(torch.arange(n_freq, dtype=torch.float32) / factor, max=n_freq - 1)  # (F,)
    lo = src.floor().long()
    hi = torch.clamp(lo + 1, max=n_freq - 1)
    w = (src - lo)[:, None]  # (F, 1)
    return feats[lo] * (1 - w) + feats[hi] * w  # (F, T)


def spec_augment(feats: torch.Tensor, masks: list[float], freq_masks: int) -> torch.Tensor:
    """Mask frequency bands and time spans of (F, T) features with their mean (0 after normalisation): `masks`
    holds (start, width) pairs, the first `freq_masks` of them over frequency (spec_draws' order)."""
    if not masks:
        return feats
    feats = feats.clone()
    fill = float(feats.mean())
    for k in range(0, len(masks), 2):
        start, width = int(masks[k]), int(masks[k + 1])
        if k < 2 * freq_masks:
            feats[start:start + width, :] = fill
        else:
            feats[:, start:start + width] = fill
    return feats
