"""Dataset and collate: manifest utterance -> (features, target ids).

An utterance that cannot become features is skipped and counted by reason, never raised mid-run:
`bad_audio` (missing, unreadable or undecodable file), `too_short` (shorter than the analysis window or
data.min_duration once decoded, whatever the manifest's `duration` says), `too_long` (more than 1 s past
data.max_duration: decoding stops there, so a mislabelled file or a decompression bomb costs no memory),
`feature_error` (anything else that failed while augmenting or computing features).
"""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from ..config import AugmentConfig
from ..storage.seeds import generator
from .audio import AudioError, AudioTooLong
from .augment import WaveAugment, add_silence, freq_warp, spec_augment, spec_draws, trim_silence, word_crop
from .features import FeatureExtractor, SpeakerStats, global_stats
from .manifest import Utterance
from .text import Tokenizer

log = logging.getLogger(__name__)

SKIP_REASONS = ("bad_audio", "too_short", "too_long", "feature_error", "bad_text")  # why an utterance was dropped during work


class TextError(ValueError):
    """A transcript that cannot be learned (empty, outside the vocabulary, longer than the output allows)."""


@dataclass
class Batch:
    """A padded batch. feats (B, F, T); feat_lens (B,); targets (sum of target_lens,); target_lens (B,).

    With features computed in the training step (features.device), the loader's batch holds the waveforms instead:
    feats (B, S) samples, feat_lens (B,) in samples, and `draws` (B, K) each row's spectral augmentation draws
    (data/augment.py's spec_draws); FeatureExtractor.batch turns it into a batch of features."""

    feats: torch.Tensor
    feat_lens: torch.Tensor
    targets: torch.Tensor
    target_lens: torch.Tensor
    texts: list[str]
    indices: list[int]
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> utterances dropped
    weights: torch.Tensor | None = None  # (B,) a batch padded to a fixed shape (data/shapes.py): 1 real, 0 filler
    draws: torch.Tensor | None = None  # (B, K) float64: a batch of waveforms' spectral draws (features.device)

    def __len__(self) -> int:
        return len(self.texts)

    def pin_memory(self) -> "Batch":
        """Page-locked copies of the tensors (DataLoader calls this with pin_memory=True)."""
        return dataclasses.replace(self, feats=self.feats.pin_memory(), feat_lens=self.feat_lens.pin_memory(),
                                   targets=self.targets.pin_memory(), target_lens=self.target_lens.pin_memory(),
                                   draws=None if self.draws is None else self.draws.pin_memory())

    def to(self, device: torch.device) -> "Batch":
        """Features and targets on `device` (copies from pinned memory do not block the host). Lengths stay
        on the CPU (packed cuDNN RNNs and CTC read them there, so the GPU never has to report them back), except
        in a batch of a fixed shape: its lengths and weights go to the device too, where nothing in the model's
        forward and backward reads them back (the padded RNN path), as a captured graph requires."""
        if device.type == "cpu":
            return self
        moved = dataclasses.replace(self, feats=self.feats.to(device, non_blocking=True),
                                    targets=self.targets.to(device, non_blocking=True))
        if self.draws is not None:
            moved.draws = self.draws.to(device, non_blocking=True)
        if self.weights is not None:
            moved.feat_lens = self.feat_lens.to(device, non_blocking=True)
            moved.weights = self.weights.to(device, non_blocking=True)
        return moved


