"""service/transport.py's protocols in a real uvicorn on loopback, under a minimal ASGI app: a WebSocket send into a
client that reads nothing fails after the send timeout and the connection goes; connections that never finish
their headers are held apart from --max-connections, at most max_pending of them, oldest closed first."""
import socket
import threading
import time

import pytest
import uvicorn

from speechscale.bench.rawws import Conn
from speechscale.service.server import Limits
from speechscale.service.transport import protocols
from tests.distributed.launch import free_port


class _Flood:
    """An ASGI app: `/ws` accepts and sends 256 KiB messages until a send fails; `/` answers 200 ok."""

    def __init__(self) -> None:
        self.failed_after: float | None = None
        self.sent = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
        elif scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})
        else:
            await receive()
            await send({"type": "websocket.accept"})
            started = time.monotonic()
            try:
                while True:
                    await send({"type": "websocket.send", "bytes": b"\0" * (256 << 10)})
                    self.sent += 1
            except OSError:
                self.failed_after = time.monotonic() - started


@pytest.fixture
def running():
    servers = []

    def run(app, **limits):
        port = free_port()
        http, ws = protocols(Limits(**limits))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=http, ws=ws, log_level="error",
                                               ws_ping_interval=None, limit_concurrency=4))
        threading.Thread(target=server.run, daemon=True).start()
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.05)
        servers.append(server)
        return port

    yield run
    for server in servers:
        server.should_exit = True


def test_a_send_into_a_client_that_reads_nothing_fails_after_the_timeout_and_the_connection_goes(running):
    app = _Flood()
    port = running(app, stream_send_timeout_s=1.0)
    c = Conn(port, rcvbuf=4096)
    assert c.handshake(path="/ws")[0] == 101
    for _ in range(300):
        if app.failed_after is not None:
            break
        time.sleep(0.05)
    assert app.failed_after is not None, "the send never gave up"
    assert 1.0 <= app.failed_after < 10.0 and app.sent < 400  # the socket's buffers, not the server's memory
    assert c.closed_by_server(wait=10.0)
    c.close()


def test_headerless_connections_are_held_apart_oldest_closed_first(running):
    port = running(_Flood(), header_timeout_s=30.0, max_pending=4)
    half = []
    for _ in range(6):  # more than limit_concurrency (4) and than max_pending (4)
        c = Conn(port)
        c.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        half.append(c)
        time.sleep(0.05)
    assert all(c.closed_by_server(wait=2.0) for c in half[:2])
    ok = socket.create_connection(("127.0.0.1", port), timeout=10)
    ok.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert ok.recv(4096).startswith(b"HTTP/1.1 200")
    ok.close()
    assert not half[-1].closed_by_server(wait=0.5)  # the newest half-open one is still waiting
    for c in half:
        c.close()


def test_a_request_whose_headers_are_late_gets_408(running):
    port = running(_Flood(), header_timeout_s=1.0)
    c = Conn(port)
    c.send(b"GET / HTTP/1.1\r\nHost: 127")
    started = time.monotonic()
    c.sock.settimeout(5)
    answer = c.sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408") and b"headers did not arrive within 1 s" in answer
    assert 0.8 < time.monotonic() - started < 10  # the 1 s header timeout, with a loaded machine's margin
    c.close()
    keep = socket.create_connection(("127.0.0.1", port), timeout=10)  # keep-alive: the next request's headers too
    keep.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while not answer.endswith(b"\r\n\r\nok"):
        answer += keep.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200")
    keep.sendall(b"GET / HTTP/1.1\r\n")
    assert keep.recv(4096).startswith(b"HTTP/1.1 408")
    keep.close()
