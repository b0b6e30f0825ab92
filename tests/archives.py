"""A real HTTP server on loopback serving archives the tests build (Range requests, a connection cut mid-file),
for `speechscale data download` and the tests that start from a download."""
from __future__ import annotations

import hashlib
import io
import tarfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import shared


class Archives(ThreadingHTTPServer):
    """Serves `files` (name -> bytes) with Range support; the first GET of a name in `cut` sends half of the file
    under the whole file's Content-Length and closes. `requests` records (name, Range header)."""

    daemon_threads = True

    def __init__(self, files: dict[str, bytes], cut: set[str] = frozenset()) -> None:
        self.files, self.cut, self.requests = files, set(cut), []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        server: Archives = self.server  # type: ignore[assignment]
        name = self.path.lstrip("/")
        rng = self.headers.get("Range")
        server.requests.append((name, rng))
        if name not in server.files:
            self.send_error(404)
            return
        body = server.files[name]
        start = range_headers(self, body, rng)
        if start is None:
            return
        if name in server.cut:
            server.cut.discard(name)
            self.wfile.write(body[start:start + (len(body) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body[start:])


def range_headers(handler: BaseHTTPRequestHandler, body: bytes, rng: str | None) -> int | None:
    """Answer a GET of `body` (a Range request with 206 and its Content-Range) up to the headers; the offset to
    send the body from, or None when the range was past its end (416 sent)."""
    start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
    if rng and start >= len(body):
        handler.send_error(416)
        return None
    handler.send_response(206 if rng else 200)
    handler.send_header("Content-Length", str(len(body) - start))
    if rng:
        handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
    handler.end_headers()
    return start


def yesno_archive() -> bytes:
    """waves_yesno.tar.gz as OpenSLR lays it out, from the real yesno recordings."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for wav in sorted(shared("yesno").glob("*.wav")):
            tar.add(wav, arcname=f"waves_yesno/{wav.name}")
    return buf.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()
