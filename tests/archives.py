"""A real HTTP server on loopback serving archives the tests build (Range requests, a connection cut mid-file),
for `speechscale data download` and the tests that start from a download."""
from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import shared


class Archives(ThreadingHTTPServer):
    """Serves `files` (name -> bytes) with Range support; the first GET of a name in `cut` sends half of the file
    under the whole file's Content-Length and closes. `requests` records (name, Range header); `sent` counts body
    bytes; each answer waits `delay` s first (a store's round trip), and `most_at_once` is the most answers that
    were waiting or being sent at one time; the next `failing` GETs answer 503 (a store's passing trouble)."""

    daemon_threads = True
    request_queue_size = 64  # connections a batch opens at once wait to be accepted (the default 5 drops some)

    def __init__(self, files: dict[str, bytes], cut: set[str] = frozenset(), delay: float = 0.0) -> None:
        self.files, self.cut, self.requests, self.delay = files, set(cut), [], delay
        self.sent, self.busy, self.most_at_once, self.failing, self.lock = 0, 0, 0, 0, threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:  # fsspec asks a file's size this way
        self._waited(self._head)

    def do_GET(self) -> None:
        self._waited(self._get)

    def _waited(self, answer) -> None:
        """`answer` after the server's delay, counted among those waiting or being sent."""
        server: Archives = self.server  # type: ignore[assignment]
        with server.lock:
            server.busy += 1
            server.most_at_once = max(server.most_at_once, server.busy)
        try:
            time.sleep(server.delay)
            answer(server, self.path.lstrip("/"))
        finally:
            with server.lock:
                server.busy -= 1

    def _head(self, server: Archives, name: str) -> None:
        if name not in server.files:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(server.files[name])))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def _get(self, server: Archives, name: str) -> None:
        rng = self.headers.get("Range")
        server.requests.append((name, rng))
        with server.lock:
            fail, server.failing = server.failing > 0, max(0, server.failing - 1)
        if fail:
            self.send_error(503)
            return
        if name not in server.files:
            self.send_error(404)
            return
        body = server.files[name]
        span = range_headers(self, body, rng)
        if span is None:
            return
        start, end = span
        if name in server.cut:
            server.cut.discard(name)
            self.wfile.write(body[start:start + (end - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        with server.lock:  # counted before the client can have it
            server.sent += end - start
        self.wfile.write(body[start:end])


def range_headers(handler: BaseHTTPRequestHandler, body: bytes, rng: str | None) -> tuple[int, int] | None:
    """Answer a GET of `body` (a Range request, `bytes=A-` or `bytes=A-B`, with 206 and its Content-Range) up to the
    headers; the [start, end) of the body to send, or None when the range began past its end (416 sent)."""
    first, _, last = rng.removeprefix("bytes=").partition("-") if rng else ("0", "", "")
    start = int(first)
    end = min(len(body), int(last) + 1) if last else len(body)
    if rng and start >= len(body):
        handler.send_error(416)
        return None
    handler.send_response(206 if rng else 200)
    handler.send_header("Content-Length", str(end - start))
    if rng:
        handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(body)}")
    handler.end_headers()
    return start, end


def yesno_archive() -> bytes:
    """waves_yesno.tar.gz as OpenSLR lays it out, from the real yesno recordings."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for wav in sorted(shared("yesno").glob("*.wav")):
            tar.add(wav, arcname=f"waves_yesno/{wav.name}")
    return buf.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()
