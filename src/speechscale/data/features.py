"""Features with torch: the DeepSpeech2 log-linear spectrogram (Hamming window, log1p) or log-mel.

    >>> fx = FeatureExtractor(FeatureConfig())           # 20 ms window, 10 ms hop at 16 kHz: 161 bins
    >>> fx(torch.zeros(16000)).shape
    torch.Size([161, 101])
"""
from __future__ import annotations

import math

import torch

from ..config import FeatureConfig

FEATURE_KINDS = ("spectrogram", "logmel")
NORMALIZATIONS = ("utterance", "feature", "none")  # per utterance: one mean/std | per bin (CMVN) | none


def _mel_filterbank(n_freqs: int, n_mels: int, sample_rate: int) -> torch.Tensor:
    """(n_mels, n_freqs) triangular filters on the HTK mel scale."""
    def hz_to_mel(f: torch.Tensor) -> torch.Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    def mel_to_hz(m: torch.Tensor) -> torch.Tensor:
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    freqs = torch.linspace(0, sample_rate / 2, n_freqs)
    mels = torch.linspace(hz_to_mel(torch.tensor(0.0)), hz_to_mel(torch.tensor(sample_rate / 2)), n_mels + 2)
    hz = mel_to_hz(mels)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]  # (n_mels, 1)
    up = (freqs[None] - lower) / (center - lower)
    down = (upper - freqs[None]) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)  # (n_mels, n_freqs)


class FeatureExtractor:
    """Waveform (T,) -> features (F, frames). Its config travels in the checkpoint."""

    def __init__(self, cfg: FeatureConfig) -> None:
        self.cfg = cfg
        self.win_length = int(round(cfg.sample_rate * cfg.window_ms / 1000))
        self.hop_length = int(round(cfg.sample_rate * cfg.hop_ms / 1000))
        self.n_fft = self.win_length
        self.window = torch.hamming_window(self.win_length, periodic=False)
        n_freqs = self.n_fft // 2 + 1
        self.mel = _mel_filterbank(n_freqs, cfg.n_mels, cfg.sample_rate) if cfg.kind == "logmel" else None
        self.num_features = cfg.n_mels if cfg.kind == "logmel" else n_freqs

    def num_frames(self, num_samples: int) -> int:
        """Frames produced for `num_samples` (torch.stft with center=True)."""
        return num_samples // self.hop_length + 1

    def frames_for_seconds(self, seconds: float) -> int:
        return self.num_frames(int(math.floor(seconds * self.cfg.sample_rate)))

    def __call__(self, wav: torch.Tensor) -> torch.Tensor:
        """(T,) float32 -> (F, frames) float32."""
        if self.cfg.remove_dc:
            wav = wav - wav.mean()
        if self.cfg.preemphasis > 0 and wav.shape[0] > 1:
            wav = torch.cat([wav[:1], wav[1:] - self.cfg.preemphasis * wav[:-1]])  # (T,)
        spec = torch.stft(wav, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=True, return_complex=True)  # (F, frames)
        mag = spec.abs()
        if self.mel is not None:
            feats = torch.log(self.mel @ mag.pow(2) + 1e-6)  # (n_mels, F) @ (F, frames) -> (n_mels, frames)
        else:
            feats = torch.log1p(mag)
        if self.cfg.normalize == "utterance":
            feats = (feats - feats.mean()) / (feats.std() + 1e-5)
        elif self.cfg.normalize == "feature":  # per-bin mean/variance over the utterance's frames (CMVN)
            feats = (feats - feats.mean(dim=1, keepdim=True)) / (feats.std(dim=1, keepdim=True) + 1e-5)
        return feats
