"""Features with torch: the DeepSpeech2 log-linear spectrogram (Hamming window, log1p) or log-mel.

    >>> fx = FeatureExtractor(FeatureConfig())           # 20 ms window, 10 ms hop at 16 kHz: 161 bins
    >>> fx(torch.zeros(16000)).shape
    torch.Size([161, 101])
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import torch

from ..config import AugmentConfig, ConfigError, FeatureConfig

FEATURE_KINDS = ("spectrogram", "logmel")
# per utterance: one mean/std | per bin (CMVN) | per bin over the speaker's utterances (speaker CMVN) | per bin,
# the training set's (frame by frame: streams) | per bin, the training set's with the mean updated by the
# utterance's frames so far (online CMN: streams) | none | auto: global for a model that streams, else utterance
# (resolved when the components are built: components.resolve_normalize)
NORMALIZATIONS = ("utterance", "feature", "speaker", "global", "running", "none", "auto")
GLOBAL_STATS_UTTERANCES = 2000  # training computes the training set's statistics over at most so many utterances
WITH_TRAINING_SET_STATS = ("global", "running")  # normalizations that read features.global_stats
# where training computes features: the loader's workers (CPU), or the training step on its device (the loader
# then ships waveforms: FeatureExtractor.batch)
FEATURE_DEVICES = ("loader", "cuda", "cpu")
STFT_PADS = ("reflect", "zeros")
STREAM_NORMALIZATIONS = ("", "global", "running", "none")  # features.stream_normalize: what a stream can compute


class SpeakerStats:
    """Per-bin mean and std of one speaker's features, summed over all frames of their utterances.

    Each utterance enters level-free (its own mean over bins and frames removed first), so a speaker's
    statistics describe the spectral shape their voice and microphone share, not how loud a clip was.
    (F,) tensors; `add` accumulates, `mean`/`std` read."""

    def __init__(self, num_features: int) -> None:
        self.sum = torch.zeros(num_features, dtype=torch.float64)
        self.sumsq = torch.zeros(num_features, dtype=torch.float64)
        self.frames = 0

    def add(self, raw: torch.Tensor, level_free: bool = True) -> None:
        """Accumulate one utterance's un-normalized features (F, T) (`level_free`: its own mean removed first; off
        for the training set's statistics, normalize=global)."""
        x = (raw - raw.mean() if level_free else raw).double()
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


def global_stats(raws: Iterable[torch.Tensor]) -> list[float]:
    """The per-bin mean then std (2F values, rounded to 1e-5) of every frame of these raw features (F, T_i):
    features.global_stats."""
    stats: SpeakerStats | None = None
    for raw in raws:
        stats = stats or SpeakerStats(raw.shape[0])
        stats.add(raw, level_free=False)
    if stats is None or not stats.frames:
        raise ConfigError("features.normalize: no training audio to compute the training set's statistics from")
    return pooled_prior({"all": stats})


def utterance_level_stats(raws: Iterable[torch.Tensor]) -> list[float]:
    """One mean and one deviation over every value of these raw features (F, T_i), as normalize=utterance computes
    them for one utterance but over all of them, as features.global_stats (F copies of the mean, then of the
    deviation): what a model normalized per utterance streams with (features.stream_normalize=global)."""
    total, square, count, bins = 0.0, 0.0, 0, 0
    for raw in raws:
        x = raw.double()
        total, square, count, bins = total + float(x.sum()), square + float(x.pow(2).sum()), count + x.numel(), raw.shape[0]
    if not count:
        raise ConfigError("no audio to compute the statistics from")
    mean = total / count
    std = math.sqrt(max(0.0, square / count - mean * mean) * count / max(1, count - 1))  # unbiased, as Tensor.std
    return [round(mean, 5)] * bins + [round(std, 5)] * bins


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


def framed(at: Any, length: Any, zeros: bool = False) -> tuple[Any, Any]:
    """The one framing rule of every front end (an utterance, a padded batch, a stream's cut): the signal's sample
    index for each position `at` (sample numbers from the signal's start, negative before it; an array, numpy or
    torch), half a window of padding at both ends as torch.stft(center=True) pads: positions before the start are
    reflected into it (-i reads sample i), positions at or past `length` reflected back from the end (`length` may be
    a (B, 1) tensor of row lengths, or infinity for a stream not yet at its end); with `zeros` (features.stft_pad)
    padding positions read nothing. -> (index, inside): the index into the signal, and where it holds a sample (the
    rest are zeros)."""
    xp = np if isinstance(at, np.ndarray) else torch
    idx = xp.where(at < 0, -at, at)
    idx = xp.where(idx >= length, 2 * (length - 1) - idx, idx)
    inside = (at >= 0) & (at < length) if zeros else xp.ones_like(at, dtype=bool)
    return idx, inside


