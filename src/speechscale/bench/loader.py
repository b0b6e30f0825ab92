"""Loader throughput: audio seconds per wall second through the training DataLoader (decode, resample,
augmentation, normalized spectrogram, collate), with 0 (the main process) to N worker processes.

    speechscale bench loader --workers 0,1,2 --augment both

Without --manifest the input is 16 kHz flac made once from ../shared/data/fsdd (written before timing).
The clock runs from the loader's start (worker start-up included) to its last batch; each result is one
pass over the corpus. `x_realtime_per_worker` divides by the processes that decode (the main process when
there are no workers).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import soundfile as sf

from ..components import build_components
from ..config import AugmentConfig, Config, DataConfig, FeatureConfig
from ..data.audio import load_audio

# What `--augment on` applies: the waveform and feature augmentations a large recipe would use.
AUGMENT = AugmentConfig(speed=[0.9, 1.1], gain_db=6.0, noise_snr_db=[10.0, 30.0], freq_masks=2, time_masks=2)


def flac_corpus(src_manifest: str | Path, out: str | Path, sample_rate: int = 16000, limit: int = 400) -> Path:
    """Up to `limit` utterances of `src_manifest` written as `sample_rate` flac under `out`; its manifest."""
    src_manifest, out = Path(src_manifest), Path(out)
    (out / "audio").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, line in enumerate(src_manifest.read_text().splitlines()[:limit]):
        row = json.loads(line)
        wav = load_audio(src_manifest.parent / row["audio_filepath"], sample_rate)
        sf.write(out / "audio" / f"{i:05d}.flac", wav, sample_rate)
        rows.append(json.dumps({"audio_filepath": f"audio/{i:05d}.flac", "duration": len(wav) / sample_rate,
                                "text": row["text"]}))
    (out / "manifest.jsonl").write_text("\n".join(rows) + "\n")
    return out / "manifest.jsonl"


def bench_loader(manifest: str | Path, workers: list[int], augment: list[bool], sample_rate: int = 16000,
                 batch_seconds: float = 60.0) -> list[dict[str, Any]]:
    """One pass of the training loader over `manifest` for each worker count and augmentation setting."""
    from ..data.loading import load_utterances, make_loader

    results = []
    for aug in augment:
        for w in workers:
            cfg = Config(data=DataConfig(train_manifest=str(manifest), batch_seconds=batch_seconds, num_workers=w,
                                         max_batch_size=64),
                         features=FeatureConfig(sample_rate=sample_rate), augment=AUGMENT if aug else AugmentConfig())
            comps = build_components(cfg)
            utts, _ = load_utterances(str(manifest), comps, cfg.data)
            loader, _, _ = make_loader(utts, comps, cfg.data, cfg.augment if aug else None, cfg.trainer.seed)
            started = time.perf_counter()
            frames = sum(int(b.feat_lens.sum()) for b in loader)
            seconds = time.perf_counter() - started
            audio = sum(u.duration for u in utts)
            results.append({"workers": w, "augment": aug, "utterances": len(utts), "audio_seconds": round(audio, 1),
                            "feature_frames": frames, "seconds": round(seconds, 3),
                            "x_realtime": round(audio / seconds, 1),
                            "x_realtime_per_worker": round(audio / seconds / max(1, w), 1)})
    return results
