"""`speechscale serve`: a transcription service (FastAPI + uvicorn) with a web page.

    speechscale serve --checkpoint runs/demo/checkpoints/best.pt --port 8000

- `POST /v1/transcribe`: a multipart upload (field `file`) or the raw audio bytes as the body -> JSON
  {text, duration, words: [{word, start, end, confidence}]}; with `?format=srt` or `vtt`, subtitles instead;
  `?digits=true` writes numbers in digits (decoding/digits.py; the languages it writes, else 422).
- `POST /v1/align`: a multipart upload of `file` and its transcript `text` -> the transcript's words timed on it
  (inference/align.py), the same JSON or subtitles; one alignment runs at a time, `max_queue` may wait, a text longer
  than ALIGN_CHARS_PER_SECOND a second of audio is 413 and one that cannot be aligned 422 with the reason.
- `GET /healthz` -> {status, model, ..., aligning (alignments in flight or waiting); with a streaming model,
  stream_rounds and stream_rows: the batched steps of live streams and the streams they held} (503 when the model's
  batcher has stopped); `GET /` -> the page.
- `WS /v1/stream`: live transcription with a streaming model (service/websocket.py has the protocol).

Requests that arrive together are transcribed as one padded batch (up to `max_batch`, waiting at most
`batch_ms` for company). Hostile input is refused before it costs memory or model time:
- the body: over `max_bytes` (declared or streamed) 413; not complete within `body_timeout_s` 408;
- the audio: its header is read first (rate outside 4-384 kHz or more than 8 channels 415; longer than
  `max_seconds` 413), then at most `max_seconds` of it is decoded, so a header that lies cannot get past;
  decoding runs in a bounded pool of `decode_workers` threads;
- the queue: more than `max_queue` requests waiting for the model 503 with Retry-After; no answer within
  `request_timeout_s` 504; uvicorn refuses connections past `max_connections` (503);
- the connection: headers not complete within `header_timeout_s` 408, and those still arriving do not count as
  connections (service/transport.py);
- the origin: a Host header outside the allow-list 400 (DNS rebinding), a cross-origin POST 403;
  `/docs` only with `docs=True`.
Answers name the problem in words; the details (decoder messages, stack traces) go to the log only. One
request whose audio fails in the model fails alone. No client-supplied path is ever read, only the bytes.
A stop signal drains the service first (service/drain.py).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException, Request  # the `serve` extra (module-level: FastAPI reads annotations)
from fastapi.responses import HTMLResponse, JSONResponse, Response

from .._compat import set_request_body
from ..data import media
from ..data.audio import AudioError, AudioTooLong, decode_audio
from ..decoding.digits import check_written_digits, written
from ..inference.align import AlignError, align_waveform
from ..inference.subtitles import make_cues, render
from ..inference.transcribe import Transcriber
from ..streaming.opener import StreamModel, open_streams
from .drain import ServiceState
from .origins import allowed_hosts, host_allowed, host_name, origin_allowed
from .websocket import add_stream_route

log = logging.getLogger(__name__)
SUBTITLES = {"srt": "application/x-subrip; charset=utf-8", "vtt": "text/vtt; charset=utf-8"}  # ?format= answers
ALIGN_CHARS_PER_SECOND = 50  # /v1/align: a text past this many characters a second of audio (and 100) is refused
PAGE = Path(__file__).with_name("page.html")


@dataclass
class Limits:
    max_bytes: int = 20 * 1024 * 1024   # request body
    max_seconds: float = 60.0           # decoded audio
    max_batch: int = 16                 # requests per model call
    batch_ms: float = 10.0              # how long the first request of a batch waits for others
    max_queue: int = 64                 # requests waiting for the model; more are refused (503)
    request_timeout_s: float = 60.0     # from the audio being decoded to its answer (504 past it)
    body_timeout_s: float = 10.0        # the whole body must arrive within this (408 past it)
    max_connections: int = 128          # open connections and requests in flight (uvicorn; 503 past it)
    decode_workers: int = 4             # threads that decode audio
    allowed_hosts: list[str] = field(default_factory=list)  # Host names besides the bound address and loopback
    docs: bool = False                  # serve the OpenAPI page at /docs
    max_streams: int = 64               # WS /v1/stream: open streams; more are closed (1013)
    stream_max_seconds: float = 3600.0  # audio per stream (1008 past it)
    stream_idle_s: float = 30.0         # a stream that sends nothing this long is closed (1008)
    stream_max_frame_bytes: int = 1 << 20  # one message (1009 past it, while it is read)
    stream_send_timeout_s: float = 10.0  # a stream whose client reads nothing this long is closed (1008)
    stream_step_ms: float = 100.0       # audio per model step, rounded up to whole output frames
    header_timeout_s: float = 10.0      # a request's line and headers must arrive within this (408 past it)
    max_pending: int = 256              # connections still sending their headers; past it the oldest is closed
    drain_timeout_s: float = 20.0       # SIGTERM: open streams may go on this long before the server ends them


class Batcher:
    """Collects waveforms from concurrent requests and transcribes them together in a worker thread."""

    def __init__(self, asr: Transcriber, limits: Limits) -> None:
        self.asr, self.limits = asr, limits
        self.queue: asyncio.Queue[tuple[np.ndarray, asyncio.Future]] = asyncio.Queue(maxsize=limits.max_queue)
        self.batches = 0
        self.task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            items = [await self.queue.get()]
            deadline = loop.time() + self.limits.batch_ms / 1000
            while len(items) < self.limits.max_batch:
                try:
                    items.append(await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time())))
                except asyncio.TimeoutError:
                    break
            items = [(w, f) for w, f in items if not f.done()]  # their clients gave up (timed out) meanwhile
            if items:
                await self._answer(items)

    async def _answer(self, items: list[tuple[np.ndarray, asyncio.Future]]) -> None:
        try:
            results = await asyncio.to_thread(self.asr.transcribe_batch, [w for w, _ in items])
        except Exception:  # one bad item must not fail the others: each alone, so only it fails
            log.exception("a batch of %d failed; transcribing its requests one by one", len(items))
            for w, fut in items:
                try:
                    (res,) = await asyncio.to_thread(self.asr.transcribe_batch, [w])
                except Exception as e:
                    log.exception("transcription failed")
                    _settle(fut, error=e)
                else:
                    _settle(fut, res)
        else:
            for (_, fut), res in zip(items, results):
                _settle(fut, res)
        self.batches += 1

    async def transcribe(self, wav: np.ndarray) -> dict[str, Any]:
        if not self.alive:
            raise HTTPException(503, "the model is not running; see the server's log")
        fut = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait((wav, fut))
        except asyncio.QueueFull:
            raise HTTPException(503, f"busy: {self.limits.max_queue} requests are waiting; retry shortly",
                                headers={"Retry-After": "1"}) from None
        try:
            return await asyncio.wait_for(fut, self.limits.request_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(504, f"no answer within {self.limits.request_timeout_s:g} s; retry later") from None
        except Exception:
            raise HTTPException(500, "transcription failed for this audio; see the server's log") from None


def _settle(fut: asyncio.Future, result: Any = None, error: Exception | None = None) -> None:
    if not fut.done():
        fut.set_exception(error) if error is not None else fut.set_result(result)


def create_app(asr: Transcriber, limits: Limits | None = None, host: str = "127.0.0.1",
               stream_model: StreamModel | None = None) -> Any:
    """The FastAPI application around a loaded Transcriber."""
    limits = limits or Limits()
    batcher = Batcher(asr, limits)
    decoders = concurrent.futures.ThreadPoolExecutor(limits.decode_workers, thread_name_prefix="decode")
    accepted = "wav, flac, ogg, mp3, m4a, mp4, webm or aac" if media.available() else "wav, flac, ogg or mp3"
    aligner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="align")  # one alignment at a time
    aligning = {"waiting": 0}  # alignments in flight or queued
    hosts = allowed_hosts(host, limits.allowed_hosts)
    state = ServiceState()

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        batcher.task = asyncio.create_task(batcher.run())
        yield
        batcher.task.cancel()
        decoders.shutdown(wait=False, cancel_futures=True)
        aligner.shutdown(wait=False, cancel_futures=True)
        if app.state.stream_batcher is not None:
            await asyncio.to_thread(app.state.stream_batcher.close)

    docs = {} if limits.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="speechscale", lifespan=lifespan, **docs)
    app.state.batcher, app.state.service = batcher, state

    @app.middleware("http")
    async def check_host(request: Request, call_next: Any) -> Any:
        """A Host outside the allow-list is 400: a DNS-rebinding page must not reach this service."""
        if not host_allowed(hosts, request.headers.get("host")):
            name = host_name(request.headers.get("host") or "")
            return JSONResponse({"detail": f"Host {name!r} is not served here; start the server with "
                                           f"--allowed-host {name or 'NAME'} to allow it"}, status_code=400)
        return await call_next(request)

    streams = stream_model or open_streams(asr.comps, step_ms=limits.stream_step_ms)
    add_stream_route(app, streams, limits, hosts, state, asr.decoder_cfg)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    @app.get("/healthz")
    async def healthz() -> Any:
        word = "stopped" if not batcher.alive else "draining" if state.draining else "ok"
        status = {"status": word, "model": asr.comps.model_name, "sample_rate": asr.sample_rate,
                  "batches": batcher.batches, "waiting": batcher.queue.qsize(), "streams": state.streams,
                  "aligning": aligning["waiting"]}
        if app.state.stream_batcher is not None:  # the streams' model steps: rounds run, and rows they held
            status.update(stream_rounds=app.state.stream_batcher.rounds, stream_rows=app.state.stream_batcher.rows)
        return JSONResponse(status, status_code=200 if word == "ok" else 503)

    async def intake(request: Request, fields: tuple[str, ...] = ()) -> tuple[np.ndarray, dict[str, str]]:
        """A request's audio, decoded to the model's rate (a multipart `file` field or the whole body), and its text
        `fields` (multipart only; each required), after every check that comes before the model (module doc)."""
        if state.draining:
            raise HTTPException(503, "the server is shutting down; retry on another", headers={"Connection": "close"})
        if not origin_allowed(hosts, request.headers.get("origin")):
            raise HTTPException(403, "cross-origin requests are refused; serve the page from this server or "
                                     "add its host with --allowed-host")
        declared = request.headers.get("content-length") or "0"
        if not declared.isdigit():
            raise HTTPException(400, "Content-Length is not a number")
        if int(declared) > limits.max_bytes:
            raise HTTPException(413, f"request of {declared} bytes is over the limit of {limits.max_bytes}")
        try:
            body = await asyncio.wait_for(_read_limited(request, limits.max_bytes), limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(408, f"the request body did not arrive within {limits.body_timeout_s:g} s") from None
        data, name, texts = body, "request body", {}
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            set_request_body(request, body)  # Starlette's form parser reads it from there
            form = await request.form()
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise HTTPException(422, "multipart upload without a `file` field")
            for key in fields:
                values = form.getlist(key)
                if len(values) != 1 or not isinstance(values[0], str):
                    raise HTTPException(422, f"a multipart upload needs one `{key}` field (text), not {len(values)}")
                texts[key] = values[0]
            data, name = await upload.read(), "uploaded file"  # its client-side filename is never used as a path
            await form.close()
        elif fields:
            raise HTTPException(422, f"send a multipart form with the fields file and {', '.join(fields)}")
        del body
        if not data:
            raise HTTPException(422, "empty audio: the request carried no bytes")
        loop = asyncio.get_running_loop()
        try:
            wav = await loop.run_in_executor(decoders, decode_audio, data, name, asr.sample_rate, limits.max_seconds)
        except AudioTooLong as e:
            raise HTTPException(413, f"audio of {e.seconds:.1f} s is over the limit of {limits.max_seconds:g} s") from None
        except AudioError as e:
            log.info("refused an upload: %s", e)
            raise HTTPException(415, f"unsupported or corrupt audio: it could not be decoded (send {accepted} at "
                                     "4-384 kHz with at most 8 channels)") from None
        return wav, texts

    @app.post("/v1/transcribe", response_model=None)
    async def transcribe(request: Request) -> dict[str, Any] | Response:
        fmt = _format(request)
        digits = _digits(request, asr.comps.normalizer.digits_language)
        wav, _ = await intake(request)
        result = await batcher.transcribe(wav)
        return _respond(written(result, asr.comps.normalizer.digits_language) if digits else result, fmt)

    @app.post("/v1/align", response_model=None)
    async def align(request: Request) -> dict[str, Any] | Response:
        fmt = _format(request)
        wav, texts = await intake(request, ("text",))
        text = texts["text"]
        most = int(ALIGN_CHARS_PER_SECOND * wav.shape[0] / asr.sample_rate) + 100
        if len(text) > most:
            raise HTTPException(413, f"a text of {len(text)} characters for {wav.shape[0] / asr.sample_rate:.1f} s of "
                                     f"audio: at most {most}")
        if aligning["waiting"] >= limits.max_queue:
            raise HTTPException(503, f"busy: {limits.max_queue} alignments are waiting; retry shortly",
                                headers={"Retry-After": "1"})
        aligning["waiting"] += 1
        try:
            job = asyncio.get_running_loop().run_in_executor(aligner, align_waveform, asr, wav, text)
            result = await asyncio.wait_for(job, limits.request_timeout_s)
        except AlignError as e:
            raise HTTPException(422, str(e)) from None
        except asyncio.TimeoutError:
            raise HTTPException(504, f"no answer within {limits.request_timeout_s:g} s; retry later") from None
        except Exception:
            log.exception("alignment failed")
            raise HTTPException(500, "alignment failed for this audio; see the server's log") from None
        finally:
            aligning["waiting"] -= 1
        return _respond(result, fmt)

    return app


def _format(request: Request) -> str:
    """The answer's `?format=`: json (the default), srt or vtt (422 otherwise)."""
    fmt = request.query_params.get("format", "json")
    if fmt not in ("json", *SUBTITLES):
        raise HTTPException(422, f"format must be json, srt or vtt, not {fmt[:20]!r}")
    return fmt


