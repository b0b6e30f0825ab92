"""A graceful stop: SIGTERM drains the service before uvicorn shuts it down.

On the first SIGTERM (or SIGINT) the service turns `draining`: `/healthz` answers 503 `{"status": "draining"}`,
new transcriptions are refused with 503 and new streams with 1001, while requests in flight are answered and open
streams go on as usual (a client that sends `{"type": "end"}` gets its finals and 1000). When the open streams are
done, or `drain_timeout_s` has passed, those still open are finished by the server: the finals of every
second of audio they sent, the end message and a close with 1001. Then uvicorn stops listening and exits. A second
signal stops at once.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from .transport import close_pending

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    """What the routes share about the service's life: open streams and the drain."""

    streams: int = 0
    draining: bool = False
    closing: asyncio.Event = field(default_factory=asyncio.Event)  # set: open streams finish now (1001)


class DrainingServer(uvicorn.Server):
    """uvicorn's server that drains `state` on the first stop signal (module docstring)."""

    def __init__(self, config: uvicorn.Config, state: ServiceState, drain_timeout_s: float, http: Any) -> None:
        super().__init__(config)
        self.state, self.drain_timeout_s, self.http = state, drain_timeout_s, http
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None

    async def startup(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.state.draining or self._loop is None or sig not in (signal.SIGTERM, signal.SIGINT):
            super().handle_exit(sig, frame)
            return
        self.state.draining = True
        self._loop.call_soon_threadsafe(self._begin)

    def _begin(self) -> None:
        self._task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        log.warning("draining: %d open streams, up to %g s", self.state.streams, self.drain_timeout_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout_s
        while self.state.streams and loop.time() < deadline and not self.should_exit:
            await asyncio.sleep(0.05)
        self.state.closing.set()
        grace = loop.time() + 10.0  # the streams' last finals are computed and sent
        while self.state.streams and loop.time() < grace and not self.should_exit:
            await asyncio.sleep(0.05)
        self.should_exit = True

    async def shutdown(self, sockets: Any = None) -> None:
        close_pending(self.http)
        await super().shutdown(sockets)