def _deviation(std: torch.Tensor, eps: float) -> torch.Tensor:
    """What a normalization divides by: the deviation plus features.normalize_eps (a zero deviation, a silent input,
    divides by 1 when eps is 0)."""
    return std + eps if eps > 0 else torch.where(std > 0, std, torch.ones_like(std))


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
        # (dynamo) in every eval, transcribe or export process
        with torch.device("cpu"):
            self.window = torch.hamming_window(self.win_length, periodic=cfg.window_periodic)
            self.mel = _mel_filterbank(n_freqs, cfg.n_mels, cfg.sample_rate) if cfg.kind == "logmel" else None
        self.num_features = cfg.n_mels if cfg.kind == "logmel" else n_freqs
        self._device_consts: dict[torch.device, tuple[torch.Tensor, torch.Tensor | None]] = {}
        if cfg.stft_pad not in STFT_PADS:
            raise ConfigError(f"features.stft_pad={cfg.stft_pad!r} is unknown; use {' or '.join(STFT_PADS)}")
        if not 0.0 <= cfg.normalize_eps <= 1.0:
            raise ConfigError(f"features.normalize_eps={cfg.normalize_eps} is not in [0, 1]")
        self.eps = cfg.normalize_eps
        if cfg.stream_normalize not in STREAM_NORMALIZATIONS:
            raise ConfigError(f"features.stream_normalize={cfg.stream_normalize!r} is unknown; use global, running or "
                              "none (or nothing: as features.normalize)")
        if cfg.stream_normalize in WITH_TRAINING_SET_STATS and not cfg.global_stats:
            raise ConfigError(f"features.stream_normalize={cfg.stream_normalize} needs features.global_stats")
        if cfg.global_stats and len(cfg.global_stats) != 2 * self.num_features:
            raise ConfigError(f"features.global_stats holds {len(cfg.global_stats)} values; these features need "
                              f"{2 * self.num_features} (a per-bin mean, then std) or none")
        if cfg.speaker_prior and len(cfg.speaker_prior) != 2 * self.num_features:
            raise ConfigError(f"features.speaker_prior holds {len(cfg.speaker_prior)} values; these features "
                              f"need {2 * self.num_features} (a per-bin mean, then std) or none")

    def num_frames(self, num_samples: int) -> int:
        """Frames produced for `num_samples` (torch.stft with center=True: half a window of padding each side)."""
        return (num_samples + 2 * (self.n_fft // 2) - self.n_fft) // self.hop_length + 1

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
        pad = self.n_fft // 2
        idx, inside = framed(torch.arange(-pad, wav.shape[0] + pad), wav.shape[0],
                             zeros=self.cfg.stft_pad == "zeros")  # (T + 2 pad,)
        return self.spectrum(wav[idx.clamp(0, max(0, wav.shape[0] - 1))] * inside.to(wav.dtype))

    def spectrum(self, signal: torch.Tensor, window: torch.Tensor | None = None) -> torch.Tensor:
        """Framed samples, (S,) or (B, S): every window of them that fits, hop by hop -> log features (F, frames) or
        (B, F, frames): the STFT every front end runs (an utterance, a batch, the cuts of many streams)."""
        spec = torch.stft(signal, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=self.window if window is None else window, center=False, return_complex=True)
        return self.compress(spec.abs())

    def compress(self, mag: torch.Tensor) -> torch.Tensor:
        """STFT magnitudes (n_fft // 2 + 1, frames) -> log features (F, frames): log-mel or log1p."""
        if self.mel is not None:
            return torch.log(self.mel @ mag.pow(2) + 1e-6)  # (n_mels, F) @ (F, frames) -> (n_mels, frames)
        return torch.log1p(mag)

    def normalize(self, feats: torch.Tensor, speaker: SpeakerStats | None = None, mode: str | None = None
                  ) -> torch.Tensor:
        """(F, T) raw features -> normalized as features.normalize (or `mode`, one of NORMALIZATIONS) says."""
        mode = mode or self._mode()
        if mode == "utterance":
            return (feats - feats.mean()) / _deviation(feats.std(), self.eps)
        if mode == "speaker":
            stats = speaker if speaker is not None and speaker.frames > 0 else self._alone(feats)
            if stats is not None:
                level_free = feats - feats.mean()  # as SpeakerStats.add saw it
                return (level_free - stats.mean[:, None]) / _deviation(stats.std[:, None], self.eps)
        if mode == "global":
            mean, std = self._global(feats.device)
            return (feats - mean[:, None]) / _deviation(std[:, None], self.eps)
        if mode == "running":
            return self.running(feats[None])[0][0]
        if mode in ("feature", "speaker"):  # per-bin mean/variance over the utterance's frames (CMVN)
            return (feats - feats.mean(dim=1, keepdim=True)) / _deviation(feats.std(dim=1, keepdim=True), self.eps)
        return feats

    def batch(self, waves: torch.Tensor, lengths: torch.Tensor, draws: torch.Tensor | None = None,
              augment: AugmentConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of a padded batch on its own device, as `__call__` computes them row by row plus the rows'
        spectral augmentation (`draws`, data/augment.py's spec_draws, applied as `augment` says): waveforms
        (B, S), lengths (B,) in samples on the host -> features (B, F, T) zero past each row's frames, and the
        frames (B,) on the host. normalize=speaker needs the loader's per-speaker statistics: not here."""
        dev, s = waves.device, waves.shape[1]
        window, mel = self._on(dev)
        frames = torch.tensor([self.num_frames(int(n)) for n in lengths], dtype=torch.long)  # (B,) host
        lens = lengths.to(dev, non_blocking=True)[:, None]  # (B, 1)
        if self.cfg.remove_dc:
            inside = torch.arange(s, device=dev)[None] < lens  # (B, S)
            waves = waves - (waves * inside).sum(1, keepdim=True) / lens
        if self.cfg.preemphasis > 0 and s > 1:
            waves = torch.cat([waves[:, :1], waves[:, 1:] - self.cfg.preemphasis * waves[:, :-1]], dim=1)
        pad = self.n_fft // 2  # each row framed at its own ends
        at = (torch.arange(s + 2 * pad, device=dev) - pad)[None]  # (1, S + 2 pad)
        j, inside = framed(at.expand(len(lengths), -1), lens, zeros=self.cfg.stft_pad == "zeros")  # (B, S + 2 pad)
        padded = waves.gather(1, j.clamp(0, s - 1)) * inside.to(waves.dtype)
        spec = torch.stft(padded, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                          window=window, center=False, return_complex=True)  # (B, n_fft // 2 + 1, T)
        feats = torch.log(mel @ spec.abs().pow(2) + 1e-6) if mel is not None else torch.log1p(spec.abs())  # (B, F, T)
        t = feats.shape[-1]
        valid = (torch.arange(t, device=dev)[None] < frames.to(dev, non_blocking=True)[:, None])[:, None]  # (B,1,T)
        feats = self._normalize_batch(feats, valid)
        if draws is not None and augment is not None:
            feats = self._augment_batch(feats, valid, draws.to(dev, non_blocking=True), augment)
        return feats * valid, frames

    def _normalize_batch(self, feats: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """`normalize` over each row's own frames: (B, F, T) features, (B, 1, T) valid frames."""
        mode, m = self._mode(), valid.to(feats.dtype)
        if mode == "speaker":
            raise ConfigError("features.normalize=speaker needs the features computed in the loader "
                              "(features.device=loader)")
        dims = (1, 2) if mode == "utterance" else (2,)  # one mean and std per row, or per row and bin
        if mode in ("utterance", "feature"):
            n = m.sum(dims, keepdim=True) * (feats.shape[1] if mode == "utterance" else 1)
            mean = (feats * m).sum(dims, keepdim=True) / n
            std = ((feats - mean).pow(2) * m).sum(dims, keepdim=True).div(n - 1).sqrt()  # unbiased, as Tensor.std
            return (feats - mean) / _deviation(std, self.eps)
        if mode == "global":
            mean, std = self._global(feats.device)
            return ((feats - mean[None, :, None]) / _deviation(std[None, :, None], self.eps)) * m  # padding stays zero
        if mode == "running":
            return self.running(feats, valid)[0]
        return feats

    def normalize_next(self, raw: torch.Tensor, carry: tuple[torch.Tensor, torch.Tensor] | None = None
                       ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """A stream's next raw frames (F, n) -> normalized as `normalize` normalizes them in the whole signal, and
        what the stream carries to its next frames (`running`'s sums; None at its start). For the normalizations
        that work frame by frame (global, running, none): features.stream_normalize, else features.normalize."""
        mode = self.stream_mode
        if mode != "running":
            return self.normalize(raw, mode=mode), carry
        feats, carry = self.running(raw[None], carry=carry)
        return feats[0], carry

    def running(self, feats: torch.Tensor, valid: torch.Tensor | None = None,
                carry: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """normalize=running: frame t of each row less the training set's per-bin mean and the mean of the row's
        frames up to t (the training set's mean weighing features.running_prior_frames of them), over the training
        set's std. Raw features (B, F, T), `valid` (B, 1, T) (frames past a row's end count for nothing and come out
        zero), `carry` from the frames before (None: an utterance's start) -> normalized (B, F, T) and the carry
        after them: (B, F) float64 sums of the frames less the training set's mean, (B,) float64 counts."""
        mean, std = self._global(feats.device)
        b, f, _ = feats.shape
        m = torch.ones_like(feats[:, :1], dtype=torch.float64) if valid is None else valid.to(torch.float64)
        if carry is None:
            carry = (torch.zeros(b, f, dtype=torch.float64, device=feats.device),
                     torch.zeros(b, dtype=torch.float64, device=feats.device))
        if not feats.shape[2]:
            return feats, carry
        off = (feats.double() - mean.double()[None, :, None]) * m  # (B, F, T) less the training set's mean
        sums = carry[0][:, :, None] + off.cumsum(2)  # (B, F, T) over the row's frames up to each
        counts = carry[1][:, None, None] + m.cumsum(2)  # (B, 1, T)
        deviation = _deviation(std.double()[None, :, None], self.eps)
        out = (off - sums / (counts + self.cfg.running_prior_frames)) * m / deviation
        return out.to(feats.dtype), (sums[:, :, -1], counts[:, 0, -1])

    @property
    def stream_mode(self) -> str:
        """How a stream normalizes: features.stream_normalize, else as features.normalize."""
        return self.cfg.stream_normalize or self._mode()

    def _mode(self) -> str:
        """features.normalize; auto (which a model's components resolve first: components.resolve_normalize) is
        utterance for features used without a model."""
        return "utterance" if self.cfg.normalize == "auto" else self.cfg.normalize

    def _global(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The training set's per-bin mean and std (F,) on `device` (normalize=global, running); a ConfigError where
        training has not written them."""
        stats = self.cfg.global_stats
        if not stats:
            raise ConfigError(f"features.normalize={self.stream_mode} needs the training set's statistics "
                              "(features.global_stats), which training computes; this config has none")
        f = len(stats) // 2
        both = torch.tensor(stats, dtype=torch.float32, device=device)
        return both[:f], both[f:]

    @staticmethod
    def _augment_batch(feats: torch.Tensor, valid: torch.Tensor, draws: torch.Tensor,
                       cfg: AugmentConfig) -> torch.Tensor:
        """Frequency warping and SpecAugment masks of every row at once, from its draws (B, K)."""
        b, n_freq, t = feats.shape
        if cfg.freq_warp > 0:
            factor = draws[:, :1].float()  # (B, 1)
            src = torch.clamp(torch.arange(n_freq, dtype=torch.float32, device=feats.device)[None] / factor,
                              max=n_freq - 1)  # (B, F)
            lo = src.floor().long()
            hi = torch.clamp(lo + 1, max=n_freq - 1)
            w = (src - lo)[..., None]  # (B, F, 1)
            feats = (feats.gather(1, lo[..., None].expand(-1, -1, t)) * (1 - w)
                     + feats.gather(1, hi[..., None].expand(-1, -1, t)) * w)
        if cfg.freq_masks + cfg.time_masks == 0:
            return feats
        m = valid.to(feats.dtype)
        fill = (feats * m).sum((1, 2), keepdim=True) / (m.sum((1, 2), keepdim=True) * n_freq)  # (B, 1, 1)
        f = torch.arange(n_freq, device=feats.device)[None]  # (1, F)
        steps = torch.arange(t, device=feats.device)[None]  # (1, T)
        masked = torch.zeros(b, n_freq, t, dtype=torch.bool, device=feats.device)
        for k in range(cfg.freq_masks + cfg.time_masks):
            start, width = draws[:, 1 + 2 * k, None].long(), draws[:, 2 + 2 * k, None].long()  # (B, 1)
            if k < cfg.freq_masks:
                masked |= ((f >= start) & (f < start + width))[..., None]
            else:
                masked |= ((steps >= start) & (steps < start + width))[:, None, :]
        return torch.where(masked, fill, feats)

    def _on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The window and mel filters on `device` (kept once copied)."""
        if device not in self._device_consts:
            self._device_consts[device] = (self.window.to(device),
                                           None if self.mel is None else self.mel.to(device))
        return self._device_consts[device]

    def _alone(self, feats: torch.Tensor) -> SpeakerStats | None:
        """A file without its speaker's statistics: its own (F, T) frames added to the training speakers' pooled
        ones, worth features.speaker_prior_frames; None (its own alone) without a prior."""
        if not self.cfg.speaker_prior or self.cfg.speaker_prior_frames <= 0:
            return None
        stats = SpeakerStats.prior(self.cfg.speaker_prior, self.cfg.speaker_prior_frames)
        stats.add(feats)
        return stats
