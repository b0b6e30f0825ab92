"""Streaming transcription of one stream: audio in chunks of any size at any rate, text for every frame the model
can decide (streaming.recognizer with a single stream; the service batches many).

    session = StreamingSession(load_components("ckpt.pt"), sample_rate=44100)
    for chunk in chunks:                     # float32 mono samples, any length
        for event in session.accept(chunk):  # Partial | Final (streaming.events)
            ...
    events = session.finish()                # the rest, and the last phrase as a Final

A streaming-capable model (models.streaming: DeepSpeech2 with unidirectional RNNs and its lookahead, the Conformer
with attention in chunks) runs a step per chunk of feature frames, every piece of state carried between chunks: the
resampler's, the samples that the next STFT frames overlap (and the reflection at the stream's start), each layer's
carried frames and recurrent state, the running normalization's sums. A frame is decided once everything it depends
on has arrived, so the stream's text equals the offline transcript of the whole file
(tests/serving/test_streaming.py: real files at several rates, chunks from 20 ms to 1 s and odd sizes). Endpointing
and decoding: streaming.phrases.

Models that need the whole utterance (bidirectional RNNs, attention over the utterance, features normalized over
the utterance) are refused with a one-line reason (StreamingRefused).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..data.audio import as_waveform, check_rate
from .events import Event
from .phrases import check_endpoint_frames
from .recognizer import Recognizer, Stream, StreamingRefused

__all__ = ["StreamingSession", "StreamingRefused"]


class StreamingSession:
    """One live stream through its own recognizer (see the module doc)."""

    def __init__(self, comps: Any, sample_rate: int | None = None, endpoint_frames: int = 30,
                 step: Any = None, decoder: Any = None, chunk_ms: float = 100.0) -> None:
        """`step`: the model's step as an ONNX file through onnxruntime (export.stream_runtime.OnnxStep) instead of
        PyTorch; the text is the same. `decoder`: a BeamDecoder of its own (decoding.decoders: beam, LM,
        lexicon) searched incrementally, each phrase as its own utterance; greedy when None. `chunk_ms`: audio
        per model step."""
        if sample_rate is not None:
            check_rate(sample_rate)
        check_endpoint_frames(endpoint_frames)
        self.recognizer = Recognizer(comps, step=step, chunk_ms=chunk_ms)
        self.stream: Stream = self.recognizer.create_stream(sample_rate, endpoint_frames, decoder)
        self.frame_s = self.recognizer.frame_s

    @property
    def decided_s(self) -> float:
        """Seconds of audio whose output frames are decided."""
        return self.stream.decided_s

    @property
    def phrase(self) -> str:
        """The current (unfinished) phrase's text, as its partials show it."""
        return self.stream.decoder.phrase

    @property
    def text(self) -> str:
        """Everything decided so far, as the offline transcript writes it."""
        return self.stream.text

    @property
    def boundaries(self) -> list[int]:
        """Output frames where phrases ended."""
        return self.stream.decoder.boundaries

    @property
    def logits(self) -> list[torch.Tensor] | None:
        """Every decided frame's logits, in chunks, once set to [] (tests)."""
        return self.stream.keep_logits

    @logits.setter
    def logits(self, value: list[torch.Tensor] | None) -> None:
        self.stream.keep_logits = value

    def accept(self, samples: np.ndarray) -> list[Event]:
        """Mono samples (an array or a tensor: floats, or 8/16/32-bit PCM) at the stream's rate -> a Final for each
        phrase that ended, then a Partial with the current phrase's text when it changed."""
        self.stream.push(as_waveform(samples))
        self.recognizer.decode_streams([self.stream])
        return self.stream.events()

    def finish(self) -> list[Event]:
        """End of stream: the frames the last samples complete, and the last phrase as a Final."""
        if self.stream.ended:
            return []
        self.stream.close()
        self.recognizer.decode_streams([self.stream])
        return self.stream.events()
