"""`WS /v1/stream`: live transcription over a WebSocket: one recognizer for the service (streaming.recognizer), a Stream
per connection, every stream's model steps batched by one worker (streaming.batcher).

The protocol, in order:
1. client: a text message `{"type": "start", "sample_rate": 16000, "encoding": "pcm16" | "float32"}`
   (optionally `"endpoint_frames": N`, `"partials": "changes" | "every"` and `"digits": true`: finals and the
   whole text with numbers written in digits, in the languages decoding.digits writes); server: `{"type": "ready", "model",
   "sample_rate"}`.
2. client: binary messages of mono samples (little-endian int16 or float32) at that rate, any size; server:
   `{"type": "partial", "text", "decided_s"}` as the phrase's text changes (with `"partials": "every"`: after
   every audio message, changed or not), `{"type": "final", "text", "words"}` as a phrase ends (each word's
   start and end in seconds from the stream's start, and its confidence). `decided_s`: the seconds of audio the
   text covers so far.
3. client: `{"type": "end"}`; server: the rest of the events, `{"type": "end", "text"}` (the whole transcript),
   and a normal close (1000).

Limits, as the HTTP side has them: the Host (and an Origin, when sent) must be on the allow-list (else the
handshake is refused, 403); at most `max_streams` at once (more are closed with 1013, try again later); a stream
longer than `stream_max_seconds` of audio, idle for `stream_idle_s` (neither sending nor reading), or sending more
than MESSAGES_PER_S audio messages a second of audio (past the first FREE_MESSAGES) is closed (1008); a message over
`stream_max_frame_bytes` is closed (1009) while it is read, and none is compressed; a model that cannot stream, a
malformed or out-of-order message is closed with 1003 or 1007 and a reason in words, never internals; while the
service drains (service/drain.py) a new stream is closed with 1001 and an open one, once told to close, gets the
finals of the audio it sent, the end message and 1001. The connection's own limits (protocol errors 1002, a client
that does not read 1008) are service/transport.py's. Each stream's model work runs in a thread and the server
reads the next message only after answering the last, so a client that sends faster than the model runs, or reads
slower, is throttled by its own connection instead of growing the server's memory. A connection's front end (the
resampler and cutting its samples into windows) and the model's steps run in the batcher's thread (one STFT and one
batched step for every stream of a round); a beam search decodes in a thread of the connection's own.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from ..config import parse_json
from ..data.audio import MAX_RATE, MIN_RATE
from ..decoding.digits import check_written_digits, write_digits
from ..streaming.batcher import StreamBatcher
from ..streaming.events import Event, Final, Partial
from ..streaming.opener import StreamModel
from ..streaming.phrases import MAX_ENDPOINT_FRAMES
from ..streaming.recognizer import Stream, StreamingRefused
from .origins import host_allowed, origin_allowed

log = logging.getLogger(__name__)
ENCODINGS = {"pcm16": ("<i2", 32768.0), "float32": ("<f4", 1.0)}


class Closed(Exception):
    """Close the stream with this code and reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def add_stream_route(app: FastAPI, streams: StreamModel, limits: Any, hosts: list[str], state: Any,
                     decoder: Any = "greedy") -> None:
    """Register `WS /v1/stream` on `app` for `streams` (streaming.opener: the checkpoint's model in PyTorch, or an ONNX
    streaming step) under `limits` (service.server.Limits), counting open streams in `state`
    (service.drain.ServiceState); `decoder` (the service's DecoderConfig or name): a beam or lexicon search is built
    for each stream."""
    comps = streams.comps
    try:
        batcher: StreamBatcher | None = StreamBatcher(streams.recognizer())
        refused = ""
    except StreamingRefused as e:
        batcher, refused = None, str(e)
    app.state.stream_batcher = batcher

    @app.websocket("/v1/stream")
    async def stream(ws: WebSocket) -> None:
        if not (host_allowed(hosts, ws.headers.get("host")) and origin_allowed(hosts, ws.headers.get("origin"))):
            await ws.close(code=1008)  # before accept: the handshake is refused (HTTP 403)
            return
        await ws.accept()
        if state.draining:
            await _close(ws, 1001, "the server is shutting down; reconnect to another")
            return
        if state.streams >= limits.max_streams:
            await _close(ws, 1013, f"busy: {limits.max_streams} streams are open; try again later")
            return
        state.streams += 1
        try:
            await _serve(ws, comps, limits, decoder, state.closing, batcher, refused)
        except Closed as e:
            await _close(ws, e.code, e.reason)
        except WebSocketDisconnect:
            pass
        except Exception as e:  # a fault of the server's, not of the input (that is Closed): one line in the log
            log.error("a stream failed: %s: %s", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            await _close(ws, 1011, "the stream failed on the server; see its log")
        finally:
            state.streams -= 1


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    try:
        await ws.close(code=code, reason=reason[:120])
    except (RuntimeError, WebSocketDisconnect):  # already closed by the client
        pass


class Draining(Exception):
    """The server is shutting down: finish this stream now."""


async def _receive(ws: WebSocket, limits: Any, closing: asyncio.Future | None = None,
                   first: bool = False) -> dict[str, Any]:
    """The next message; Closed(1008) past the idle limit (for the `first` message, the start, the header
    timeout when shorter), Draining once `closing` (the stream's waiter on the drain) is done."""
    wait = min(limits.stream_idle_s, limits.header_timeout_s) if first else limits.stream_idle_s
    receive = asyncio.ensure_future(ws.receive())
    done, _ = await asyncio.wait({receive} if closing is None else {receive, closing}, timeout=wait,
                                 return_when=asyncio.FIRST_COMPLETED)
    if receive not in done:
        receive.cancel()
        if closing is not None and closing.done():
            raise Draining
        raise Closed(1008, f"no start message within {wait:g} s" if first else f"idle for {wait:g} s")
    message = receive.result()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    size = len(message.get("bytes") or b"") + len(message.get("text") or "")
    if size > limits.stream_max_frame_bytes:
        raise Closed(1009, f"a message of {size} bytes is over the limit of {limits.stream_max_frame_bytes}")
    return message


# A stream's audio messages are bounded by the audio they carry: each waits for a batch round of its own, so a
# client sending one sample a message would hold the server for minutes of work per second of audio.
FREE_MESSAGES = 50
MESSAGES_PER_S = 200


def _json(text: str | None, what: str) -> Any:
    """A text message's JSON, or Closed(1007): not JSON, or nested too deeply to parse."""
    try:
        return parse_json(text or "")
    except ValueError:
        raise Closed(1007, f"{what} is not JSON (or nested too deeply)") from None


def _integer(value: Any) -> bool:
    return type(value) is int  # a JSON true/false is no number here


def _start(message: dict[str, Any], refused: str, language: str) -> tuple[int, str, int, bool, bool]:
    """(sample rate, encoding, endpoint frames, a partial after every audio message, numbers in digits) of a start
    message for a model whose numbers are said in `language`; Closed otherwise."""
    if message.get("text") is None:
        raise Closed(1003, "the first message must be the JSON start message, not audio")
    start = _json(message["text"], "the start message")
    if not isinstance(start, dict) or start.get("type") != "start":
        raise Closed(1007, 'the first message must be {"type": "start", "sample_rate": ..., "encoding": ...}')
    rate, encoding, endpoint = start.get("sample_rate"), start.get("encoding", "pcm16"), start.get("endpoint_frames", 30)
    if not _integer(rate) or not MIN_RATE <= rate <= MAX_RATE:
        raise Closed(1007, f"sample_rate must be an integer from {MIN_RATE} to {MAX_RATE}")
    if not isinstance(encoding, str) or encoding not in ENCODINGS:
        raise Closed(1007, f"encoding must be one of {', '.join(ENCODINGS)}")
    if not _integer(endpoint) or not 1 <= endpoint <= MAX_ENDPOINT_FRAMES:
        raise Closed(1007, f"endpoint_frames must be an integer from 1 to {MAX_ENDPOINT_FRAMES}")
    if not isinstance(start.get("partials", "changes"), str) or start.get("partials", "changes") not in ("changes", "every"):
        raise Closed(1007, 'partials must be "changes" or "every"')
    digits = start.get("digits", False)
    if not isinstance(digits, bool):
        raise Closed(1007, "digits must be true or false")
    if refused:
        raise Closed(1003, f"this model cannot stream: {refused}")
    if digits:
        try:
            check_written_digits(language)
        except ValueError as e:
            raise Closed(1007, str(e)) from None
    return rate, encoding, endpoint, start.get("partials") == "every", digits


async def _serve(ws: WebSocket, comps: Any, limits: Any, decoder: Any, closing: asyncio.Event,
                 batcher: StreamBatcher | None, refused: str) -> None:
    rate, encoding, endpoint, every, digits = _start(await _receive(ws, limits, first=True), refused,
                                                     comps.normalizer.digits_language)
    if batcher is None:  # _start refused the stream already; this keeps the type narrow
        raise Closed(1003, f"this model cannot stream: {refused}")
    search = None
    if getattr(decoder, "name", decoder) != "greedy":
        from ..decoding.decoders import build_decoder

        search = await asyncio.to_thread(build_decoder, decoder, comps.tokenizer, comps.normalizer)
    stream = batcher.recognizer.create_stream(rate, endpoint, search)
    stream.digits = comps.normalizer.digits_language if digits else ""
    with batcher.open_stream():
        await _run(ws, limits, closing, batcher, stream, rate, encoding, every)


async def _run(ws: WebSocket, limits: Any, closing: asyncio.Event, batcher: StreamBatcher, stream: Stream,
               rate: int, encoding: str, every: bool) -> None:
    """The started stream: `ready`, then audio and events until its end."""
    await ws.send_json({"type": "ready", "model": batcher.recognizer.comps.model_name, "sample_rate": rate})
    dtype, scale = ENCODINGS[encoding]
    width = np.dtype(dtype).itemsize
    seconds, messages = 0.0, 0
    drained = asyncio.ensure_future(closing.wait())  # one waiter for the stream's life, not one per message
    try:
        while True:
            try:
                message = await _receive(ws, limits, drained)
            except Draining:
                await _finish(ws, batcher, stream, 1001, "the server is shutting down; this is all the audio it took")
                return
            if message.get("bytes") is not None:
                data = message["bytes"]
                if len(data) % width:
                    raise Closed(1007, f"{encoding} audio must come in whole samples of {width} bytes")
                samples = np.frombuffer(data, dtype=dtype).astype(np.float32) / scale
                if not np.isfinite(samples).all():
                    raise Closed(1007, "the audio holds non-finite samples")
                seconds += len(samples) / rate
                messages += 1
                if seconds > limits.stream_max_seconds:
                    raise Closed(1008, f"the stream is over the limit of {limits.stream_max_seconds:g} s of audio")
                if messages > FREE_MESSAGES + MESSAGES_PER_S * seconds:  # each message costs a batch round
                    raise Closed(1008, f"more than {MESSAGES_PER_S} audio messages a second of audio; send larger "
                                       "blocks (20-100 ms each)")
                events = await _decode(batcher, stream, samples)
                if every and not (events and isinstance(events[-1], Partial)):
                    events.append(Partial(stream.decoder.phrase))
            else:
                control = _json(message.get("text"), "a text message")
                if not isinstance(control, dict) or control.get("type") != "end":
                    raise Closed(1003, 'after the start message: audio, then {"type": "end"}')
                await _finish(ws, batcher, stream, 1000, "")
                return
            await _send(ws, stream, events)
    finally:
        drained.cancel()


async def _decode(batcher: StreamBatcher, stream: Stream, samples: Any = None, close: bool = False) -> list[Event]:
    """Push the samples (or the end), step the stream's ready chunks (batched with the other streams waiting) and
    decode what they decided."""
    await batcher.decode(stream, samples, close)
    return await asyncio.to_thread(stream.events) if stream.decoder.beam is not None else stream.events()


async def _finish(ws: WebSocket, batcher: StreamBatcher, stream: Stream, code: int, reason: str) -> None:
    """The stream's last finals, the end message with the whole transcript and a close with `code`."""
    await _send(ws, stream, await _decode(batcher, stream, close=True))
    await ws.send_json({"type": "end", "text": write_digits(stream.text, stream.digits) if stream.digits else stream.text})
    await ws.close(code=code, reason=reason)


async def _send(ws: WebSocket, stream: Stream, events: list[Event]) -> None:
    """The stream's events as JSON messages, each partial with the audio it covers (`decided_s`)."""
    for event in events:
        message = (event.in_digits(stream.digits) if stream.digits and isinstance(event, Final) else event).to_dict()
        await ws.send_json({**message, "decided_s": stream.decided_s} if isinstance(event, Partial) else message)
