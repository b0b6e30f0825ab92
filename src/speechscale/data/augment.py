"""Augmentation: speed perturbation, gain and white noise on the waveform; SpecAugment on features.

All randomness comes from a `torch.Generator` the caller seeds, so a run is reproducible.
"""
from __future__ import annotations

import math

import numpy as np
import soxr
import torch

from ..config import AugmentConfig


def _uniform(gen: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=gen))


class WaveAugment:
    """Speed (resampling, like sox `speed`), gain and additive white noise at a random SNR."""

    def __init__(self, cfg: AugmentConfig, sample_rate: int) -> None:
        self.cfg = cfg
        self.sample_rate = sample_rate

    @property
    def active(self) -> bool:
        c = self.cfg
        return bool(c.speed) or c.gain_db > 0 or bool(c.noise_snr_db)

    def __call__(self, wav: np.ndarray, gen: torch.Generator) -> np.ndarray:
        """(T,) float32 -> (T',) float32."""
        c = self.cfg
        if c.speed:
            factor = _uniform(gen, c.speed[0], c.speed[1])
            if abs(factor - 1.0) > 1e-3:
                # Playing back `factor` times faster == resampling from sr*factor down to sr.
                wav = soxr.resample(wav, self.sample_rate * factor, self.sample_rate, quality="MQ")
        if c.gain_db > 0:
            wav = wav * (10 ** (_uniform(gen, -c.gain_db, c.gain_db) / 20))
        if c.noise_snr_db:
            snr = _uniform(gen, c.noise_snr_db[0], c.noise_snr_db[1])
            power = float(np.mean(wav.astype(np.float64) ** 2)) + 1e-10
            noise = torch.randn(wav.shape[0], generator=gen).numpy()
            wav = wav + noise * math.sqrt(power / (10 ** (snr / 10)))
        return np.asarray(wav, dtype=np.float32)


def spec_augment(feats: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator) -> torch.Tensor:
    """Mask random frequency bands and time spans of (F, T) features with their mean (0 after normalisation)."""
    if cfg.freq_masks == 0 and cfg.time_masks == 0:
        return feats
    feats = feats.clone()
    n_freq, n_time = feats.shape
    fill = float(feats.mean())
    for _ in range(cfg.freq_masks):
        w = int(torch.randint(0, cfg.freq_mask_width + 1, (), generator=gen))
        f0 = int(torch.randint(0, max(1, n_freq - w), (), generator=gen))
        feats[f0:f0 + w, :] = fill
    max_t = min(cfg.time_mask_width, int(0.2 * n_time))
    for _ in range(cfg.time_masks):
        w = int(torch.randint(0, max_t + 1, (), generator=gen))
        t0 = int(torch.randint(0, max(1, n_time - w), (), generator=gen))
        feats[:, t0:t0 + w] = fill
    return feats
