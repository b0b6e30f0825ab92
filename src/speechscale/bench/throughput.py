"""Steady-state training throughput of a model preset: audio-seconds/s, utterances/s, ms per phase.

    speechscale bench train --model ds2-tiny --batch-size 8 --seconds 2

Batches are real audio cut from a manifest (default: ../shared/data/ldc93s1 when present), else
synthesized speech-like noise; the data phase includes loading, features and collate.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..components import build_components
from ..config import Config, from_dict
from ..data.audio import load_audio
from ..training.optim import build_optimizer


def _clips(manifest: str | None, sample_rate: int, seconds: float, n: int, seed: int) -> list[np.ndarray]:
    """`n` clips of `seconds` each: windows of real recordings, or noise when no manifest is given."""
    rng = np.random.default_rng(seed)
    need = int(seconds * sample_rate)
    if manifest:
        from ..data.manifest import read_manifest

        utts, _ = read_manifest(manifest)
        audio = np.concatenate([load_audio(u.audio_path, sample_rate) for u in utts[:50]])
        while audio.shape[0] < need + 1:
            audio = np.concatenate([audio, audio])
        starts = rng.integers(0, audio.shape[0] - need, size=n)
        return [audio[s:s + need].copy() for s in starts]
    return [rng.standard_normal(need).astype(np.float32) * 0.1 for _ in range(n)]


def bench_train(model: str = "ds2-tiny", batch_size: int = 8, seconds: float = 2.0, steps: int = 5,
                warmup: int = 2, manifest: str | None = None, threads: int = 0,
                overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Time `steps` training steps after `warmup`; returns throughput and the per-phase split as a dict."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg: Config = from_dict(Config, {"model": {"name": model, "overrides": overrides or {}}})
    comps = build_components(cfg)
    m = comps.model.train()
    opt = build_optimizer(m, cfg.optim)
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    text = "she had your dark suit in greasy wash water all year"
    tgt = torch.tensor(comps.tokenizer.encode(text) * batch_size)
    tgt_lens = torch.full((batch_size,), len(text), dtype=torch.long)
    clips = _clips(manifest, comps.features.cfg.sample_rate, seconds, batch_size, seed=0)
    phases = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        feats = torch.stack([comps.features(torch.from_numpy(c)) for c in clips])  # (B, F, T)
        lens = torch.full((batch_size,), feats.shape[-1], dtype=torch.long)
        t1 = time.perf_counter()
        logits, out_lens = m(feats, lens)
        loss = ctc(logits.float().log_softmax(-1).transpose(0, 1), tgt, out_lens, tgt_lens)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 5.0)
        opt.step()
        t4 = time.perf_counter()
        if i >= warmup:
            for k, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[k] += dt
    total = sum(phases.values())
    return {
        "model": model, "params": sum(p.numel() for p in m.parameters()), "batch_size": batch_size,
        "utterance_seconds": seconds, "steps": steps, "threads": torch.get_num_threads(),
        "source": Path(manifest).parent.name if manifest else "noise",
        "audio_seconds_per_second": round(batch_size * seconds * steps / total, 2),
        "utterances_per_second": round(batch_size * steps / total, 2),
        "ms_per_step": round(1000 * total / steps, 1),
        "ms_per_phase": {k: round(1000 * v / steps, 1) for k, v in phases.items()},
    }
