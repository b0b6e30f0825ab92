"""Cost of the data path per second of audio: file decoding + resampling + features, on real files.

    speechscale bench features --manifest DATA/fsdd/manifest.jsonl --sample-rate 16000
"""
from __future__ import annotations

import time
from typing import Any

import torch

from ..config import FeatureConfig
from ..data.audio import load_audio
from ..data.features import FeatureExtractor
from ..data.manifest import read_manifest


def bench_features(manifest: str, sample_rate: int = 16000, kind: str = "spectrogram", limit: int = 300,
                   repeats: int = 2) -> dict[str, Any]:
    """Load and featurize up to `limit` utterances `repeats` times; report ms per second of audio."""
    utts, _ = read_manifest(manifest)
    utts = utts[:limit]
    fx = FeatureExtractor(FeatureConfig(kind=kind, sample_rate=sample_rate))
    load_s = feat_s = audio_s = 0.0
    for _ in range(repeats):
        for u in utts:
            t0 = time.perf_counter()
            wav = load_audio(u.audio_path, sample_rate)
            t1 = time.perf_counter()
            fx(torch.from_numpy(wav))
            t2 = time.perf_counter()
            load_s += t1 - t0
            feat_s += t2 - t1
            audio_s += wav.shape[0] / sample_rate
    return {"manifest": manifest, "utterances": len(utts), "sample_rate": sample_rate, "kind": kind,
            "threads": torch.get_num_threads(), "audio_seconds": round(audio_s, 1),
            "ms_per_audio_second": {"load": round(1000 * load_s / audio_s, 3),
                                    "features": round(1000 * feat_s / audio_s, 3),
                                    "total": round(1000 * (load_s + feat_s) / audio_s, 3)},
            "realtime_factor": round(audio_s / (load_s + feat_s), 1)}
