"""Tempo change that keeps the pitch: WSOLA (waveform-similarity overlap-add; Verhelst & Roelands 1993).

The signal is cut into Hann-windowed frames taken `factor` times further apart than they are laid down, and
each frame is shifted (within a tolerance of about a pitch period) to where it best continues the frame before:
the output lasts 1/factor as long and keeps the pitch and formants, unlike resampling (`augment.speed`), which
moves both by the factor. As sox `tempo` does, for augmentation (Ko et al. 2015 perturb speed; tempo leaves
the voice and changes only the rate).
"""
from __future__ import annotations

import numpy as np


def wsola(wav: np.ndarray, factor: float, sample_rate: int, frame_ms: float = 30.0,
          tolerance_ms: float = 10.0) -> np.ndarray:
    """(T,) float32 -> (about T/factor,) float32: `factor` > 1 plays faster, < 1 slower, at the same pitch."""
    if factor <= 0:
        raise ValueError(f"tempo factor must be positive, not {factor}")
    win = max(8, int(round(frame_ms * sample_rate / 1000)) // 2 * 2)
    hop = win // 2                                   # synthesis hop: periodic Hann windows at 50 % sum to 1
    tol = max(1, int(round(tolerance_ms * sample_rate / 1000)))
    n_out = int(round(wav.shape[0] / factor))
    n_frames = n_out // hop + 2                      # frame k covers output [(k - 1) hop, (k + 1) hop)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)).astype(np.float64)  # (win,)
    pad = tol + win
    x = np.concatenate([np.zeros(pad), wav.astype(np.float64), np.zeros(pad + int(n_frames * hop * factor) + win)])
    out = np.zeros(n_frames * hop + win)
    prev = pad - hop                                 # where the last frame laid down was read from
    for k in range(n_frames):
        nominal = pad - hop + int(round(k * hop * factor))
        if k == 0:
            start = nominal
        else:
            natural = x[prev + hop: prev + hop + win]  # (win,) what would follow the last frame in the input
            region = x[nominal - tol: nominal + tol + win]  # (win + 2 tol,) candidates around the nominal spot
            # normalized cross-correlation, so that a louder stretch does not win over a better-matching one
            energy = np.convolve(region ** 2, np.ones(win), mode="valid")  # (2 tol + 1,)
            score = np.correlate(region, natural, mode="valid") / np.sqrt(energy + 1e-12)
            start = nominal - tol + int(np.argmax(score))
        out[k * hop: k * hop + win] += x[start: start + win] * window
        prev = start
    return out[hop: hop + n_out].astype(np.float32)