class SpeechDataset(torch.utils.data.Dataset):
    """Loads audio, optionally augments, computes features and encodes text for one utterance."""

    def __init__(self, utts: Sequence[Utterance], features: FeatureExtractor, tokenizer: Tokenizer,
                 augment: AugmentConfig | None = None, seed: int = 0, cache_audio: bool = False,
                 min_seconds: float = 0.0, max_seconds: float | None = None,
                 speakers: dict[str, SpeakerStats] | None = None, in_step: bool = False) -> None:
        self.utts = list(utts)
        self.in_step = in_step  # features.device: items carry the waveform and the spectral draws, not features
        self.features = features
        self.tokenizer = tokenizer
        self.augment_cfg = augment
        self.wave_aug = WaveAugment(augment, features.cfg.sample_rate) if augment else None
        self.seed = seed
        self.epoch = 0
        self.cache: dict[int, np.ndarray] | None = {} if cache_audio else None
        # decoded audio shorter than this is skipped: the STFT's centre padding needs half a window
        self.min_samples = max(features.n_fft // 2 + 1, int(min_seconds * features.cfg.sample_rate))
        # nothing past this is decoded (a mislabelled file or a FLAC bomb cannot take a worker's memory):
        # the declared bound with 1 s of slack, since declared durations are rounded
        self.max_seconds = None if max_seconds is None else max_seconds + 1.0
        # features.normalize=speaker: each manifest speaker's statistics, from their clean audio, before work
        # (`speakers`: those another dataset over the same utterances already computed)
        self.speakers = speakers if speakers is not None else (
            self._speaker_stats() if features.cfg.normalize == "speaker" else {})

    def global_stats(self, limit: int) -> list[float]:
        """The training set's statistics (features.global_stats: normalize=global, running) over at most `limit`
        utterances spread evenly over the manifest; one that cannot be read is left out here (and skipped and
        counted where it is drawn)."""
        n = len(self.utts)
        picks = range(n) if n <= limit else [k * n // limit for k in range(limit)]

        def raws() -> Iterator[torch.Tensor]:
            for i in picks:
                try:
                    wav = self._wave(i)
                    if wav.shape[0] >= self.min_samples:
                        yield self.features.raw(torch.from_numpy(wav))  # (F, T)
                except Exception:  # noqa: BLE001 - counted where the utterance is used
                    continue
        stats = global_stats(raws())
        log.info("global CMVN: statistics of %d utterance(s)", len(picks))
        return stats

    def _speaker_stats(self) -> dict[str, SpeakerStats]:
        """Per-bin statistics of every `speaker` named in the manifest (rows without one normalize on their
        own). An utterance that cannot be read is left out here and skipped (and counted) when it is drawn."""
        stats: dict[str, SpeakerStats] = {}
        for i, utt in enumerate(self.utts):
            name = utt.extra.get("speaker")
            if name is None:
                continue
            try:
                wav = self._wave(i)
                if wav.shape[0] < self.min_samples:
                    continue
                raw = self.features.raw(torch.from_numpy(wav))  # (F, T)
            except Exception:  # noqa: BLE001 - counted where the utterance is used
                continue
            stats.setdefault(str(name), SpeakerStats(self.features.num_features)).add(raw)
        if stats:
            log.info("speaker CMVN: statistics of %d speaker(s) from %d utterances", len(stats),
                     sum(1 for u in self.utts if u.extra.get("speaker") is not None))
        return stats

    def speaker_of(self, i: int) -> SpeakerStats | None:
        """The statistics features.normalize=speaker uses for item `i` (None: the utterance's own)."""
        name = self.utts[i].extra.get("speaker") if self.speakers else None
        return None if name is None else self.speakers.get(str(name))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.utts)

    def _wave(self, i: int) -> np.ndarray:
        if self.cache is not None and i in self.cache:
            return self.cache[i]
        wav = self.utts[i].load(self.features.cfg.sample_rate, self.max_seconds)
        if self.cache is not None:
            self.cache[i] = wav
        return wav

    def _load(self, i: int) -> tuple[np.ndarray, str, str, float]:
        """(audio, normalized text, a name for messages, the duration the source claims) of item `i`;
        raises AudioError (or TextError: the text cannot be learned)."""
        utt = self.utts[i]
        return self._wave(i), utt.text, f"{utt.audio_path} (manifest line {utt.line})", utt.duration

    def split_key(self, key: int | tuple[int, int]) -> tuple[int, int]:
        """(epoch, index) of an item's key: an index, or (epoch, index) from training batches."""
        return key if isinstance(key, tuple) else (self.epoch, key)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        """{"feats" (F, T), "target", "text", "index"}, or {"skip": reason} when it cannot be used. `key` is
        an index, or (epoch, index) from training batches (loader workers may outlive an epoch)."""
        epoch, i = self.split_key(key)
        try:
            wav, text, name, duration = self._load(i)
        except AudioTooLong as e:
            return self._skip(str(e), "too_long")
        except AudioError as e:
            return self._skip(str(e), "bad_audio")
        except TextError as e:
            return self._skip(str(e), "bad_text")
        if wav.shape[0] < self.min_samples:
            rate = self.features.cfg.sample_rate
            return self._skip(name, "too_short", f"{wav.shape[0] / rate:.3f} s once decoded (the source says "
                              f"{duration} s; at least {self.min_samples / rate:.3f} s needed)")
        try:
            return self._item(i, wav, text, epoch)
        except Exception as e:  # one utterance must not end a run: count it and go on
            return self._skip(name, "feature_error", f"{type(e).__name__}: {e}")

    @staticmethod
    def _skip(name: str, reason: str, detail: str = "") -> dict[str, Any]:
        log.warning("skipping %s (%s)%s", name, reason, f": {detail}" if detail else "")
        return {"skip": reason}

    def _item(self, i: int, wav: np.ndarray, text: str, epoch: int) -> dict[str, Any]:
        draws = None
        if self.augment_cfg is not None:
            # Per-(seed, epoch, utterance) generator: reproducible whatever the worker layout.
            gen = generator(self.seed, "item", epoch, i)
            wav, text = word_crop(wav, text, self.augment_cfg, self.features.cfg.sample_rate, gen)
            wav = trim_silence(wav, self.augment_cfg, self.features.cfg.sample_rate, gen)
            wav = add_silence(wav, self.augment_cfg, self.features.cfg.sample_rate, gen)
            if self.wave_aug is not None and self.wave_aug.active:
                wav = self.wave_aug(wav, gen)
            draws = spec_draws(self.augment_cfg, gen, self.features.num_features, self.features.num_frames(len(wav)))
        item = {"target": self.tokenizer.encode(text), "text": text, "index": i}
        if self.in_step:  # the step computes the features (and applies the draws) on its device
            return {**item, "wave": torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)),
                    "draws": draws or [1.0]}
        feats = self.features(torch.from_numpy(wav), self.speaker_of(i))  # (F, T)
        if draws is not None:
            feats = spec_augment(freq_warp(feats, draws[0]), draws[1:], self.augment_cfg.freq_masks)  # type: ignore
        return {**item, "feats": feats}


