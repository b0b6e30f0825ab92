"""Transcribe any audio file with a checkpoint; long audio is cut at its pauses into chunks.

A model transcribes best audio as long as what it trained on: a model trained on sentences of a few seconds loses
words on a minute of speech heard at once. So long audio is cut at the longest pause of every stretch longer than
the chunk length, and again, until each chunk fits (pause_chunks); by default the chunk length follows the
training utterances' durations on the model's card (auto_chunk_seconds). A chunk keeps at most EDGE_S of the
pause on either side: a model hears its own training utterances' short silences, not seconds of quiet.

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
from .segments import CLICK_S, FRAME_S, in_speech, quiet_runs


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
DEFAULT_CHUNK_SECONDS = 20.0  # a model whose card does not say how long its training utterances were
MAX_AUTO_CHUNK_SECONDS = 30.0
TRAINING_SPAN = 1.5  # auto: chunks up to this many times the training utterances' 90th-percentile duration
MIN_PAUSE_S = 0.1  # a quiet run this long or longer is a pause to cut at
EDGE_S = 0.2  # a chunk keeps at most this much of the pause before it and after it


def check_chunk_seconds(seconds: float | None) -> None:
    """ConfigError unless chunks are at least MIN_CHUNK_SECONDS long (0 or less would never end); None: auto."""
    if seconds is not None and not seconds >= MIN_CHUNK_SECONDS:
        from ..config import ConfigError

        raise ConfigError(f"--chunk-seconds={seconds}: chunks must be at least {MIN_CHUNK_SECONDS:g} s long")


def auto_chunk_seconds(card: dict[str, Any]) -> float:
    """The chunk length for a model with model card `card`: TRAINING_SPAN times its training utterances'
    90th-percentile duration, within [MIN_CHUNK_SECONDS, MAX_AUTO_CHUNK_SECONDS]; DEFAULT_CHUNK_SECONDS when the
    card does not say."""
    seconds = ((card.get("training_data") or {}).get("seconds") or {}).get("p90")
    if not isinstance(seconds, (int, float)) or not seconds > 0:
        return DEFAULT_CHUNK_SECONDS
    return round(min(MAX_AUTO_CHUNK_SECONDS, max(MIN_CHUNK_SECONDS, TRAINING_SPAN * seconds)), 2)


def pause_chunks(wav: np.ndarray, sample_rate: int, chunk_s: float, trim: bool = True) -> list[tuple[int, int]]:
    """Sample ranges [a, b) that cut `wav` (T,) into chunks of at most `chunk_s` (audio no longer: one chunk, whole):
    a longer stretch is cut in the middle of its longest pause (a quiet run of MIN_PAUSE_S or more,
    segments.quiet_runs; two parted by a click of up to CLICK_S are one; of equal ones, the nearest the stretch's
    middle), and each side again; a stretch without one is cut at its quietest frames (split_points). `trim`: each
    chunk keeps at most EDGE_S of the quiet before and after it, the recording's quiet edges included (the chunks
    leave the rest of each pause out); else they tile the recording."""
    n = wav.shape[0]
    if n <= chunk_s * sample_rate:
        return [(0, n)]
    runs, pauses = _quiet_and_pauses(wav, sample_rate)
    limit = chunk_s * sample_rate
    bounds, todo = [], [(0, n)]
    while todo:  # stretches [a, b) still to cut, the earliest last
        a, b = todo.pop()
        if b - a <= limit:
            bounds.append((a, b))
            continue
        inner = pauses[(pauses[:, 0] > a) & (pauses[:, 1] < b)]  # pauses strictly inside the stretch
        if not len(inner):
            cuts = split_points(wav[a:b], sample_rate, chunk_s)
            bounds += [(a + x, a + y) for x, y in zip(cuts, cuts[1:])]
            continue
        middle = np.abs(inner.sum(axis=1) - (a + b))  # twice the distance to the stretch's middle
        k = int(np.lexsort((middle, -(inner[:, 1] - inner[:, 0])))[0])  # the longest, then the nearest the middle
        cut = int(inner[k].sum()) // 2
        todo += [(cut, b), (a, cut)]
    bounds.sort()
    if not trim or not len(runs):
        return bounds
    edge = round(EDGE_S * sample_rate)
    whole = n - n % max(1, int(FRAME_S * sample_rate))  # quiet_runs reads whole frames: a run at whole reaches n
    ends = np.where(runs[:, 1] >= whole, n, runs[:, 1])
    out = []
    for a, b in bounds:
        i = int(np.searchsorted(ends, a, "right"))  # the first run that ends after a
        if i < len(runs) and runs[i, 0] <= a:  # a lies in it
            a = max(a, int(ends[i]) - edge)
        j = int(np.searchsorted(runs[:, 0], b, "left")) - 1  # the last run that starts before b
        if j >= 0 and ends[j] >= b:  # b lies in it
            b = min(b, int(runs[j, 0]) + edge)
        if b > a:
            out.append((a, b))
    return out


def _quiet_and_pauses(wav: np.ndarray, sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """(quiet runs, pauses) of `wav` in samples, each (R, 2) in order: the pauses are the runs of MIN_PAUSE_S or more,
    two that CLICK_S or less of sound parts joined into one (a click or a tap inside a pause leaves it one pause, so
    no chunk holds the click alone); the quiet runs are the pauses and the shorter runs outside them."""
    runs = np.round(quiet_runs(wav, sample_rate) * sample_rate).astype(np.int64)  # (R, 2)
    long = runs[:, 1] - runs[:, 0] >= round(MIN_PAUSE_S * sample_rate)
    pauses, short = runs[long], runs[~long]
    if len(pauses) < 2:
        return runs, pauses
    first = np.concatenate([[True], pauses[1:, 0] - pauses[:-1, 1] > round(CLICK_S * sample_rate)])  # begins a pause
    last = np.concatenate([first[1:], [True]])  # ends its pause
    pauses = np.stack([pauses[first, 0], pauses[last, 1]], axis=1)
    k = np.searchsorted(pauses[:, 0], short[:, 0], "right") - 1  # the pause each short run starts in or after
    short = short[(k < 0) | (short[:, 1] > pauses[np.maximum(k, 0), 1])]  # one inside a joined pause is part of it
    runs = np.concatenate([short, pauses])
    return runs[np.argsort(runs[:, 0], kind="stable")], pauses


class Transcriber:
    """A model loaded from a checkpoint, ready to transcribe waveforms or files."""

    def __init__(self, checkpoint: str | Path, chunk_seconds: float | None = None, backend: str = "torch",
                 decoder: Any = None, device: str = "cpu", graphs: bool = False, max_pieces: int = 16) -> None:
        """`checkpoint`: a speechscale checkpoint (backend torch) or a file of `speechscale export` (backend
        onnx: onnxruntime; torchscript: torch.jit; auto: the one the file needs). `decoder`: a DecoderConfig
        (default greedy). `device`: where the model runs (auto | cpu | cuda[:N]); features and decoding stay on the
        host. `graphs` (backend torch, a CUDA device): each batch padded to a fixed shape and replayed as a CUDA
        graph. `max_pieces`: chunks run through the model at once (a long file's in several batches).
        `chunk_seconds`: long audio's chunk length (None: the model card's, auto_chunk_seconds)."""
        check_chunk_seconds(chunk_seconds)
        self.device = resolve_device(device, "--device")
        from ..export.runtime import detect_backend

        kind = detect_backend(checkpoint)  # what the file is (a URL's: by its name)
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
            from ..export.runtime import ExportedModel, exported_file

            with exported_file(checkpoint) as local:  # a URL's copied for the runtime to read
                self.model = ExportedModel(local, backend, self.device)
            self.comps = self.model.components()
        from ..decoding.decoders import build_decoder

        self.decoder_cfg = decoder or "greedy"  # streams build a search of their own from it
        self.decoder = build_decoder(self.decoder_cfg, self.comps.tokenizer, self.comps.normalizer)
        self.sample_rate = self.comps.features.cfg.sample_rate
        self.chunk_seconds = chunk_seconds if chunk_seconds is not None else auto_chunk_seconds(self.comps.card)
        self.max_pieces = max_pieces

    @torch.no_grad()
    def forward_pieces(self, wavs: list[np.ndarray], trim: bool = True) -> tuple[list[tuple[int, float]], torch.Tensor,
                                                                                 torch.Tensor, list[float]]:
        """Waveforms (T,) float32 at the model's rate, cut into chunks at their pauses (pause_chunks; `trim`: the
        quiet at their edges trimmed), the chunks run as padded batches of at most `max_pieces` -> each chunk's
        (waveform, offset s), log-probabilities (B, T', V) and output lengths (B,) on the host, and each chunk's
        output frame (s)."""
        pieces: list[tuple[int, float, np.ndarray]] = []  # (waveform, offset s, samples)
        for w, wav in enumerate(wavs):
            pieces += [(w, a / self.sample_rate, wav[a:b])
                       for a, b in pause_chunks(wav, self.sample_rate, self.chunk_seconds, trim)
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
        for res, wav in zip(results, wavs):  # timed words where the audio has speech, none past its end
            if res["words"] and all("start" in w for w in res["words"]):
                res["words"] = in_speech(res["words"], wav, self.sample_rate)[0]
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
