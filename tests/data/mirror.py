"""A misbehaving mirror on loopback for `data download`: per file, a list of answers given in turn (the last one
repeats), each a real HTTP exchange: a body (with Range support), a status, a redirect, an endless body, a stall
after the headers, a part other than the one asked for, a Content-Length that is not a number."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.archives import range_headers


class Mirror(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, plan: dict[str, list[tuple]]) -> None:
        self.plan, self.requests, self.stop = plan, [], threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.requests if n == name)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        server: Mirror = self.server  # type: ignore[assignment]
        name = self.path.lstrip("/")
        rng = self.headers.get("Range")
        server.requests.append((name, rng))
        answers = server.plan.get(name)
        if not answers:
            self.send_error(404)
            return
        kind, *args = answers.pop(0) if len(answers) > 1 else answers[0]
        getattr(self, f"_{kind}")(rng, *args)

    def _body(self, rng, body: bytes) -> None:
        span = range_headers(self, body, rng)
        if span is not None:
            self.wfile.write(body[span[0]:span[1]])

    def _cut(self, rng, body: bytes) -> None:  # the whole length announced, half sent
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True

    def _wrong_range(self, rng, body: bytes) -> None:  # a 206 of another part than the one asked for
        self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Range", f"bytes 0-{len(body) - 1}/{len(body)}")
        self.end_headers()
        self.wfile.write(body)

    def _status(self, rng, code: int, headers: dict | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _redirect(self, rng, location: str) -> None:
        self._status(rng, 302, {"Location": location})

    def _endless(self, rng) -> None:
        self.send_response(200)
        self.end_headers()
        block = b"\0" * 65536
        try:
            while not self.server.stop.is_set():  # type: ignore[attr-defined]
                self.wfile.write(block)
        except OSError:
            pass
        self.close_connection = True

    def _stall(self, rng) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        self.wfile.flush()
        self.server.stop.wait(60)  # type: ignore[attr-defined]
        self.close_connection = True

    def _bad_length(self, rng, value: str) -> None:
        self.send_response(200)
        self.send_header("Content-Length", value)
        self.end_headers()
        self.wfile.write(b"x" * 12)
        self.close_connection = True


def start(plan: dict[str, list[tuple]]) -> Mirror:
    server = Mirror(plan)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(0.01)
    return server
