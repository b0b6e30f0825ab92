"""The real recordings this repository's figures are measured on: ../shared/data beside the checkout (see its
README), or $SPEECHSCALE_SHARED_DATA. The package's benches never read them by themselves: the protocols here pass
them in as a user passes --manifest."""
from __future__ import annotations

import json
import os
from pathlib import Path

SILENT_MIC_DBFS = -60.0  # a silent microphone's own noise (white, RMS) in the altered copies


def shared_data(*parts: str) -> Path:
    """A file or folder of the shared recordings: under $SPEECHSCALE_SHARED_DATA, else ../shared/data from the
    current folder, else beside this checkout (the first that exists; else the current folder's, for the caller's
    own error)."""
    roots = [Path(os.environ["SPEECHSCALE_SHARED_DATA"])] if os.environ.get("SPEECHSCALE_SHARED_DATA") else []
    roots += [Path("../shared/data"), Path(__file__).resolve().parents[1].parent / "shared" / "data"]
    found = [r.joinpath(*parts) for r in roots if r.joinpath(*parts).exists()]
    return found[0] if found else roots[-2].joinpath(*parts)


def speech_files() -> list[Path]:
    """The speech the serving benches send: JFK, then the LDC93S1 sentence (end to end, repeated)."""
    return [shared_data("jfk", "jfk.flac"), shared_data("ldc93s1", "LDC93S1.wav")]


def exactness_files() -> list[Path]:
    """20 real files at 8, 16 and 44.1 kHz, 0.3-11 s (as tests/serving/test_streaming.py uses)."""
    fsdd = sorted(shared_data("fsdd", "recordings").glob("*_jackson_4*.wav"))[:12]
    yesno = sorted(shared_data("yesno").glob("*.wav"))[::15]
    return [*fsdd, *yesno, *sorted(shared_data("ldc93s1").glob("*.wav")), shared_data("jfk", "jfk.flac")]


def ldc93s1_manifest() -> str | None:
    """The manifest the training-throughput benches cut their batches from (None, noise, where it is missing:
    a GPU machine given no recordings)."""
    path = shared_data("ldc93s1", "manifest.jsonl")
    return str(path) if path.is_file() else None


def altered_manifest(manifest: Path, folder: Path, quieter_db: float = 0.0, lead_s: float = 0.0) -> str:
    """A copy of `manifest` with every recording `quieter_db` decibels quieter (a microphone set lower than the
    corpus's), or after `lead_s` seconds of a silent microphone (its own noise, white at SILENT_MIC_DBFS RMS,
    under the whole recording: a live user who waits before speaking), or both; float WAVs and the manifest in
    `folder`, whose path this returns."""
    import numpy as np
    import soundfile as sf

    rng = np.random.default_rng(0)
    (folder / "audio").mkdir(parents=True, exist_ok=True)
    rows = []
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        wav, rate = sf.read(str(manifest.parent / row["audio_filepath"]), dtype="float32")
        wav = np.concatenate([np.zeros(int(lead_s * rate), np.float32), wav * np.float32(10 ** (-quieter_db / 20))])
        if lead_s:
            wav = wav + rng.standard_normal(wav.shape[0]).astype(np.float32) * np.float32(10 ** (SILENT_MIC_DBFS / 20))
        dst = folder / "audio" / Path(row["audio_filepath"]).name
        sf.write(str(dst), wav, rate, subtype="FLOAT")
        rows.append(json.dumps({**row, "audio_filepath": str(dst.resolve()), "duration": round(wav.shape[0] / rate, 4)}))
    (folder / "test.jsonl").write_text("\n".join(rows) + "\n")
    return str(folder / "test.jsonl")
