"""Loader throughput: audio seconds per wall second through the training DataLoader (decode, resample,
augmentation, normalized spectrogram, collate), with 0 (the main process) to N worker processes; with
`--features step` the loader ships waveforms instead (features.device: the step computes the features).

    speechscale bench loader --workers 0,1,2 --augment both --source both --clip-seconds 12 --features both

Without --manifest the input is synthesized speech written once as 16 kHz flac (before timing),
as loose files and (`--source shards|both`) as tar shards of the same files. The clock runs from the
loader's start (worker start-up included) to its last batch; each result is one pass over the corpus.
`x_realtime_per_worker` divides by the processes that decode (the main process when there are no workers).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

from ..components import build_components
from ..config import AugmentConfig, Config, DataConfig, FeatureConfig
from ..data.audio import load_audio
from .harness import keeps_torch_threads

# What `--augment on` applies: the waveform and feature augmentations a large recipe would use.
AUGMENT = AugmentConfig(speed=[0.9, 1.1], gain_db=6.0, noise_snr_db=[10.0, 30.0], freq_masks=2, time_masks=2)


def flac_corpus(src_manifest: str | Path, out: str | Path, sample_rate: int = 16000, limit: int = 400,
                clip_seconds: float = 0.0) -> Path:
    """`limit` utterances written as `sample_rate` flac under `out`; its manifest. With `clip_seconds`,
    consecutive source clips are joined until each utterance lasts at least that long (LibriSpeech's mean
    is 12.3 s; short clips are where per-file costs dominate). The source is read in a cycle until `limit`."""
    src_manifest, out = Path(src_manifest), Path(out)
    (out / "audio").mkdir(parents=True, exist_ok=True)
    sources = [json.loads(x) for x in src_manifest.read_text().splitlines() if x.strip()]
    rows, k = [], 0
    for i in range(limit):
        wavs, texts = [], []
        while not wavs or sum(len(w) for w in wavs) < clip_seconds * sample_rate:
            row = sources[k % len(sources)]
            k += 1
            wavs.append(load_audio(src_manifest.parent / row["audio_filepath"], sample_rate))
            texts.append(row["text"])
        wav = np.concatenate(wavs)
        sf.write(out / "audio" / f"{i:05d}.flac", wav, sample_rate)
        rows.append(json.dumps({"audio_filepath": f"audio/{i:05d}.flac", "duration": len(wav) / sample_rate,
                                "text": " ".join(texts)}))
    (out / "manifest.jsonl").write_text("\n".join(rows) + "\n")
    return out / "manifest.jsonl"


def _loader(source: str, cfg: Config) -> tuple[Any, int, float]:
    """The training DataLoader over a manifest or shard index (one rank, shuffled, epoch 1, cfg.augment);
    (loader, utterances, audio seconds)."""
    from ..data.batch_plan import LockstepPlan
    from ..data.loading import EpochTagged, build_loader, load_utterances, make_loader, shard_source
    from ..data.shards import is_shard_index

    comps = build_components(cfg)
    aug = cfg.augment
    if is_shard_index(source):
        units, dataset, _ = shard_source(source, comps, cfg.data, aug, cfg.trainer.seed)
        plan = LockstepPlan(units)
        plan.resume(1, 0)
        seconds = sum(s.seconds for s in units.index.shards)
        return build_loader(dataset, EpochTagged(plan), cfg.data, False), units.kept, seconds
    utts, _ = load_utterances(source, comps, cfg.data)
    loader, sampler, _ = make_loader(utts, comps, cfg.data, aug, cfg.trainer.seed)
    sampler.set_epoch(1)
    return loader, len(utts), sum(u.duration for u in utts)


def bench_loader(source: str | Path, workers: list[int], augment: list[bool], sample_rate: int = 16000,
                 batch_seconds: float = 60.0, features: tuple[str, ...] = ("loader",)) -> list[dict[str, Any]]:
    """One pass of the training loader over `source` (a manifest or shard index) for each worker count,
    augmentation setting and place of the features (`features`: loader, and/or step: the loader ships waveforms,
    the training step computes the features on its device, which this bench leaves out). The main process runs
    one torch thread, as each worker does."""
    return bench_loader_interleaved([str(source)], workers, augment, sample_rate, batch_seconds, repeats=1,
                                    features=features)


@keeps_torch_threads
def bench_loader_interleaved(sources: list[str], workers: list[int], augment: list[bool], sample_rate: int = 16000,
                             batch_seconds: float = 60.0, repeats: int = 1, features: tuple[str, ...] = ("loader",)
                             ) -> list[dict[str, Any]]:
    """Every (source, augmentation, workers, features) variant, `repeats` passes each, interleaved in rotating
    order by the harness; one row per variant with the median pass (and the fastest and slowest)."""
    from ..data.features import FeatureExtractor
    from ..data.shards import is_shard_index
    from .harness import interleave

    torch.set_num_threads(1)
    shards = {src: is_shard_index(src) for src in sources}
    sizes: dict[str, tuple[int, float]] = {}

    def one_pass(source: str, w: int, aug: bool, where: str) -> int:
        fcfg = FeatureConfig(sample_rate=sample_rate, device="cpu" if where == "step" else "loader")
        cfg = Config(data=DataConfig(batch_seconds=batch_seconds, num_workers=w, max_batch_size=64,
                                     max_duration=batch_seconds),
                     features=fcfg, augment=AUGMENT if aug else AugmentConfig())
        loader, n, audio = _loader(source, cfg)  # the clock includes worker start-up, as a training epoch's does
        sizes[source] = (n, audio)
        if where == "loader":
            return sum(int(b.feat_lens.sum()) for b in loader)
        fx = FeatureExtractor(fcfg)  # lengths in samples: the frames the step will compute from them
        return sum(fx.num_frames(int(n)) for b in loader for n in b.feat_lens)

    variants = {(src, aug, w, where): (lambda src=src, w=w, aug=aug, where=where: one_pass(src, w, aug, where))
                for src in sources for aug in augment for w in workers for where in features
                if where == "loader" or not shards[src]}
    stats = interleave({str(k): v for k, v in variants.items()}, repeats=repeats, warmup=0)
    results = []
    for (src, aug, w, where) in variants:
        st = stats[str((src, aug, w, where))]
        n, audio = sizes[src]
        results.append({"source": "shards" if shards[src] else "files", "workers": w, "augment": aug,
                        "features": where,
                        "utterances": n, "audio_seconds": round(audio, 1), "feature_frames": st.extra[0],
                        "seconds": round(st.median, 3), "passes": st.n,
                        "seconds_min_max": [round(min(st.samples), 3), round(max(st.samples), 3)],
                        "x_realtime": round(audio / st.median, 1),
                        "x_realtime_per_worker": round(audio / st.median / max(1, w), 1)})
    return results
