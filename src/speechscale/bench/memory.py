"""Loader memory against corpus size: the resident memory of a training loader process, measured, for a
shard index and for a manifest of the same utterances.

    speechscale bench memory --utterances 10000,100000,1000000 --source both

The corpus is synthetic in size only: a few real tar shards of 16 kHz flac (`--manifest`'s recordings, else
synthesized speech), listed again and again
in one index (every entry names a real shard, so every batch read is real), and a manifest that lists the
same files again and again. Each measurement runs in a fresh process: build the model's components (the
baseline), plan the epoch and read `batches` batches through the DataLoader; the process reports its
resident set (VmRSS) and peak (VmHWM) from /proc, and the peak over the baseline is what the data costs.
`listing_mb` is the part of it held before the first batch (the corpus listing and the epoch's plan): the
part that grows with the corpus, without the batches' transient tensors (whose peak varies by ~10 MB from
run to run with the allocator).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .loader import flac_corpus


def synthetic_corpus(folder: str | Path, utterances: int, source: str | Path, per_shard: int = 1000
                     ) -> tuple[Path, Path]:
    """(index, manifest) of `utterances` utterances over the audio of manifest `source` under `folder` (built once
    and reused)."""
    from ..data.shards import INDEX_NAME, write_shards

    folder = Path(folder)
    real = folder / "real"
    if not (real / "shards" / INDEX_NAME).is_file():
        manifest = flac_corpus(source, real, 16000, limit=2 * per_shard)
        write_shards(str(manifest), real / "shards", shard_size=per_shard)
    lines = (real / "shards" / INDEX_NAME).read_text().splitlines()
    entries = [json.loads(x) for x in lines[1:]]
    out = folder / f"n{utterances}"
    out.mkdir(parents=True, exist_ok=True)
    n_shards = -(-utterances // per_shard)
    index = real / "shards" / f"index-n{utterances}.jsonl"  # beside the shards it names (relative names)
    with open(index, "w") as f:
        f.write(json.dumps({"speechscale_shards": 1, "shards": n_shards, "utterances": utterances}) + "\n")
        for s in range(n_shards):
            f.write(json.dumps(entries[s % len(entries)]) + "\n")
    rows = [json.loads(x) for x in (real / "manifest.jsonl").read_text().splitlines()]
    with open(out / "manifest.jsonl", "w") as f:
        for i in range(n_shards * per_shard):
            r = dict(rows[i % len(rows)])
            r["audio_filepath"] = str((real / r["audio_filepath"]).resolve())
            f.write(json.dumps(r) + "\n")
    return index, out / "manifest.jsonl"


def _status() -> dict[str, float]:
    """VmRSS and VmHWM of this process, in MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def measure_here(source: str, batches: int) -> dict[str, Any]:
    """In this process: baseline, plan an epoch of `source`, read `batches` batches; memory and times."""
    from ..config import Config, DataConfig, FeatureConfig
    from .loader import _loader

    cfg = Config(data=DataConfig(batch_seconds=60.0, max_batch_size=64), features=FeatureConfig(sample_rate=16000))
    from ..components import build_components

    build_components(cfg)  # the model and features: part of the baseline
    base = _status()
    started = time.perf_counter()
    loader, n, audio = _loader(source, cfg)  # no augmentation configured
    indexed = _status()  # the corpus listing and the epoch's plan: what grows with the corpus
    it = iter(loader)
    first = next(it)
    planned = time.perf_counter() - started
    read = len(first)
    for _, batch in zip(range(batches - 1), it):
        read += len(batch)
    now = _status()
    return {"utterances": n, "batches_read": batches, "utterances_read": read,
            "baseline_mb": round(base["VmRSS"], 1), "rss_mb": round(now["VmRSS"], 1),
            "peak_mb": round(now["VmHWM"], 1), "data_mb": round(now["VmHWM"] - base["VmRSS"], 1),
            "listing_mb": round(indexed["VmRSS"] - base["VmRSS"], 1),
            "plan_s": round(planned, 2), "total_s": round(time.perf_counter() - started, 2)}


def bench_memory(folder: str | Path, sizes: list[int], sources: list[str], batches: int = 50,
                 per_shard: int = 1000, *, manifest: str | Path) -> list[dict[str, Any]]:
    """One fresh process per (source kind, size) over the recordings of `manifest`; JSON rows."""
    rows = []
    for size in sizes:
        index, listing = synthetic_corpus(folder, size, manifest, per_shard)
        for kind in sources:
            src = str(index if kind == "shards" else listing)
            proc = subprocess.run([sys.executable, "-m", "speechscale.bench.memory", src, str(batches)],
                                  capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(f"memory probe failed on {src}: {proc.stderr[-2000:]}")
            rows.append({"source": kind, **json.loads(proc.stdout.strip().splitlines()[-1])})
    return rows


if __name__ == "__main__":  # the probe process
    print(json.dumps(measure_here(sys.argv[1], int(sys.argv[2]))))
