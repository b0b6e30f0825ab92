"""Transcribe any audio file with a checkpoint; long audio is cut at quiet points into chunks.

    >>> asr = Transcriber("runs/demo/checkpoints/best.pt")   # doctest: +SKIP
    >>> asr.transcribe_file("../shared/data/jfk/jfk.flac")   # doctest: +SKIP
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..components import load_components
from ..data.audio import load_audio


def split_points(wav: np.ndarray, sample_rate: int, chunk_s: float, search_s: float = 2.0) -> list[int]:
    """Sample indices that cut `wav` into chunks of at most `chunk_s`, each cut at the quietest 20 ms
    frame within the last `search_s` seconds before the limit."""
    n = wav.shape[0]
    limit = int(chunk_s * sample_rate)
    if limit < 1:
        raise ValueError(f"chunk length {chunk_s} s is shorter than one sample")
    cuts = [0]
    frame = max(1, int(0.02 * sample_rate))
    while n - cuts[-1] > limit:
        end = cuts[-1] + limit
        start = max(cuts[-1] + frame, end - int(search_s * sample_rate))
        seg = wav[start:end]
        k = seg.shape[0] // frame
        if k == 0:
            cuts.append(end)
            continue
        energy = (seg[: k * frame].reshape(k, frame) ** 2).mean(axis=1)  # (k,)
        cuts.append(start + int(energy.argmin()) * frame + frame // 2)
    cuts.append(n)
    return cuts


MIN_CHUNK_SECONDS = 1.0


def check_chunk_seconds(seconds: float) -> None:
    """ConfigError unless chunks are at least MIN_CHUNK_SECONDS long (0 or less would never end)."""
    if not seconds >= MIN_CHUNK_SECONDS:
        from ..config import ConfigError

        raise ConfigError(f"--chunk-seconds={seconds}: chunks must be at least {MIN_CHUNK_SECONDS:g} s long")


class Transcriber:
    """A model loaded from a checkpoint, ready to transcribe waveforms or files."""

    def __init__(self, checkpoint: str | Path, chunk_seconds: float = 20.0, backend: str = "torch",
                 decoder: Any = None) -> None:
        """`checkpoint`: a speechscale checkpoint (backend torch) or a file of `speechscale export` (backend
        onnx: onnxruntime; torchscript: torch.jit). `decoder`: a DecoderConfig (default greedy)."""
        check_chunk_seconds(chunk_seconds)
        if backend == "torch":
            self.comps = load_components(checkpoint)
            self.model: Any = self.comps.model
        else:
            from ..export.runtime import ExportedModel

            self.model = ExportedModel(checkpoint, backend)
            self.comps = self.model.components()
        from ..decoding.decoders import build_decoder

        self.decoder = build_decoder(decoder or "greedy", self.comps.tokenizer, self.comps.normalizer)
        self.sample_rate = self.comps.features.cfg.sample_rate
        self.chunk_seconds = chunk_seconds

    @torch.no_grad()
    def transcribe(self, wav: np.ndarray) -> str:
        """(T,) float32 at the model's rate -> text."""
        cuts = split_points(wav, self.sample_rate, self.chunk_seconds)
        pieces = [wav[a:b] for a, b in zip(cuts, cuts[1:]) if b - a > int(0.05 * self.sample_rate)]
        texts = []
        for piece in pieces:
            feats = self.comps.features(torch.from_numpy(np.ascontiguousarray(piece)))  # (F, T)
            logits, lens = self.model(feats[None], torch.tensor([feats.shape[1]]))
            texts.append(self.decoder(logits.float().log_softmax(-1), lens)[0])
        return " ".join(t for t in texts if t)

    def transcribe_file(self, path: str | Path) -> dict[str, object]:
        """Read any audio file and transcribe it; returns {"file", "text", "duration"}."""
        wav = load_audio(path, self.sample_rate)
        return {"file": str(path), "text": self.transcribe(wav), "duration": round(wav.shape[0] / self.sample_rate, 3)}
