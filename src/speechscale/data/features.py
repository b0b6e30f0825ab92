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
# per utterance: one mean/std | per bin (CMVN) | per bin over the speaker's utterances (speaker CMVN) | none
NORMALIZATIONS = ("utterance", "feature", "speaker", "none")


class SpeakerStats:
    """Per-bin mean and std of one speaker's features, summed over all frames of their utterances.

    Each utterance enters level-free (its own mean over bins and frames removed first), so a speaker's
    statistics describe the spectral shape their voice and microphone share, not how loud a clip was.
    (F,) tensors; `add` accumulates, `mean`/`std` read."""

    def __init__(self, num_features: int) -> None:
        self.sum = torch.zeros(num_features, dtype=torch.float64)
        self.sumsq = torch.zeros(num_features, dtype=torch.float64)
        self.frames = 0

    def add(self, raw: torch.Tensor) -> None:
        """Accumulate one utterance's un-normalized features (F, T)."""
        x = (raw - raw.mean()).double()
        self.sum += x.sum(dim=1)
        self.sumsq += x.pow(2).sum(dim=1)
        self.frames += x.shape[1]

    @property
    def mean(self) -> torch.Tensor:
        return (self.sum / max(1, self.frames)).float()  # (F,)

    @property
    def std(self) -> torch.Tensor:
        var = self.sumsq / max(1, self.frames) - (self.sum / max(1, self.frames)).pow(2)
        return var.clamp_min(0).sqrt().float()  # (F,)


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

    def __call__(self, wav: torch.Tensor, speaker: SpeakerStats | None = None) -> torch.Tensor:
        """(T,) float32 -> (F, frames) float32. With normalize=speaker, `speaker` holds the statistics of the
        utterance's speaker; without them (a single file, a stream) the utterance's own per-bin ones serve."""
        return self.normalize(self.raw(wav), speaker)

    def raw(self, wav: torch.Tensor) -> torch.Tensor:
        """(T,) float32 -> (F, frames) log features before any normalization."""
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
        return feats

    def normalize(self, feats: torch.Tensor, speaker: SpeakerStats | None = None) -> torch.Tensor:
        """(F, T) raw features -> normalized as features.normalize says."""
        mode = self.cfg.normalize
        if mode == "utterance":
            return (feats - feats.mean()) / (feats.std() + 1e-5)
        if mode == "speaker" and speaker is not None and speaker.frames > 0:
            level_free = feats - feats.mean()  # as SpeakerStats.add saw it
            return (level_free - speaker.mean[:, None]) / (speaker.std[:, None] + 1e-5)
        if mode in ("feature", "speaker"):  # per-bin mean/variance over the utterance's frames (CMVN)
            return (feats - feats.mean(dim=1, keepdim=True)) / (feats.std(dim=1, keepdim=True) + 1e-5)
        return feats
