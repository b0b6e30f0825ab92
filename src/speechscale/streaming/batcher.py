"""The service's one worker for model steps: every stream that has audio to decide hands its Stream here; the worker
takes all that are waiting and steps them together (streaming.recognizer), so N live streams cost one batched step
per round instead of N.

    batcher = StreamBatcher(recognizer)
    await batcher.decode(stream, samples)     # pushed, and its ready chunks stepped with the other waiting streams
    await batcher.decode(stream, close=True)  # its end: every remaining frame
    batcher.close()

A round starts once one stream waits and either every open stream waits too or `gather_s` has passed (a quarter
of the recognizer's chunk by default), and streams that arrive while it runs form the next round: the rows of a
step grow with the load, a lone stream is stepped at once, and no stream waits more than `gather_s` for company.
One step of 64 rows costs a few times one of a single row, so gathering is what lets 2 cores carry many streams.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from .recognizer import Recognizer, Stream

log = logging.getLogger(__name__)


class StreamBatcher:
    """Runs `recognizer.decode_streams` in one thread over the streams waiting together (see the module doc)."""

    def __init__(self, recognizer: Recognizer, gather_s: float | None = None) -> None:
        self.recognizer = recognizer
        self.gather_s = recognizer.chunk_s / 4 if gather_s is None else gather_s
        self.open = 0  # streams between open_stream's enter and exit
        self.waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.rounds = self.rows = 0  # batches run and streams they held (their ratio: the mean batch)
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    @contextmanager
    def open_stream(self) -> Iterator[None]:
        """Count a stream as open while the block runs (a round waits for open streams up to `gather_s`)."""
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1

    async def decode(self, stream: Stream, samples: Any = None, close: bool = False) -> None:
        """Push `samples` into `stream` (or close it) and step its ready chunks, in the next round; raises what
        the push or the step raised. The worker pushes: no thread hop per message, and the streams' spectra of a
        round are one STFT."""
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="speechscale-batcher", daemon=True)
                self.thread.start()
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.waiting.put((stream, samples, close, done, loop))
        await done

    def close(self) -> None:
        """Stop the worker once the rounds queued before are done."""
        if self.thread is not None:
            self.waiting.put(None)
            self.thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            items = [self.waiting.get()]
            deadline = time.monotonic() + self.gather_s
            while None not in items and len(items) < self.open:  # the other open streams, for a while
                try:
                    items.append(self.waiting.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
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

    def _round(self, items: list[tuple[Stream, Any, bool, asyncio.Future, asyncio.AbstractEventLoop]]) -> None:
        errors: list[BaseException | None] = []
        for stream, samples, close, _, _ in items:
            try:
                if samples is not None:
                    stream.push(samples)
                if close:
                    stream.close()
                errors.append(None)
            except Exception as e:  # noqa: BLE001 - this stream's own fault: it alone is told
                errors.append(e)
        try:
            self.rounds += 1
            self.rows += len(items)
            self.recognizer.decode_streams([s for (s, *_), e in zip(items, errors) if e is None])
        except Exception as e:  # noqa: BLE001 - handed to every stream of the round, each closes with 1011
            errors = [e] * len(items)
        for (*_, future, loop), error in zip(items, errors):
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
