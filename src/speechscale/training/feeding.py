"""How fast the loop trains and how long it waits for data: audio seconds trained per second of wall time, the
fraction of that time the loop spent blocked on the loader (what tells whether the GPU is fed), and the host's
own time per step (issuing the step's work: on a GPU the host runs ahead unless this nears the step's time).

    >>> meter = FeedMeter(hop_seconds=0.01)
    >>> batches = list(meter.timed([1, 2]))
    >>> meter.trained(torch.tensor([100, 50]))
    >>> meter.audio_seconds
    1.5
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

import torch


class FeedMeter:
    """Counts, per logging interval and over the whole run, the audio trained and the time spent waiting."""

    def __init__(self, hop_seconds: float) -> None:
        self.hop_seconds = hop_seconds
        self.audio_seconds = 0.0  # since the last `take`
        self.wait = 0.0
        self.host, self.steps = 0.0, 0  # seconds the host spent inside steps, and how many, since the last `take`
        self.since = time.perf_counter()
        self.total_audio, self.total_wait, self.started = 0.0, 0.0, self.since

    def timed(self, loader: Iterable[Any]) -> Iterator[Any]:
        """The loader's batches, the time each one kept the loop waiting counted."""
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.wait += time.perf_counter() - t0
            yield batch

    def trained(self, feat_lens: torch.Tensor) -> None:
        """A batch's real rows were trained on: their feature frames (B,), on the host."""
        self.audio_seconds += float(feat_lens.sum()) * self.hop_seconds

    def stepped(self, host_seconds: float) -> None:
        """A step returned after `host_seconds` of the host's wall time (no device sync inside it)."""
        self.host += host_seconds
        self.steps += 1

    def take(self) -> dict[str, float]:
        """`audio_s_per_s`, `data_wait_fraction` and `host_ms_per_step` of the interval since the last call (this
        rank's)."""
        now = time.perf_counter()
        span = max(now - self.since, 1e-9)
        row = {"audio_s_per_s": round(self.audio_seconds / span, 2), "data_wait_fraction": round(self.wait / span, 4)}
        if self.steps:
            row["host_ms_per_step"] = round(1000 * self.host / self.steps, 2)
        self.total_audio += self.audio_seconds
        self.total_wait += self.wait
        self.audio_seconds, self.wait, self.since, self.host, self.steps = 0.0, 0.0, now, 0.0, 0
        return row

    def summary(self) -> dict[str, float]:
        """The same over the whole run (this process's part of it)."""
        self.take()
        span = max(time.perf_counter() - self.started, 1e-9)
        return {"audio_s_per_s": round(self.total_audio / span, 2),
                "data_wait_fraction": round(self.total_wait / span, 4)}
