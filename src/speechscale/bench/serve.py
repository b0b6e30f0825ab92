"""Transcription service throughput and latency: `speechscale serve` in a subprocess on a loopback port,
clients posting the same 5 s clip of speech (`--manifest`'s files end to end, else synthesized speech) at
concurrency 1, 8, 32.

    speechscale bench serve --checkpoint runs/demo/checkpoints/best.pt --seconds 5 --concurrency 1,8,32

Each level sends `requests` requests (after 4 warm-up ones) from that many client threads; reported are
requests per second over the level's wall time and the p50 / p95 latency per request.
"""
from __future__ import annotations

import concurrent.futures
import io
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import soundfile as sf

from .audio import speech
from .ports import free_port


def _clip(files: list[Path], seconds: float) -> bytes:
    """`seconds` of `files` end to end (repeated if needed) as 16 kHz 16-bit WAV bytes."""
    wav = speech(files, seconds)[: int(seconds * 16000)]
    buf = io.BytesIO()
    sf.write(buf, wav, 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _post(url: str, data: bytes) -> float:
    started = time.perf_counter()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "audio/wav"})
    with urllib.request.urlopen(req, timeout=300) as r:
        json.load(r)
    return time.perf_counter() - started


def bench_serve(checkpoint: str, seconds: float = 5.0, levels: list[int] = (1, 8, 32),
                requests: int = 64, extra: list[str] | None = None, *, files: list[Path]) -> list[dict[str, Any]]:
    """Each level's requests/s and latency, posting `seconds` of `files`."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "speechscale.cli", "serve", "--checkpoint", checkpoint,
                             "--port", str(port), *(extra or [])], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        clip, url = _clip(files, seconds), base + "/v1/transcribe"
        for _ in range(4):
            _post(url, clip)
        rows = []
        for level in levels:
            n = max(requests, level)
            with concurrent.futures.ThreadPoolExecutor(level) as pool:
                started = time.perf_counter()
                lat = sorted(pool.map(lambda _: _post(url, clip), range(n)))
                wall = time.perf_counter() - started
            rows.append({"concurrency": level, "requests": n, "clip_seconds": seconds,
                         "requests_per_s": round(n / wall, 2), "x_realtime": round(n * seconds / wall, 1),
                         "p50_ms": round(1000 * statistics.median(lat), 1),
                         "p95_ms": round(1000 * lat[min(n - 1, int(0.95 * n))], 1)})
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=30)
