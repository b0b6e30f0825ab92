"""One model, many live streams: each stream owns a small typed state; the recognizer runs every stream that has a
chunk of feature frames ready as one batch through the model's streaming step (models.streaming).

    rec = Recognizer(comps)                                 # or Recognizer(comps, step=OnnxStep("step.onnx"))
    a, b = rec.create_stream(sample_rate=8000), rec.create_stream(sample_rate=44100)
    a.push(samples_a); b.push(samples_b)                    # audio in: the stream's own front end (any thread)
    rec.decode_streams([a, b])                              # one STFT, then one batched step per round of chunks
    events = a.events() + b.events()                        # Partial / Final (streaming.events)
    b.close(); rec.decode_streams([b]); events = b.events() # the end: every remaining frame, the last Final

A stream's text does not depend on which streams share its batches: a row of the step reads only its own state.
"""
from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..models.streaming import UNKNOWN, streaming_problem
from .events import Event, within
from .frontend import Cut, FrontEnd, spectra
from .phrases import PhraseDecoder


class StreamingRefused(ValueError):
    """The model cannot stream (one line: why)."""


@dataclass(eq=False)  # compared (and hashed) by identity: each is one live stream
class Stream:
    """One live stream's state: its front end, the frames not yet stepped, its row of the model's state (a slot of
    the recognizer's StatePool, given back when the stream is dropped), its decoding. Created by
    Recognizer.create_stream."""

    front: FrontEnd
    decoder: PhraseDecoder
    slot: int                             # its row in the recognizer's StatePool
    pending: torch.Tensor                 # (F, n) feature frames not yet stepped
    out_length: Callable[[int], int]      # output frames for a stream of so many feature frames
    fed: int = 0                          # feature frames stepped
    total: int = UNKNOWN                  # the stream's feature frames, once closed
    expected: int | None = None           # its output frames, once closed
    emitted: int = 0                      # decided output frames so far
    closed: bool = False
    ended: bool = False                   # the last Final is out
    cuts: list[Cut] = field(default_factory=list)  # samples of frames whose spectra are not computed yet
    decided: list[torch.Tensor] = field(default_factory=list)  # logits (n, V) stepped but not yet decoded
    keep_logits: list[torch.Tensor] | None = None  # every decided frame's logits, when set to [] (tests)
    digits: str = ""                      # its finals and whole text sent with numbers in digits (decoding.digits),
                                          # for a model spelling this language ("" = as spoken)
    received: int = 0                     # samples pushed, at the stream's rate

    def push(self, samples: Any) -> None:
        """Mono float samples at the stream's rate (any number): their feature frames wait for the next step."""
        if self.closed:
            raise ValueError("the stream is finished")
        self.received += len(samples)
        self._add(self.front(samples))

    def close(self) -> None:
        """The end of the stream's audio: its last frames, and its length, which the step needs to finish."""
        if not self.closed:
            self._add(self.front.finish())
            self.closed, self.total = True, self.front.features.frames  # every frame the front end made
            self.expected = self.out_length(self.total) if self.total else 0

    def events(self) -> list[Event]:
        """The events of the frames decided since the last call (and the last Final once the stream is done)."""
        out: list[Event] = []
        if self.decided:
            logits = torch.cat(self.decided)
            self.decided = []
            if self.keep_logits is not None:
                self.keep_logits.append(logits)
            out = self.decoder.feed(logits)
        if self.done and not self.ended:
            out += self.decoder.end()
            self.ended = True
        if not self.closed:  # more audio follows: a word may end a frame past what has come so far
            return out
        return [within(e, self.received / self.front.in_rate) for e in out]

    @property
    def done(self) -> bool:
        """Closed, and every output frame decided."""
        return self.expected is not None and self.emitted >= self.expected and not self.decided

    @property
    def decided_s(self) -> float:
        """Seconds of audio whose output frames are decided."""
        return round(self.emitted * self.decoder.frame_s, 3)

    @property
    def text(self) -> str:
        return self.decoder.text

    def _add(self, cut: Cut | None) -> None:
        if cut is not None and cut.frames:
            self.cuts.append(cut)


class StatePool:
    """The model state of every stream: row `slot` of one tensor per piece of state (models.streaming), gathered for
    a step and written back, so a step over N streams costs a few indexing ops instead of N copies of each piece.
    Slots are taken and given back from any thread; rows are made (zeros of the step's initial state) and grown
    only by the thread that steps."""

    def __init__(self, step: Any) -> None:
        self.step = step
        self.tensors: list[torch.Tensor] = []
        self.free: list[int] = []
        self.size = 0
        self.fresh: set[int] = set()  # slots taken since their row was last reset
        self.lock = threading.Lock()

    def take(self) -> int:
        with self.lock:
            slot = self.free.pop() if self.free else self.size
            self.size = max(self.size, slot + 1)
            self.fresh.add(slot)
            return slot

    def give(self, slot: int) -> None:
        with self.lock:
            self.fresh.discard(slot)
            self.free.append(slot)

    def gather(self, slots: list[int], pad: int = 0) -> list[torch.Tensor]:
        """The rows of `slots`, then `pad` rows of the initial state: one (len(slots) + pad, ...) tensor a piece."""
        with self.lock:
            size, fresh = self.size, list(self.fresh & set(slots))
            self.fresh -= set(fresh)
        capacity = self.tensors[0].shape[0] if self.tensors else 0
        if size > capacity:  # room for every slot taken so far, doubled
            grown = self.step.initial_state(max(size, 2 * capacity))
            for old, new in zip(self.tensors, grown):
                new[:capacity] = old
            self.tensors = grown
        if fresh:
            index = torch.tensor(fresh)
            for t, init in zip(self.tensors, self.step.initial_state(len(fresh))):
                t[index] = init
        index = torch.tensor(slots)
        pads = self.step.initial_state(pad) if pad else [None] * len(self.tensors)
        return [t[index] if p is None else torch.cat([t[index], p]) for t, p in zip(self.tensors, pads)]

    def scatter(self, slots: list[int], state: list[torch.Tensor]) -> None:
        """Write the first len(slots) rows of a step's new state back to `slots`."""
        index = torch.tensor(slots)
        for t, new in zip(self.tensors, state):
            t[index] = new[: len(slots)].to(t.dtype)

    def rows(self, slot: int) -> list[torch.Tensor]:
        """The state of `slot` as views (1, ...) of the pool (tests reset them)."""
        return [t[slot:slot + 1] for t in self.tensors]


