"""Transcribe any audio file with a checkpoint; long audio is cut at quiet points into chunks.

    >>> asr = Transcriber("runs/demo/checkpoints/best.pt")   # doctest: +SKIP
    >>> asr.transcribe_file("data/jfk/jfk.flac")   # doctest: +SKIP
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..components import load_components, resolve_device
from ..data.audio import AudioError, load_audio
from ..data.dataset import pad_features


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
                 decoder: Any = None, device: str = "cpu", graphs: bool = False, max_pieces: int = 16) -> None:
        """`checkpoint`: a speechscale checkpoint (backend torch) or a file of `speechscale export` (backend
        onnx: onnxruntime; torchscript: torch.jit; auto: the one the file needs). `decoder`: a DecoderConfig
        (default greedy). `device`: where the model runs (auto | cpu | cuda[:N]); features and decoding stay on the
        host. `graphs` (backend torch, a CUDA device): each batch padded to a fixed shape and replayed as a CUDA
        graph. `max_pieces`: chunks run through the model at once (a long file's in several batches)."""
        check_chunk_seconds(chunk_seconds)
        self.device = resolve_device(device, "--device")
        from ..export.runtime import detect_backend
        from ..storage import is_remote

        kind = "torch" if is_remote(checkpoint) else detect_backend(checkpoint)  # what the file is
        backend = kind if backend == "auto" else backend
        self.backend = backend
        if graphs:
            from ..config import ConfigError
            from .graphed import check_graphs_device

            if backend != "torch":
                raise ConfigError(f"--graphs replays the PyTorch model: it needs a checkpoint, not an export ({backend})")
            check_graphs_device(device)
        if backend == "torch":
            if kind != "torch":
                from ..config import ConfigError

                raise ConfigError(f"{checkpoint} is a file of `speechscale export` ({kind}), not a checkpoint: leave "
                                  f"--backend out (or give --backend {kind})")
            self.comps = load_components(checkpoint, str(self.device))
            self.model: Any = self.comps.model
            if graphs:
                from .graphed import FixedShapeForward

                self.model = FixedShapeForward(self.comps.model)
        else:
            from ..export.runtime import ExportedModel

            self.model = ExportedModel(checkpoint, backend, self.device)
            self.comps = self.model.components()
        from ..decoding.decoders import build_decoder

        self.decoder_cfg = decoder or "greedy"  # streams build a search of their own from it
        self.decoder = build_decoder(self.decoder_cfg, self.comps.tokenizer, self.comps.normalizer)
        self.sample_rate = self.comps.features.cfg.sample_rate
        self.chunk_seconds = chunk_seconds
        self.max_pieces = max_pieces

    @torch.no_grad()
    def forward_pieces(self, wavs: list[np.ndarray]) -> tuple[list[tuple[int, float]], torch.Tensor, torch.Tensor,
                                                               list[float]]:
        """Waveforms (T,) float32 at the model's rate, cut into chunks at quiet points, the chunks run as padded
        batches of at most `max_pieces` -> each chunk's (waveform, offset s), log-probabilities (B, T', V) and
        output lengths (B,) on the host, and each chunk's output frame (s)."""
        pieces: list[tuple[int, float, np.ndarray]] = []  # (waveform, offset s, samples)
        for w, wav in enumerate(wavs):
            cuts = split_points(wav, self.sample_rate, self.chunk_seconds)
            pieces += [(w, a / self.sample_rate, wav[a:b]) for a, b in zip(cuts, cuts[1:])
                       if b - a > int(0.05 * self.sample_rate)]
        if not pieces:
            return [], torch.zeros(0, 0, self.comps.tokenizer.vocab_size), torch.zeros(0, dtype=torch.long), []
        hop_s = self.comps.features.hop_length / self.sample_rate
        groups, out_lens, frame_s = [], [], []
        for g in range(0, len(pieces), self.max_pieces):  # a long file's chunks, a batch at a time
            feats = [self.comps.features(torch.from_numpy(np.ascontiguousarray(p))) for _, _, p in
                     pieces[g:g + self.max_pieces]]  # (F, T) each
            batch, lens = pad_features(feats)  # (B, F, T), (B,)
            logits, lengths = self.model(batch.to(self.device), lens.to(self.device))
            groups.append(logits.float().log_softmax(-1).cpu())  # (B, T', V)
            out_lens.append(lengths.cpu())
            frame_s += [hop_s * int(n) / max(1, int(m)) for n, m in zip(lens, out_lens[-1])]
        frames = max(x.shape[1] for x in groups)
        log_probs = torch.cat([torch.nn.functional.pad(x, (0, 0, 0, frames - x.shape[1])) for x in groups])
        return [(w, offset) for w, offset, _ in pieces], log_probs, torch.cat(out_lens), frame_s

    def transcribe_batch(self, wavs: list[np.ndarray]) -> list[dict[str, Any]]:
        """Waveforms (T,) float32 at the model's rate -> {"text", "duration", "words"} each. Long audio is
        cut into chunks; the chunks of all waveforms run as padded batches (forward_pieces). With the greedy decoder each
        word carries start, end (s) and a confidence from the CTC alignment; other decoders give the words."""
        results: list[dict[str, Any]] = [{"text": "", "duration": round(wav.shape[0] / self.sample_rate, 3),
                                          "words": []} for wav in wavs]
        pieces, log_probs, out_lens, frame_s = self.forward_pieces(wavs)
        if not pieces:
            return results
        texts = self.decoder(log_probs, out_lens)
        for i, ((w, offset), text) in enumerate(zip(pieces, texts)):
            res = results[w]
            res["text"] = f"{res['text']} {text}".strip() if text else res["text"]
            res["words"] += self.decoder.words(log_probs[i], int(out_lens[i]), text, frame_s[i], offset)
        return results

    def transcribe(self, wav: np.ndarray) -> str:
        """(T,) float32 at the model's rate -> text."""
        return self.transcribe_batch([wav])[0]["text"]

    def transcribe_file(self, path: str | Path) -> dict[str, object]:
        """Read any audio file and transcribe it; returns {"file", "text", "duration", "words"}."""
        wav = load_audio(path, self.sample_rate)
        return {"file": str(path), **self.transcribe_batch([wav])[0]}


def transcribe_files(asr: Transcriber, files: list[str], batch_size: int,
                     read: Callable[[str, int], np.ndarray] = load_audio,
                     batch_seconds: float = math.inf) -> Iterator[tuple[str, dict[str, Any]]]:
    """(file, result) in the order given: files read (`read(file, rate)`) and run `batch_size` at a time (fewer once
    they hold `batch_seconds` of audio) as one padded batch (what a GPU wants). An unreadable file's result is
    {"file", "error"}; the others of its batch still run."""
    group: list[str] = []
    wavs: list[tuple[str, np.ndarray]] = []
    results: dict[str, dict[str, Any]] = {}
    held = 0.0  # seconds of audio in `wavs`
    for i, f in enumerate(files):
        group.append(f)
        try:
            wavs.append((f, read(f, asr.sample_rate)))
            held += wavs[-1][1].shape[0] / asr.sample_rate
        except AudioError as e:
            results[f] = {"file": str(f), "error": str(e)}
        if len(group) < batch_size and held < batch_seconds and i + 1 < len(files):
            continue
        for (g, _), res in zip(wavs, asr.transcribe_batch([w for _, w in wavs]) if wavs else []):
            results[g] = {"file": str(g), **res}
        for g in group:
            yield g, results[g]
        group, wavs, results, held = [], [], {}, 0.0
