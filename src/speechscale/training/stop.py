"""Why a run stops early: signals (preemption notices and Ctrl-C) and the wall-clock budget."""
from __future__ import annotations

import logging
import signal
import time
from typing import Any

log = logging.getLogger(__name__)


class StopSignals:
    """SIGTERM (a preemption notice), SIGUSR1 (SLURM's --signal) and SIGINT (Ctrl-C) set `received`; the
    loop finishes the step, writes a checkpoint and returns. A second Ctrl-C stops at once
    (KeyboardInterrupt). Handlers are installed for the `with` block only, and only in the main thread."""

    def __init__(self, announce: bool) -> None:
        self.received: int | None = None
        self.announce = announce
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the next Ctrl-C interrupts
            if self.announce:
                log.warning("Ctrl-C: finishing this step and writing a checkpoint (Ctrl-C again stops at once)")

    @property
    def name(self) -> str | None:
        return signal.Signals(self.received).name if self.received is not None else None

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class TimeBudget:
    """trainer.max_minutes of wall time from its creation (0 = no limit)."""

    def __init__(self, minutes: float) -> None:
        self.minutes = minutes
        self.started = time.time()

    def elapsed_minutes(self) -> float:
        return (time.time() - self.started) / 60

    def spent(self) -> bool:
        return bool(self.minutes) and self.elapsed_minutes() >= self.minutes