MAX_STEP_MS = 10_000.0  # a stream's longest step: a longer one is not live, and each step holds its frames


def step_problem(step_ms: float) -> str | None:
    """Why `step_ms` cannot be a stream's audio per step, or None."""
    if not 0 < step_ms <= MAX_STEP_MS:
        return f"a stream's step is more than 0 and at most {MAX_STEP_MS:g} ms of audio, got {step_ms:g}"
    return None


class Recognizer:
    """A streaming model shared by many streams (see the module doc). `chunk_ms`: audio per step (rounded up to whole
    output frames; a streaming conformer attends in chunks of those frames); an ONNX step brings its own chunk."""

    def __init__(self, comps: Any, step: Any = None, chunk_ms: float = 100.0) -> None:
        if step is None and (problem := step_problem(chunk_ms)):
            raise ValueError(problem)
        problem = streaming_problem(comps.model, comps.features.cfg, comps.model_name)
        if problem:
            raise StreamingRefused(problem)
        from ..export.stream_runtime import TorchStep

        self.comps, self.model = comps, comps.model.eval()
        stride, hop_s = self.model.stream_stride, comps.features.hop_length / comps.features.cfg.sample_rate
        if step is None:
            step = TorchStep(self.model, stride * max(1, math.ceil(chunk_ms / 1000 / hop_s / stride)))
        self.step, self.chunk = step, step.chunk
        self.frame_s = hop_s * stride
        self.pool = StatePool(step)

    @property
    def chunk_s(self) -> float:
        """Seconds of audio per step."""
        return self.chunk * self.frame_s / self.model.stream_stride

    def create_stream(self, sample_rate: int | None = None, endpoint_frames: int = 30, search: Any = None) -> Stream:
        """A new stream of mono audio at `sample_rate` (default: the model's); `search`: a beam search of its own
        (decoding.decoders), greedy when None."""
        stream = Stream(FrontEnd(self.comps.features, sample_rate),
                        PhraseDecoder(self.comps.tokenizer, self.frame_s, endpoint_frames, search),
                        self.pool.take(), torch.zeros(self.model.num_features, 0), self._out_length)
        weakref.finalize(stream, self.pool.give, stream.slot)  # its row is free once nothing holds the stream
        return stream

    def _out_length(self, frames: int) -> int:
        return int(self.model.output_lengths(torch.tensor([frames]))[0])

    def ready(self, stream: Stream) -> bool:
        """Whether `stream` has a chunk to step: a full one, or (closed) any frame still to decide."""
        if stream.closed:
            return stream.emitted < stream.expected
        return stream.pending.shape[1] >= self.chunk + self.step.lookahead

    def decode_streams(self, streams: list[Stream]) -> None:
        """Step every ready stream of `streams`, batched, until none is ready; the decided logits wait in each
        stream for its `events()`."""
        streams = list(dict.fromkeys(streams))
        cut = [s for s in streams if s.cuts]
        if cut:
            raws = spectra(self.comps.features, [c for s in cut for c in s.cuts])  # one STFT for every stream
            for s in cut:
                s.pending = torch.cat([s.pending, s.front.normalize(torch.cat(raws[: len(s.cuts)], dim=1))], dim=1)
                raws, s.cuts = raws[len(s.cuts):], []
        while batch := [s for s in streams if self.ready(s)]:
            self._step(batch)

    def _step(self, batch: list[Stream]) -> None:
        n, chunk = len(batch), self.chunk
        rows = 1 << (n - 1).bit_length() if self.step.pad_batch else n  # a few fixed shapes for onnxruntime
        feats = torch.zeros(rows, self.model.num_features, chunk + self.step.lookahead)
        frames_in = torch.zeros(rows, dtype=torch.long)
        total = torch.zeros(rows, dtype=torch.long)  # padding rows: nothing to decide
        for i, s in enumerate(batch):
            take = s.pending[:, :feats.shape[-1]]  # zeros after a closed stream's last frame: the offline padding
            feats[i, :, : take.shape[1]] = take
            s.pending = s.pending[:, chunk:]
            frames_in[i], total[i] = s.fed, s.total
        slots = [s.slot for s in batch]
        state = self.pool.gather(slots, rows - n)
        logits, ok, state = self.step(feats, frames_in, total, state)  # (R, chunk / stride, V), (R, chunk / stride)
        self.pool.scatter(slots, state)
        for i, s in enumerate(batch):
            s.fed += chunk
            mine = logits[i][ok[i]]
            if len(mine):
                s.decided.append(mine)
                s.emitted += len(mine)
