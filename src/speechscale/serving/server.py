"""`speechscale serve`: a transcription service (FastAPI + uvicorn) with a web page.

    speechscale serve --checkpoint runs/demo/checkpoints/best.pt --port 8000

- `POST /v1/transcribe`: a multipart upload (field `file`) or the raw audio bytes as the body -> JSON
  {text, duration, words: [{word, start, end, confidence}]}.
- `GET /healthz` -> {status, model}; `GET /` -> the page (upload a file or record from the microphone).

Requests that arrive together are transcribed as one padded batch (up to `max_batch`, waiting at most
`batch_ms` for company). Limits are checked before any model work: the body size (413) and the decoded
duration (413); audio soundfile cannot decode is 415, an empty body 422; no client-supplied path is ever
read, only the bytes sent. The server binds to 127.0.0.1 unless told otherwise.
"""
from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException, Request  # the `serve` extra (module-level: FastAPI reads annotations)
from fastapi.responses import HTMLResponse

from ..data.audio import AudioError, decode_audio
from .transcribe import Transcriber

log = logging.getLogger(__name__)
PAGE = Path(__file__).with_name("page.html")


@dataclass
class Limits:
    max_bytes: int = 20 * 1024 * 1024   # request body
    max_seconds: float = 60.0           # decoded audio
    max_batch: int = 16                 # requests per model call
    batch_ms: float = 10.0              # how long the first request of a batch waits for others


class Batcher:
    """Collects waveforms from concurrent requests and transcribes them together in a worker thread."""

    def __init__(self, asr: Transcriber, limits: Limits) -> None:
        self.asr, self.limits = asr, limits
        self.queue: asyncio.Queue[tuple[np.ndarray, asyncio.Future]] = asyncio.Queue()
        self.batches = 0

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
            try:
                results = await asyncio.to_thread(self.asr.transcribe_batch, [w for w, _ in items])
                self.batches += 1
                for (_, fut), res in zip(items, results):
                    if not fut.done():
                        fut.set_result(res)
            except Exception as e:  # a failed batch answers its requests with the error, the server lives on
                log.exception("transcription failed")
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(e)

    async def transcribe(self, wav: np.ndarray) -> dict[str, Any]:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((wav, fut))
        return await fut


def create_app(asr: Transcriber, limits: Limits | None = None) -> Any:
    """The FastAPI application around a loaded Transcriber."""
    limits = limits or Limits()
    batcher = Batcher(asr, limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        task = asyncio.create_task(batcher.run())
        yield
        task.cancel()

    app = FastAPI(title="speechscale", lifespan=lifespan)
    app.state.batcher = batcher

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "model": asr.comps.model_name, "sample_rate": asr.sample_rate,
                "batches": batcher.batches}

    @app.post("/v1/transcribe")
    async def transcribe(request: Request) -> dict[str, Any]:
        declared = int(request.headers.get("content-length") or 0)
        if declared > limits.max_bytes:
            raise HTTPException(413, f"request of {declared} bytes is over the limit of {limits.max_bytes}")
        body = await _read_limited(request, limits.max_bytes)
        request._body = body  # Starlette's form parser reads the body from here once it was streamed
        data, name = body, "request body"
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await request.form()
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise HTTPException(422, "multipart upload without a `file` field")
            data, name = await upload.read(), "uploaded file"  # its client-side filename is never used as a path
        if not data:
            raise HTTPException(422, "empty audio: the request carried no bytes")
        try:
            wav = await asyncio.to_thread(decode_audio, data, name, asr.sample_rate)
        except AudioError as e:
            raise HTTPException(415, f"unsupported or corrupt audio: {e}") from None
        seconds = wav.shape[0] / asr.sample_rate
        if seconds > limits.max_seconds:
            raise HTTPException(413, f"audio of {seconds:.1f} s is over the limit of {limits.max_seconds:g} s")
        return await batcher.transcribe(wav)

    return app


async def _read_limited(request: Request, max_bytes: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise HTTPException(413, f"request body over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def serve(asr: Transcriber, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None) -> None:
    """Run the service until interrupted."""
    import uvicorn

    uvicorn.run(create_app(asr, limits), host=host, port=port, log_level="warning")
