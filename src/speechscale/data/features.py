"""Features with torch: the DeepSpeech2 log-linear spectrogram (Hamming window, log1p) or log-mel.

    >>> fx = FeatureExtractor(FeatureConfig())           # 20 ms window, 10 ms hop at 16 kHz: 161 bins
    >>> fx(torch.zeros(16000)).shape
    torch.Size([161, 101])
"""
from __future__ import annotations

import math

import torch

from ..config import ConfigError, FeatureConfig

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

    @classmethod
    def prior(cls, values: list[float], frames: float) -> "SpeakerStats":
        """Statistics worth `frames` frames with the per-bin mean and std `values` (mean then std, 2F values;
        `pooled_prior`'s output), to add one file's own to."""
        f = len(values) // 2
        mean, std = torch.tensor(values[:f], dtype=torch.float64), torch.tensor(values[f:], dtype=torch.float64)
        stats = cls(f)
        stats.sum, stats.sumsq, stats.frames = frames * mean, frames * (std.pow(2) + mean.pow(2)), frames
        return stats

    @property
    def mean(self) -> torch.Tensor:
        return (self.sum / max(1, self.frames)).float()  # (F,)

    @property
    def std(self) -> torch.Tensor:
        var = self.sumsq / max(1, self.frames) - (self.sum / max(1, self.frames)).pow(2)
        return var.clamp_min(0).sqrt().float()  # (F,)


def pooled_prior(speakers: dict[str, SpeakerStats]) -> list[float]:
    """The per-bin mean then std (2F values, rounded to 1e-5) of every speaker's frames together: what a
    file without its speaker's statistics is shrunk toward (features.speaker_prior); [] without speakers."""
    if not speakers:
        return []
    pooled = SpeakerStats(next(iter(speakers.values())).sum.shape[0])
    for stats in speakers.values():
        pooled.sum, pooled.sumsq = pooled.sum + stats.sum, pooled.sumsq + stats.sumsq
        pooled.frames += stats.frames
    return [round(float(v), 5) for v in torch.cat([pooled.mean, pooled.std])]


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
        n_freqs = self.n_fft // 2 + 1
        # features are computed on the CPU (the data side), also when a model is built under torch.device("meta");
        # there the window would come from torch's Python references, whose first call imports the compiler
        # (torch._dynamo): 0.5-0.8 s of every eval, transcribe or export process
        with torch.device("cpu"):
            self.window = torch.hamming_window(self.win_length, periodic=False)
            self.mel = _mel_filterbank(n_freqs, cfg.n_mels, cfg.sample_rate) if cfg.kind == "logmel" else None
        self.num_features = cfg.n_mels if cfg.kind == "logmel" else n_freqs
        if cfg.speaker_prior and len(cfg.speaker_prior) != 2 * self.num_features:
            raise ConfigError(f"features.speaker_prior holds {len(cfg.speaker_prior)} values; these features "
                              f"need {2 * self.num_features} (a per-bin mean, then std) or none")

    def num_frames(self, num_samples: int) -> int:
        """Frames produced for `num_samples` (torch.stft with center=True)."""
        return num_samples // self.hop_length + 1

    def frames_for_seconds(self, seconds: float) -> int:
        return self.num_frames(int(math.floor(seconds * self.cfg.sample_rate)))

    def __call__(self, wav: torch.Tensor, speaker: SpeakerStats | None = None) -> torch.Tensor:
        """(T,) float32 -> (F, frames) float32. With normalize=speaker, `speaker` holds the statistics of the
        utterance's speaker; without them (a single file, a stream) its own, shrunk toward the training speakers'
        (features.speaker_prior; its own alone where a checkpoint has none)."""
        return self.normalize(self.raw(wav), speaker)

    def raw(self, wav: torch.Tensor) -> torch.Tensor:
        """(T,) float32 -> (F, frames) log features before any normalization."""
        if self.cfg.remove_dc:
            wav = wav - wav.mean()
        if self.cfg.preemphasis > 0 and wav.shape[0] > 1:
            wav = torch.cat([wav[:1], wav[1:] - self.cfg.preemphasis * wav[:-1]])  # (T,)
        spec = torch.stft(wav, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window, center=True, return_complex=True)  # (F, frames)
        return self.compress(spec.abs())

    def compress(self, mag: torch.Tensor) -> torch.Tensor:
        """STFT magnitudes (n_fft // 2 + 1, frames) -> log features (F, frames): log-mel or log1p."""
        if self.mel is not None:
            return torch.log(self.mel @ mag.pow(2) + 1e-6)  # (n_mels, F) @ (F, frames) -> (n_mels, frames)
        return torch.log1p(mag)

    def normalize(self, feats: torch.Tensor, speaker: SpeakerStats | None = None) -> torch.Tensor:
        """(F, T) raw features -> normalized as features.normalize says."""
        mode = self.cfg.normalize
        if mode == "utterance":
            return (feats - feats.mean()) / (feats.std() + 1e-5)
        if mode == "speaker":
            stats = speaker if speaker is not None and speaker.frames > 0 else self._alone(feats)
            if stats is not None:
                level_free = feats - feats.mean()  # as SpeakerStats.add saw it
                return (level_free - stats.mean[:, None]) / (stats.std[:, None] + 1e-5)
        if mode in ("feature", "speaker"):  # per-bin mean/variance over the utterance's frames (CMVN)
            return (feats - feats.mean(dim=1, keepdim=True)) / (feats.std(dim=1, keepdim=True) + 1e-5)
        return feats

    def _alone(self, feats: torch.Tensor) -> SpeakerStats | None:
        """A file without its speaker's statistics: its own (F, T) frames added to the training speakers' pooled
        ones, worth features.speaker_prior_frames; None (its own alone) without a prior."""
        if not self.cfg.speaker_prior or self.cfg.speaker_prior_frames <= 0:
            return None
        stats = SpeakerStats.prior(self.cfg.speaker_prior, self.cfg.speaker_prior_frames)
        stats.add(feats)
        return stats