def pad_features(feats: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (F, T_i) (or waveforms (S_i,)) each -> zero-padded along their last axis, (B, F, max T) (or
    (B, max S)), and lengths (B,): training and inference batches."""
    lens = torch.tensor([f.shape[-1] for f in feats], dtype=torch.long)
    out = torch.zeros(len(feats), *feats[0].shape[:-1], int(lens.max()))  # (B, [F,] T)
    for b, f in enumerate(feats):
        out[b, ..., : f.shape[-1]] = f
    return out, lens


def collate(items: list[dict[str, Any]]) -> Batch:
    """Pad features to the longest in the batch; drop skipped items (counted by reason in `skipped`)."""
    good = [it for it in items if "skip" not in it]
    bad = dict(Counter(it["skip"] for it in items if "skip" in it))
    if not good:
        return Batch(torch.zeros(0, 1, 1), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                     torch.zeros(0, dtype=torch.long), [], [], bad)
    draws = None
    if "wave" in good[0]:  # features.device: waveforms (B, S) and their lengths in samples
        feats, lens = pad_features([it["wave"] for it in good])
        draws = torch.tensor([it["draws"] for it in good], dtype=torch.float64)  # (B, K)
    else:
        feats, lens = pad_features([it["feats"] for it in good])  # (B, F, T), (B,)
    targets = torch.tensor([t for it in good for t in it["target"]], dtype=torch.long)
    target_lens = torch.tensor([len(it["target"]) for it in good], dtype=torch.long)
    return Batch(feats, lens, targets, target_lens, [it["text"] for it in good], [it["index"] for it in good], bad,
                 draws=draws)
