"""The service's one worker for model steps: every stream that has audio to decide hands its Stream here; the worker
takes all that are waiting and steps them together (serving.recognizer), so N live streams cost one batched step
per round instead of N.

    batcher = StreamBatcher(recognizer)
    await batcher.decode(stream)      # returns once the stream's ready chunks are stepped
    batcher.close()

No tick is waited for: a round starts as soon as one stream waits, and streams that arrive while it runs form the
next round, so a batch grows with the load and a lone stream is stepped at once.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

from .recognizer import Recognizer, Stream

log = logging.getLogger(__name__)


class StreamBatcher:
    """Runs `recognizer.decode_streams` in one thread over the streams waiting together (see the module doc)."""

    def __init__(self, recognizer: Recognizer) -> None:
        self.recognizer = recognizer
        self.waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.rounds = self.rows = 0  # batches run and streams they held (their ratio: the mean batch)
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    async def decode(self, stream: Stream) -> None:
        """Step `stream`'s ready chunks in the next round; raises what the step raised."""
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="speechscale-batcher", daemon=True)
                self.thread.start()
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.waiting.put((stream, done, loop))
        await done

    def close(self) -> None:
        """Stop the worker once the rounds queued before are done."""
        if self.thread is not None:
            self.waiting.put(None)
            self.thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            items = [self.waiting.get()]
            while True:  # everything that waits now joins this round
                try:
                    items.append(self.waiting.get_nowait())
                except queue.Empty:
                    break
            stop = None in items
            items = [x for x in items if x is not None]
            if items:
                self._round(items)
            if stop:
                return

    def _round(self, items: list[tuple[Stream, asyncio.Future, asyncio.AbstractEventLoop]]) -> None:
        error: BaseException | None = None
        try:
            self.rounds += 1
            self.rows += len(items)
            self.recognizer.decode_streams([s for s, _, _ in items])
        except Exception as e:  # noqa: BLE001 - handed to every stream of the round, each closes with 1011
            error = e
        for _, future, loop in items:
            try:
                loop.call_soon_threadsafe(_settle, future, error)
            except RuntimeError:  # its event loop has closed: the server is gone
                pass


def _settle(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():  # the stream's task was cancelled (its client left) while it waited
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
