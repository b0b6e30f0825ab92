"""The audio a bench reads: the files of a manifest the user names, else speech this package synthesizes
(espeak-ng, as `speechscale synth` makes the demo corpus). No bench reads a path of its own.

    files = speech_files(args.manifest, tmp)      # the manifest's files, or a synthesized minute of speech
    pcm = speech(files, seconds=30)               # int16 at 16 kHz, the files end to end (repeated to length)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import ConfigError

SYNTH_MINUTES = 1.0  # of speech synthesized when no manifest is given (a few seconds of espeak-ng)


def checked_manifest(manifest: str | Path, flag: str = "--manifest") -> Path:
    """`manifest` as a path that exists (a one-line error before any work otherwise)."""
    path = Path(manifest)
    if not path.is_file():
        raise ConfigError(f"{flag} {manifest}: no such manifest")
    return path


def bench_manifest(manifest: str | Path | None, folder: str | Path, minutes: float = SYNTH_MINUTES) -> Path:
    """The manifest a bench reads: `manifest` when given, else a synthesized corpus written under `folder`."""
    if manifest:
        return checked_manifest(manifest)
    from ..data.synth import synthesize_corpus

    out = Path(folder) / "synth"
    if not (out / "train.jsonl").is_file():
        synthesize_corpus(out, minutes=minutes, seed=0, progress=False, test_minutes=0.0)
    return out / "train.jsonl"


def manifest_files(manifest: str | Path, limit: int | None = None) -> list[Path]:
    """The audio files a manifest names (relative paths against its folder), in its order, up to `limit`."""
    from ..data.manifest import read_manifest

    utts, _ = read_manifest(checked_manifest(manifest), lines=[0, limit] if limit else None)
    files = [Path(u.audio_path) for u in utts]
    if not files:
        raise ConfigError(f"--manifest {manifest}: no utterances")
    return files


def speech_files(manifest: str | Path | None, folder: str | Path, limit: int | None = 20) -> list[Path]:
    """Up to `limit` files of `manifest`, else of speech synthesized under `folder`."""
    return manifest_files(bench_manifest(manifest, folder), limit)


def speech(files: list[Path], seconds: float, rate: int = 16000) -> np.ndarray:
    """`seconds` of `files` end to end at `rate` (repeated when shorter) as int16 samples."""
    from ..data.audio import load_audio

    one = np.concatenate([load_audio(f, rate) for f in files])  # (samples,)
    wav = np.tile(one, int(np.ceil(seconds * rate / len(one))) + 1)
    return (np.clip(wav, -1, 1) * 32767).astype("<i2")
