"""Augmentation from real recordings: additive noise at a drawn SNR and reverberation by a room impulse
response, both listed in JSONL manifests (`audio_filepath`, relative to the manifest's folder).

    augment:
      noise_manifest: noise/manifest.jsonl   # e.g. MUSAN noise or babble, any length, any sample rate
      noise_manifest_snr_db: [5, 20]
      noise_prob: 0.8
      rir_manifest: rirs/manifest.jsonl      # e.g. the OpenSLR 28 simulated and real RIRs
      rir_prob: 0.5

The SNR is the ratio of the speech's power to the added noise's power over the whole utterance, exactly
the drawn value. A reverberated utterance keeps its length and its alignment: the response's direct path
(its largest tap) lands at time 0, so transcripts and frame counts stay valid, and its RMS is kept.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError, parse_json
from ..storage.files import text_lines
from .audio import load_audio


class RecordingListError(ConfigError):
    """A noise or RIR manifest that cannot be used (one line, before any work starts)."""


def read_recordings(manifest: str, what: str) -> list[str]:
    """The audio paths a noise or RIR manifest lists; RecordingListError when it or a listed file is missing."""
    path = Path(manifest)
    if not path.is_file():
        raise RecordingListError(f"augment.{what}={manifest}: no such file")
    paths, missing = [], []
    for n, line in enumerate(text_lines(path), 1):
        if not line.strip():
            continue
        try:
            audio = path.parent / parse_json(line)["audio_filepath"]
        except (ValueError, KeyError, TypeError) as e:
            raise RecordingListError(f"{manifest}:{n}: not a JSON object with audio_filepath ({e})") from e
        (paths if audio.is_file() else missing).append(str(audio))
    if missing:
        raise RecordingListError(f"{manifest}: {len(missing)} listed file(s) do not exist, e.g. {missing[0]}")
    if not paths:
        raise RecordingListError(f"{manifest}: lists no recordings")
    return paths


@lru_cache(maxsize=32)
def _load(path: str, sample_rate: int) -> np.ndarray:
    """A recording at `sample_rate`, kept per loader worker (noise files and RIRs are reused all the time)."""
    return load_audio(path, sample_rate)


def mix_at_snr(speech: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """speech (T,) + noise (T,) scaled so that power(speech) / power(added noise) is `snr_db` exactly."""
    ps = float(np.mean(speech.astype(np.float64) ** 2))
    pn = float(np.mean(noise.astype(np.float64) ** 2))
    if ps == 0.0 or pn == 0.0:  # silence on either side: nothing meaningful to mix
        return speech
    return (speech + noise * math.sqrt(ps / (pn * 10 ** (snr_db / 10)))).astype(np.float32)


def noise_segment(noise: np.ndarray, length: int, gen: torch.Generator) -> np.ndarray:
    """`length` samples of `noise` from a random offset, repeated when the recording is shorter."""
    if noise.shape[0] < length:
        noise = np.tile(noise, length // noise.shape[0] + 1)
    start = int(torch.randint(0, noise.shape[0] - length + 1, (), generator=gen))
    return noise[start:start + length]


def reverberate(speech: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """speech (T,) convolved with rir (L,), cut to (T,) from the direct path (the largest tap), same RMS."""
    d = int(np.argmax(np.abs(rir)))
    n = speech.shape[0] + rir.shape[0] - 1
    size = 1 << (n - 1).bit_length()
    spectrum = torch.fft.rfft(torch.from_numpy(speech.astype(np.float64)), size) * \
        torch.fft.rfft(torch.from_numpy(rir.astype(np.float64)), size)
    wet = torch.fft.irfft(spectrum, size)[d:d + speech.shape[0]].numpy()  # (T,)
    ps, pw = float(np.mean(speech.astype(np.float64) ** 2)), float(np.mean(wet ** 2))
    return (wet * math.sqrt(ps / pw) if pw > 0 else wet).astype(np.float32)


class RecordedAugment:
    """Reverberation and additive noise from the configured manifests, drawn from the caller's generator."""

    def __init__(self, noise_manifest: str, snr_db: list[float], noise_prob: float, rir_manifest: str,
                 rir_prob: float, sample_rate: int) -> None:
        self.noises = read_recordings(noise_manifest, "noise_manifest") if noise_manifest else []
        self.rirs = read_recordings(rir_manifest, "rir_manifest") if rir_manifest else []
        self.snr_db, self.noise_prob, self.rir_prob = snr_db, noise_prob, rir_prob
        self.sample_rate = sample_rate

    @property
    def active(self) -> bool:
        return bool(self.noises or self.rirs)

    def _pick(self, paths: list[str], gen: torch.Generator) -> np.ndarray:
        return _load(paths[int(torch.randint(0, len(paths), (), generator=gen))], self.sample_rate)

    def __call__(self, wav: np.ndarray, gen: torch.Generator) -> np.ndarray:
        """(T,) -> (T,): maybe reverberated, then maybe noise added (rooms come before microphones' noise)."""
        if self.rirs and float(torch.rand((), generator=gen)) < self.rir_prob:
            wav = reverberate(wav, self._pick(self.rirs, gen))
        if self.noises and float(torch.rand((), generator=gen)) < self.noise_prob:
            low, high = self.snr_db
            snr = low + (high - low) * float(torch.rand((), generator=gen))
            wav = mix_at_snr(wav, noise_segment(self._pick(self.noises, gen), wav.shape[0], gen), snr)
        return wav
