"""Audio I/O: any file soundfile reads (wav/flac/ogg/...) -> mono float32 at the requested rate.

    >>> wav = load_audio("../shared/data/jfk/jfk.flac", 16000)  # doctest: +SKIP
    >>> wav.dtype, wav.ndim                                     # doctest: +SKIP
    (dtype('float32'), 1)
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr


class AudioError(RuntimeError):
    """The file is missing, unreadable, truncated or empty."""


def check_file(path: str | Path, error: type[Exception]) -> None:
    """Raise `error` saying what is wrong when local `path` is missing, a directory or empty."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as e:
        raise error(f"{path}: {e.strerror or e}") from None
    if p.is_dir():
        raise error(f"{path}: is a directory")
    if size == 0:
        raise error(f"{path}: empty file (0 bytes)")


def resample(wav: np.ndarray, orig_sr: int, sample_rate: int) -> np.ndarray:
    """Resample mono float32 audio with soxr (high quality)."""
    if orig_sr == sample_rate:
        return wav
    return soxr.resample(wav, orig_sr, sample_rate, quality="HQ").astype(np.float32, copy=False)


def load_audio(path: str | Path, sample_rate: int) -> np.ndarray:
    """Read `path`, down-mix to mono, resample to `sample_rate`; (T,) float32. Raises AudioError."""
    check_file(path, AudioError)
    return _decode(str(path), str(path), sample_rate)


def decode_audio(data: bytes, name: str, sample_rate: int) -> np.ndarray:
    """`load_audio` for bytes held in memory (a shard member called `name` in messages)."""
    if not data:
        raise AudioError(f"{name}: empty member (0 bytes)")
    return _decode(io.BytesIO(data), name, sample_rate)


def _decode(source: Any, path: str, sample_rate: int) -> np.ndarray:
    try:
        data, sr = sf.read(source, dtype="float32", always_2d=True)  # (T, C)
    except Exception as e:  # soundfile raises several types for corrupt or unknown formats
        raise AudioError(f"{path}: not audio that soundfile can decode ({e})") from e
    if data.shape[0] == 0:
        raise AudioError(f"{path}: no audio samples in it")
    wav = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]  # (T, C) -> (T,)
    wav = np.ascontiguousarray(wav, dtype=np.float32)
    if not np.isfinite(wav).all():
        raise AudioError(f"non-finite samples in {path}")
    return resample(wav, sr, sample_rate)


def audio_info(path: str | Path) -> tuple[float, int, int]:
    """(duration in s, sample rate, channels) from the header, without decoding."""
    info = sf.info(str(path))
    return info.frames / info.samplerate, info.samplerate, info.channels
