"""A WebSocket client at the level of the socket (standard library only), for the hostile suite and `bench soak`: it
sends what a polite library never would (unmasked frames, reserved bits, half a handshake) and reads exactly what
the server answers."""
from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time


def frame(opcode: int, payload: bytes = b"", fin: bool = True, mask: bool = True, rsv: int = 0,
          length: int | None = None) -> bytes:
    """One frame as bytes; `length` overrides the declared payload length (a lie)."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 1 << 16:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def close_frame(code: int, reason: bytes = b"") -> bytes:
    return frame(0x8, struct.pack("!H", code) + reason)


def text(obj: object) -> bytes:
    return frame(0x1, (obj if isinstance(obj, str) else json.dumps(obj)).encode())


class Conn:
    """A raw connection to `127.0.0.1:port`."""

    def __init__(self, port: int, timeout: float = 30.0, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting, so the window stays small: a client that reads little
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""

    def handshake(self, path: str = "/v1/stream", key: str | None = None, extra: str = "") -> tuple[int, bytes]:
        """Send an upgrade request; (HTTP status, the response head)."""
        key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return int(head.split()[1]) if head else 0, head

    def start(self, **fields: object) -> dict:
        """Handshake and the start message (16 kHz pcm16, and `fields`); the server's ready."""
        status, head = self.handshake()
        assert status == 101, head
        self.sock.sendall(text({"type": "start", "sample_rate": 16000, "encoding": "pcm16", **fields}))
        opcode, payload = self.read_frame()
        assert opcode == 0x1, (opcode, payload)
        return json.loads(payload)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the server closed the connection without a close frame")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self) -> tuple[int, bytes]:
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        assert not b1 & 0x80, "a server frame must not be masked"
        return b0 & 0x0F, self._read(n)

    def close_code(self, wait: float = 30.0) -> tuple[int | None, str]:
        """Read past data frames to the server's close frame: (code, reason); (None, why) on a drop."""
        self.sock.settimeout(wait)
        deadline = time.monotonic() + wait
        try:
            while time.monotonic() < deadline:
                opcode, payload = self.read_frame()
                if opcode == 0x8:
                    return (struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005,
                            payload[2:].decode("utf-8", "replace"))
        except (EOFError, ConnectionResetError, socket.timeout) as e:
            return None, type(e).__name__
        return None, "timeout"

    def closed_by_server(self, wait: float = 10.0) -> bool:
        """Whether the server ends the TCP connection within `wait` (reading and dropping what it sends)."""
        self.sock.settimeout(wait)
        deadline = time.monotonic() + wait
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        return False

    def close(self) -> None:
        self.sock.close()
