"""Streaming transcription: audio in chunks of any size at any rate, text for every frame the model can decide.

    session = StreamingSession(load_components("ckpt.pt"), sample_rate=44100)
    for chunk in chunks:                     # float32 mono samples, any length
        for event in session.accept(chunk):  # {"type": "partial"|"final", "text", ...}
            ...
    events = session.finish()                # the rest, and the last phrase as a final

A streaming-capable model (DeepSpeech2 with unidirectional RNNs and its lookahead) runs incrementally, every
piece of state carried between chunks: the resampler's, the samples that the next STFT frames overlap (and the
reflection at the stream's start), each convolution's left context and the frames its kernel still waits for,
every RNN layer's hidden state, and the lookahead's future frames. A frame is decided once everything it depends
on has arrived, so the stream's text equals the offline transcript of the whole file (tests/serving/
test_streaming.py: real files at several rates, chunks from 20 ms to 1 s and odd sizes). Greedy CTC.

Endpointing: a phrase ends (a `final` event with word times from the stream's start) after `endpoint_frames`
output frames of blank or space following some text; the next phrase starts. The finals' texts joined with
spaces are the transcript (except where the model emitted no space across such a pause; `text` is always it).

Models that need the whole utterance (bidirectional RNNs, attention, features normalized over the utterance)
are refused with a one-line reason (`streaming_problem`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..decoding.greedy import BLANK
from ..export.stream_step import streaming_problem


class StreamingRefused(ValueError):
    """The model cannot stream (one line: why)."""


class StreamConv:
    """A convolution along the last (time) axis on frames as they arrive, as the offline layer computes it with
    `left` and `right` frames of zero padding: it keeps the input frames its next outputs read, and computes an
    output once its whole window has arrived (the right padding only once the stream is finished)."""

    def __init__(self, conv: nn.Conv1d | nn.Conv2d, left: int, right: int) -> None:
        self.conv, self.left, self.right = conv, left, right
        self.kernel, self.stride = conv.kernel_size[-1], conv.stride[-1]
        self.buf: torch.Tensor | None = None  # input frames [start, start + buf length)
        self.start, self.received, self.emitted, self.closed = -left, 0, 0, False

    def __call__(self, x: torch.Tensor | None, final: bool = False) -> torch.Tensor | None:
        """New input frames (1, C, [F,] n) -> the outputs they complete (1, C', [F',] m), or None."""
        if x is not None and x.shape[-1]:
            self.received += x.shape[-1]
            left = x.new_zeros(*x.shape[:-1], self.left) if self.buf is None else self.buf
            self.buf = torch.cat([left, x], dim=-1)
        if self.buf is None:
            return None
        if final and not self.closed:
            self.buf = torch.cat([self.buf, self.buf.new_zeros(*self.buf.shape[:-1], self.right)], dim=-1)
            self.closed = True
        end = self.received + (self.right if self.closed else 0)
        total = (end + self.left - self.kernel) // self.stride + 1  # outputs whose whole window is here
        if total <= self.emitted:
            return None
        lo = self.emitted * self.stride - self.left - self.start
        hi = (total - 1) * self.stride - self.left + self.kernel - self.start
        out = self._conv(self.buf[..., lo:hi])
        self.emitted = total
        drop = min(total * self.stride - self.left - self.start, self.buf.shape[-1])  # no later output reads them
        self.buf, self.start = self.buf[..., drop:], self.start + drop
        return out

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        if isinstance(c, nn.Conv2d):
            return nn.functional.conv2d(x, c.weight, c.bias, c.stride, (c.padding[0], 0), c.dilation, c.groups)
        return nn.functional.conv1d(x, c.weight, c.bias, c.stride, 0, c.dilation, c.groups)


class StreamFeatures:
    """Waveform samples at the model's rate -> feature frames, as FeatureExtractor computes them for the whole
    signal (torch.stft with center=True: reflected at both ends; pre-emphasis carried across chunks)."""

    def __init__(self, features: Any) -> None:
        self.fx = features
        self.hop, self.n_fft, self.pad = features.hop_length, features.n_fft, features.n_fft // 2
        self.wav = np.zeros(0, dtype=np.float32)  # samples [start, start + len)
        self.start, self.received, self.frames = 0, 0, 0
        self.head = np.zeros(0, dtype=np.float32)  # the first pad + 1 samples: the start's reflection
        self.last = None  # the previous raw sample (pre-emphasis)

    def __call__(self, samples: np.ndarray, final: bool = False) -> torch.Tensor | None:
        """New samples (n,) -> the feature frames they complete (F, m), or None."""
        a = self.fx.cfg.preemphasis
        if a > 0 and len(samples):
            prev = np.concatenate([[samples[0] if self.last is None else self.last], samples[:-1]]).astype(np.float32)
            self.last = samples[-1]
            samples = (samples - a * prev).astype(np.float32)
        self.wav = np.concatenate([self.wav, samples.astype(np.float32, copy=False)])
        self.received += len(samples)
        if len(self.head) <= self.pad:
            self.head = np.concatenate([self.head, samples[: self.pad + 1 - len(self.head)]])
        if self.received <= self.pad:  # the reflection at the start needs pad + 1 samples (as torch.stft does)
            return None
        if final:
            total = self.received // self.hop + 1
        else:  # frames whose window ends before the last sample received (no reflection at the end yet)
            total = max(0, (self.received + self.pad - self.n_fft) // self.hop + 1)
        if total <= self.frames:
            return None
        first = self.frames * self.hop - self.pad  # sample index of the first window's start
        last = (total - 1) * self.hop - self.pad + self.n_fft  # one past the last window's end
        idx = np.arange(first, last)
        idx = np.where(idx < 0, -idx, idx)  # the reflection at the start
        idx = np.where(idx >= self.received, 2 * (self.received - 1) - idx, idx)  # ... and at the end (final)
        seg = np.where(idx <= self.pad, self.head[np.minimum(idx, len(self.head) - 1)], 0.0)
        inside = idx >= self.start
        seg = np.where(inside, self.wav[np.clip(idx - self.start, 0, len(self.wav) - 1)], seg).astype(np.float32)
        spec = torch.stft(torch.from_numpy(seg), n_fft=self.n_fft, hop_length=self.hop, win_length=self.fx.win_length,
                          window=self.fx.window, center=False, return_complex=True)  # (F, total - frames)
        feats = self.fx.compress(spec.abs())
        self.frames = total
        keep_from = max(0, self.frames * self.hop - self.pad - self.start)  # later windows start at or after this
        if not final:
            keep_from = min(keep_from, max(0, self.received - self.pad - 1 - self.start))  # the end's reflection
        self.wav, self.start = self.wav[keep_from:], self.start + keep_from
        return feats


class StreamingSession:
    """One live stream through a streaming-capable model (see the module doc)."""

    def __init__(self, comps: Any, sample_rate: int | None = None, endpoint_frames: int = 30,
                 step: Any = None, decoder: Any = None) -> None:
        """`step`: run the model as a fixed-chunk step (export/stream_runtime.py's OnnxStep, an ONNX file through
        onnxruntime, or TorchStep) instead of layer by layer in PyTorch; the text is the same. `decoder`: a
        BeamDecoder of its own (decoding.decoders: beam, LM, lexicon) searched incrementally, each phrase as its
        own utterance (phrases end where the greedy path is quiet); greedy when None."""
        problem = streaming_problem(comps)
        if problem:
            raise StreamingRefused(problem)
        import soxr

        self.comps, self.model = comps, comps.model.eval()
        self.rate = comps.features.cfg.sample_rate
        self.in_rate = sample_rate or self.rate
        self.resampler = (soxr.ResampleStream(self.in_rate, self.rate, 1, dtype="float32", quality="HQ")
                          if self.in_rate != self.rate else None)
        self.features = StreamFeatures(comps.features)
        self.feeder = None
        if step is not None:
            from ..export.stream_runtime import StepFeeder

            self.feeder = StepFeeder(step, comps.model)
        m = self.model
        self.convs = [StreamConv(c, c.padding[1], c.padding[1]) for c in m.convs]
        self.hidden: list[torch.Tensor | None] = [None] * len(m.rnns)  # (1, 1, H) per layer
        self.cells: list[torch.Tensor | None] = [None] * len(m.rnns)   # LSTM layers' cell states
        self.look = StreamConv(m.lookahead.conv, 0, m.lookahead.context) if m.lookahead is not None else None
        stride = 1
        for c in m.convs:
            stride *= c.stride[1]
        self.frame_s = comps.features.hop_length / self.rate * stride  # seconds per output frame
        self.endpoint_frames = endpoint_frames
        self.beam, self.beam_text = decoder, ""  # the search and its current best text
        self.boundaries: list[int] = []  # output frames where phrases ended
        if decoder is not None:
            decoder.begin()
        self.space = comps.tokenizer.alphabet.index(" ") + 1 if " " in comps.tokenizer.alphabet else -1
        self.frame, self.prev, self.quiet = 0, BLANK, 0
        self.chars: list[tuple[str, int]] = []  # the current phrase: (character, output frame)
        self.finals: list[dict[str, Any]] = []
        self.pieces: list[str] = []  # the text of every phrase, raw
        self.done = False
        self.logits: list[torch.Tensor] | None = None  # set to [] to keep every output frame's logits (tests)

    @property
    def decided_s(self) -> float:
        """Seconds of audio whose output frames are decided (the stream's position minus the model's lookahead)."""
        return round(self.frame * self.frame_s, 3)

    @property
    def phrase(self) -> str:
        """The current (unfinished) phrase's text, as its partials show it."""
        return self._phrase()

    @property
    def text(self) -> str:
        """Everything decided so far, as the offline transcript writes it."""
        if self.beam is not None:
            return " ".join(x for x in [*(f["text"] for f in self.finals), self.beam_text] if x)
        return " ".join(("".join(self.pieces) + "".join(c for c, _ in self.chars)).split())

    @torch.no_grad()
    def accept(self, samples: np.ndarray) -> list[dict[str, Any]]:
        """Mono float samples at the stream's rate -> events: `final` for each phrase that ended, then a `partial`
        with the current phrase's text when it changed."""
        if self.done:
            raise ValueError("the stream is finished")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self.resampler is not None:
            samples = self.resampler.resample_chunk(samples, last=False)
        return self._run(self.features(samples), final=False)

    @torch.no_grad()
    def finish(self) -> list[dict[str, Any]]:
        """End of stream: the frames the last samples complete, and the last phrase as a final."""
        if self.done:
            return []
        tail = self.resampler.resample_chunk(np.zeros(0, np.float32), last=True) if self.resampler else np.zeros(0)
        events = self._run(self.features(tail.astype(np.float32), final=True), final=True)
        self.done = True
        last = self.beam.end() if self.beam is not None else None
        if self.chars or last:
            events.append(self._final(last))
        return events

    def _run(self, feats: torch.Tensor | None, final: bool) -> list[dict[str, Any]]:
        if self.feeder is not None:
            return self._emit(self.feeder(feats, final))
        m = self.model
        x = None if feats is None else feats[None, None]  # (F, n) -> (1, 1, F, n)
        for stream, norm in zip(self.convs, m.conv_norms):
            x = stream(x, final)
            if x is not None:
                x = m.act(norm(x, x.new_ones(1, x.shape[-1], dtype=torch.bool)))  # (1, C, F', n')
        if x is not None:
            b, c, f, t = x.shape
            x = x.reshape(b, c * f, t).transpose(1, 2)  # (1, T, C*F')
            for i, layer in enumerate(m.rnns):
                if layer.norm is not None:
                    x = layer.norm(x.transpose(1, 2), x.new_ones(1, t, dtype=torch.bool)).transpose(1, 2)
                params = [getattr(layer.rnn, n) for n in layer._weight_names]  # w_ih, w_hh, b_ih, b_hh
                h = self.hidden[i] if self.hidden[i] is not None else x.new_zeros(1, 1, layer.hidden)
                if layer.rnn_type == "gru":  # the op nn.GRU runs, with the carried state (one direction)
                    x, self.hidden[i] = torch.gru(x, h, params, True, 1, 0.0, False, False, True)
                else:
                    cell = self.cells[i] if self.cells[i] is not None else x.new_zeros(1, 1, layer.hidden)
                    x, self.hidden[i], self.cells[i] = torch.lstm(x, (h, cell), params, True, 1, 0.0, False, False,
                                                                  True)
        if self.look is not None:
            y = self.look(None if x is None else x.transpose(1, 2), final)  # (1, H, n)
            x = None if y is None else m.act(y.transpose(1, 2))
        if x is None:
            return []
        t = x.shape[1]
        x = m.fc_norm(x.transpose(1, 2), x.new_ones(1, t, dtype=torch.bool)).transpose(1, 2)
        return self._emit(m.fc(x)[0])  # (n, V)

    def _emit(self, logits: torch.Tensor | None) -> list[dict[str, Any]]:
        """Decided logits (n, V) -> events."""
        if logits is None:
            return []
        if self.logits is not None:
            self.logits.append(logits)
        log_probs = logits.float().log_softmax(-1) if self.beam is not None else None
        return self._decode(logits.argmax(-1).tolist(), log_probs)

    def _decode(self, best: list[int], log_probs: torch.Tensor | None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        before, fed = self._phrase(), 0
        for i, token in enumerate(best):
            if token != self.prev and token != BLANK:
                self.chars.append((self.comps.tokenizer.decode([token]), self.frame))
            self.prev = token
            quiet = token == BLANK or token == self.space
            self.quiet = self.quiet + 1 if quiet else 0
            self.frame += 1
            if self.quiet >= self.endpoint_frames and "".join(c for c, _ in self.chars).strip():
                text = None
                if self.beam is not None:  # the phrase's frames end its search; the next phrase starts a new one
                    self.beam.step(log_probs[fed:i + 1])
                    fed, text = i + 1, self.beam.end()
                    self.beam.begin()
                    self.beam_text = ""
                events.append(self._final(text))
                before = ""
        if self.beam is not None:
            self.beam.step(log_probs[fed:])
            self.beam_text = self.beam.best()
        if self._phrase() and self._phrase() != before:
            events.append({"type": "partial", "text": self._phrase()})
        return events

    def _phrase(self) -> str:
        """The current (unfinished) phrase's text."""
        if self.beam is not None:
            return self.beam_text
        return " ".join("".join(c for c, _ in self.chars).split())

    def _final(self, beam_text: str | None = None) -> dict[str, Any]:
        """The current phrase as a final event (greedy: words with start and end seconds from the stream's start;
        a beam's words carry no times: the search keeps no alignment)."""
        self.boundaries.append(self.frame)
        if self.beam is not None:
            self.chars, self.beam_text = [], ""
            event = {"type": "final", "text": beam_text or "", "words": [{"word": w} for w in (beam_text or "").split()]}
            self.finals.append(event)
            return event
        raw = "".join(c for c, _ in self.chars)
        words, cur = [], []
        for c, f in self.chars + [(" ", self.frame)]:
            if c == " ":
                if cur:
                    words.append({"word": "".join(x for x, _ in cur), "start": round(cur[0][1] * self.frame_s, 3),
                                  "end": round((cur[-1][1] + 1) * self.frame_s, 3)})
                cur = []
            else:
                cur.append((c, f))
        self.pieces.append(raw)
        self.chars = []
        event = {"type": "final", "text": " ".join(raw.split()), "words": words}
        self.finals.append(event)
        return event
