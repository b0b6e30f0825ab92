"""One model, many live streams: each stream owns a small typed state; the recognizer runs every stream that has a
chunk of feature frames ready as one batch through the model's streaming step (models.streaming).

    rec = Recognizer(comps)                                 # or Recognizer(comps, step=OnnxStep("step.onnx"))
    a, b = rec.create_stream(sample_rate=8000), rec.create_stream(sample_rate=44100)
    a.push(samples_a); b.push(samples_b)                    # audio in: the stream's own front end (any thread)
    rec.decode_streams([a, b])                              # one batched step per round of ready chunks
    events = a.events() + b.events()                        # Partial / Final (serving.events)
    b.close(); rec.decode_streams([b]); events = b.events() # the end: every remaining frame, the last Final

A stream's text does not depend on which streams share its batches: a row of the step reads only its own state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..models.streaming import UNKNOWN, streaming_problem
from .events import Event
from .phrases import PhraseDecoder
from .stream_features import FrontEnd


class StreamingRefused(ValueError):
    """The model cannot stream (one line: why)."""


@dataclass(eq=False)  # compared (and hashed) by identity: each is one live stream
class Stream:
    """One live stream's state: its front end, the frames not yet stepped, its rows of the model's state, its
    decoding. Created by Recognizer.create_stream."""

    front: FrontEnd
    decoder: PhraseDecoder
    state: list[torch.Tensor]             # the model's state, one row (1, ...) each
    pending: torch.Tensor                 # (F, n) feature frames not yet stepped
    frame_s: float                        # seconds per output frame
    out_length: Callable[[int], int]      # output frames for a stream of so many feature frames
    fed: int = 0                          # feature frames stepped
    received: int = 0                     # feature frames from the front end
    total: int = UNKNOWN                  # the stream's feature frames, once closed
    expected: int | None = None           # its output frames, once closed
    emitted: int = 0                      # decided output frames so far
    closed: bool = False
    ended: bool = False                   # the last Final is out
    decided: list[torch.Tensor] = field(default_factory=list)  # logits (n, V) stepped but not yet decoded
    keep_logits: list[torch.Tensor] | None = None  # every decided frame's logits, when set to [] (tests)

    def push(self, samples: Any) -> None:
        """Mono float samples at the stream's rate (any number): their feature frames wait for the next step."""
        if self.closed:
            raise ValueError("the stream is finished")
        self._add(self.front(samples))

    def close(self) -> None:
        """The end of the stream's audio: its last frames, and its length, which the step needs to finish."""
        if not self.closed:
            self._add(self.front.finish())
            self.closed, self.total = True, self.received
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
        return out

    @property
    def done(self) -> bool:
        """Closed, and every output frame decided."""
        return self.expected is not None and self.emitted >= self.expected and not self.decided

    @property
    def decided_s(self) -> float:
        """Seconds of audio whose output frames are decided."""
        return round(self.emitted * self.frame_s, 3)

    @property
    def text(self) -> str:
        return self.decoder.text

    def _add(self, frames: torch.Tensor | None) -> None:
        if frames is not None and frames.shape[-1]:
            self.pending = torch.cat([self.pending, frames.float()], dim=1)
            self.received += frames.shape[-1]


class Recognizer:
    """A streaming model shared by many streams (see the module doc). `chunk_ms`: audio per step (rounded up to whole
    output frames); an ONNX step brings its own chunk."""

    def __init__(self, comps: Any, step: Any = None, chunk_ms: float = 100.0) -> None:
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

    @property
    def chunk_s(self) -> float:
        """Seconds of audio per step."""
        return self.chunk * self.frame_s / self.model.stream_stride

    def create_stream(self, sample_rate: int | None = None, endpoint_frames: int = 30, search: Any = None) -> Stream:
        """A new stream of mono audio at `sample_rate` (default: the model's); `search`: a beam search of its own
        (decoding.decoders), greedy when None."""
        return Stream(FrontEnd(self.comps.features, sample_rate),
                      PhraseDecoder(self.comps.tokenizer, self.frame_s, endpoint_frames, search),
                      self.step.initial_state(1), torch.zeros(self.model.num_features, 0), self.frame_s,
                      self._out_length)

    def _out_length(self, frames: int) -> int:
        return int(self.model.output_lengths(torch.tensor([frames]))[0])

    def ready(self, stream: Stream) -> bool:
        """Whether `stream` has a chunk to step: a full one, or (closed) any frame still to decide."""
        if stream.closed:
            return stream.emitted < stream.expected
        return stream.pending.shape[1] >= self.chunk

    def decode_streams(self, streams: list[Stream]) -> None:
        """Step every ready stream of `streams`, batched, until none is ready; the decided logits wait in each
        stream for its `events()`."""
        while batch := [s for s in dict.fromkeys(streams) if self.ready(s)]:
            self._step(batch)

    def _step(self, batch: list[Stream]) -> None:
        n, chunk = len(batch), self.chunk
        rows = 1 << (n - 1).bit_length() if self.step.pad_batch else n  # a few fixed shapes for onnxruntime
        feats = torch.zeros(rows, self.model.num_features, chunk)
        frames_in = torch.zeros(rows, dtype=torch.long)
        total = torch.zeros(rows, dtype=torch.long)  # padding rows: nothing to decide
        for i, s in enumerate(batch):
            take = s.pending[:, :chunk]  # zeros after a closed stream's last frame: the offline padding
            feats[i, :, : take.shape[1]] = take
            s.pending = s.pending[:, chunk:]
            frames_in[i], total[i] = s.fed, s.total
        pad = self.step.initial_state(rows - n) if rows > n else []
        state = [torch.cat([*(s.state[k] for s in batch), *pad[k:k + 1]]) for k in range(len(batch[0].state))]
        logits, ok, state = self.step(feats, frames_in, total, state)  # (R, chunk / stride, V), (R, chunk / stride)
        for i, s in enumerate(batch):
            s.state = [x[i:i + 1].clone() for x in state]  # its own rows, not a view holding the whole batch
            s.fed += chunk
            mine = logits[i][ok[i]]
            if len(mine):
                s.decided.append(mine)
                s.emitted += len(mine)
