"""The service's connections with the limits a public server needs and uvicorn leaves open.

`protocols(limits)` gives uvicorn's h11 HTTP protocol and its websockets (sans-I/O) WebSocket protocol, each with:

- HTTP: a connection must deliver its request line and headers within `header_timeout_s` (then 408 and closed),
  when it opens and between keep-alive requests. A connection still sending its headers does not count against
  `max_connections`, so clients that never finish their headers cannot lock out the others; at most
  `max_pending` such connections are held, and past that the oldest is closed (a real client's headers arrive
  within milliseconds, so it is never the oldest).
- WebSocket: a message that cannot get into the socket within `send_timeout_s` (the client does not read) closes
  the stream with 1008 and frees it; while the client leaves what was sent unread (answers or pongs), nothing more
  is read from it either, so neither queues in memory; a protocol error is answered with its close code (1002,
  1007, 1009) and the connection lingers `linger_s`, reading and dropping, so the client gets the close frame
  instead of a reset.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._compat import uvicorn_protocols

# uvicorn's own protocols; every internal of theirs used below is listed in _compat.UVICORN_INTERNALS
H11Protocol, WebSocketsSansIOProtocol, ClientDisconnected = uvicorn_protocols()

log = logging.getLogger(__name__)


class GuardedHTTP(H11Protocol):
    """h11 with a deadline for each request's headers; connections waiting for headers are held apart."""

    header_timeout_s = 10.0
    max_pending = 256
    pending: dict[GuardedHTTP, None] = {}  # replaced per server by protocols(); insertion order = age

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        self._timer: asyncio.TimerHandle | None = None
        self._upgraded = False
        super().connection_made(transport)
        self._wait_for_headers()

    def _wait_for_headers(self) -> None:
        """From now on the next request's headers are due within header_timeout_s."""
        self.connections.discard(self)
        self.pending[self] = None
        while len(self.pending) > self.max_pending:
            oldest = next(iter(self.pending))
            oldest._drop()
        self._armed_cycle = self.cycle
        self._cancel()
        self._timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _started(self) -> None:
        """The headers arrived: the connection counts as open from here."""
        self._cancel()
        self.pending.pop(self, None)
        if not self._upgraded and not self.transport.is_closing():
            self.connections.add(self)

    def _drop(self) -> None:
        self.pending.pop(self, None)
        self._cancel()
        self.transport.close()

    def _headers_late(self) -> None:
        self._timer = None
        if self in self.pending and not self.transport.is_closing():
            body = f"the request's headers did not arrive within {self.header_timeout_s:g} s".encode()
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            self._drop()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self in self.pending and (self._upgraded or self.cycle is not self._armed_cycle):
            self._started()

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._upgraded = True
        self._started()
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is cycle and not self._upgraded:
            self._wait_for_headers()  # keep-alive: the next request's headers are due as a new connection's

    def connection_lost(self, exc: Exception | None) -> None:
        self.pending.pop(self, None)
        self._cancel()
        super().connection_lost(exc)


class GuardedWebSocket(WebSocketsSansIOProtocol):
    """websockets' sans-I/O protocol with a send timeout, read backpressure from unread sends and a lingering
    close after protocol errors."""

    send_timeout_s = 10.0
    linger_s = 2.0

    def pause_writing(self) -> None:
        super().pause_writing()
        self.transport.pause_reading()  # the client reads nothing: read nothing of it (pings included)

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    async def receive(self) -> Any:
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            if self.writable.is_set():
                self.transport.resume_reading()
        return message

    async def send(self, message: Any) -> None:
        if not self.writable.is_set() and not self.disconnected:
            try:
                await asyncio.wait_for(self.writable.wait(), self.send_timeout_s)
            except asyncio.TimeoutError:
                self._stalled()
                raise ClientDisconnected() from None
        await super().send(message)

    def _stalled(self) -> None:
        """The client has not read for send_timeout_s: 1008 after what it has not read, then the connection goes."""
        reason = f"the client did not read for {self.send_timeout_s:g} s"
        log.info("a WebSocket closed: %s", reason)
        if not self.close_sent and self.handshake_complete:
            self.conn.send_close(1008, reason)
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
        self.queue.put_nowait({"type": "websocket.disconnect", "code": 1008, "reason": reason})
        self.disconnected = True
        self.writable.set()
        self.transport.close()  # flushes what the socket takes, then closes
        self.loop.call_later(self.linger_s, self._abort)

    _lost = False

    def _abort(self) -> None:
        if not self._lost:  # the socket never took the rest: drop it
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        super().connection_lost(exc)

    _failed = False

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return  # lingering after a protocol error: read and drop
        super().data_received(data)

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            try:
                b"".join(self.frames).decode()
            except UnicodeDecodeError:
                self.frames = []
                self.conn.fail(1007, "a text message is not valid UTF-8")
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()

    def handle_parser_exception(self) -> None:
        """The close frame for a protocol error (its code and words), then the client's last bytes are read and
        dropped for linger_s so it sees the frame, not a reset."""
        self._failed = True
        sent = self.conn.close_sent
        code, reason = (sent.code, sent.reason) if sent is not None else (1002, "protocol error")
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.linger_s, self.transport.close)


def protocols(limits: Any) -> tuple[type[GuardedHTTP], type[GuardedWebSocket]]:
    """HTTP and WebSocket protocol classes for one server under `limits` (service.server.Limits)."""
    http = type("HTTP", (GuardedHTTP,), {"header_timeout_s": limits.header_timeout_s,
                                          "max_pending": limits.max_pending, "pending": {}})
    # a stream whose client neither sends nor reads is idle, whatever waits to be sent to it
    ws = type("WebSocket", (GuardedWebSocket,), {"send_timeout_s": min(limits.stream_send_timeout_s,
                                                                        limits.stream_idle_s)})
    return http, ws


def close_pending(http: type[GuardedHTTP]) -> None:
    """Close the connections that never sent a whole request (at shutdown; uvicorn does not know them)."""
    for conn in list(http.pending):
        conn._drop()
