"""A simulated slow learner: `distributed.simulate_straggler: {rank: R, slowdown: F}` makes rank R take F
times as long per step by sleeping (F - 1) x its measured compute after each step. Sleeping uses no CPU,
so the simulation is clean on a small machine where the learners share cores."""
from __future__ import annotations

import contextlib
import time
from typing import Iterator

import torch


class Straggler:
    """Times each step of this rank and sleeps when it is the configured slow one."""

    def __init__(self, rank: int, slow_rank: int, slowdown: float, device: torch.device) -> None:
        self.active = rank == slow_rank and slowdown > 1.0
        self.slowdown = slowdown
        self.device = device
        self.slept = 0.0
        self.computed = 0.0  # the measured compute its sleeps were scaled from (the slow rank's)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        if not self.active:
            yield
            return
        started = time.perf_counter()
        yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        compute = time.perf_counter() - started
        pause = (self.slowdown - 1.0) * compute
        time.sleep(pause)
        self.computed += compute
        self.slept += pause