def _digits(request: Request, language: str) -> bool:
    """The answer's `?digits=`: true writes numbers in digits (English models; 422 for others), false (the
    default) leaves them as spoken."""
    said = request.query_params.get("digits", "false").lower()
    if said not in ("true", "false", "1", "0"):
        raise HTTPException(422, f"digits must be true or false, not {said[:20]!r}")
    if said in ("false", "0"):
        return False
    try:
        check_written_digits(language)
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    return True


def _respond(result: dict[str, Any], fmt: str) -> dict[str, Any] | Response:
    """A transcript's JSON, or its words as subtitles in `fmt`."""
    if fmt == "json":
        return result
    return Response(render(make_cues(result["words"], result["duration"]), fmt), media_type=SUBTITLES[fmt])


async def _read_limited(request: Request, max_bytes: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise HTTPException(413, f"request body over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def serve(asr: Transcriber, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None,
          ws: str = "guarded", stream_model: StreamModel | None = None) -> None:
    """Run the service until a stop signal, then drain it (service/drain.py). `ws="wsproto"`: uvicorn's wsproto
    WebSocket and h11 without this module's connection limits (for comparison in `bench stream`). `stream_model`:
    what WS /v1/stream runs (streaming.opener; default: `asr`'s model in PyTorch)."""
    import uvicorn

    from .drain import DrainingServer
    from .transport import protocols

    limits = limits or Limits()
    app = create_app(asr, limits, host, stream_model)
    http, websocket = protocols(limits)
    stack: dict[str, Any] = {"http": http, "ws": websocket} if ws == "guarded" else {"http": "h11", "ws": "wsproto"}
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", limit_concurrency=limits.max_connections,
                            timeout_keep_alive=5, timeout_graceful_shutdown=max(1, int(limits.request_timeout_s)),
                            # no keep-alive pings: a stream's connection is not read until the app took its last
                            # message, so a stream queued behind busy ones could not answer a ping; a stream that
                            # goes quiet is closed by stream_idle_s instead
                            ws_ping_interval=None,
                            # a message is cut off while it is read, at the stream's limit (1009); no
                            # permessage-deflate, so a small message cannot inflate to a large one
                            ws_max_size=limits.stream_max_frame_bytes, ws_per_message_deflate=False, **stack)
    DrainingServer(config, app.state.service, limits.drain_timeout_s, http).run()
