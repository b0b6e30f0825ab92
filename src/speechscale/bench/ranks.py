"""The ranks of a multi-process bench, forked from one launcher that imports torch once.

    with RankLauncher() as launch:
        launch.run(worker, nprocs=2, args=(2, port))   # worker(0, 2, port) and worker(1, 2, port)

`torch.multiprocessing.spawn` starts each rank as a new interpreter that imports torch, torch.distributed and
what DistributedDataParallel's constructor imports: seconds of CPU per rank, for every process count a bench
tries. The launcher is itself spawned (a clean process: none of the caller's threads or state), imports those
once, and forks every rank of every job it is given, so each rank starts with them imported. It never runs a
tensor operation or initializes CUDA (it checks), so a forked rank may use either, as a spawned one would.
A rank that fails ends its job: the other ranks of the job are stopped, and `run` raises naming it; its
traceback is on stderr, as with spawn.
"""
from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from .._compat import DDP_CONSTRUCTOR_IMPORTS

PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel", *DDP_CONSTRUCTOR_IMPORTS)
STOP_GRACE_S = 5.0  # after a rank failed: how long the others get to end on SIGTERM before SIGKILL


class RankLauncher:
    """One spawned launcher process (a context manager) that runs jobs of `nprocs` forked ranks, one job at a time."""

    def __init__(self, preload: Sequence[str] = PRELOAD) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(theirs, tuple(preload)), name="speechscale-ranks")
        self._proc.start()
        theirs.close()

    @property
    def pid(self) -> int | None:
        """The launcher's process id."""
        return self._proc.pid

    def run(self, fn: Callable[..., Any], nprocs: int, args: Sequence[Any] = (), env: dict[str, str] | None = None) -> None:
        """`fn(rank, *args)` in `nprocs` forked processes, `env` added to their environment; returns when all have
        ended. Raises RuntimeError when one did not end cleanly (the others are stopped). `fn` must be importable by
        name (a module-level function), as for spawn."""
        self._conn.send((fn, nprocs, tuple(args), dict(env or {})))
        try:
            codes, first = self._conn.recv()
        except EOFError:
            self._proc.join(STOP_GRACE_S)
            raise RuntimeError(f"the rank launcher ended (exit code {self._proc.exitcode}) before its ranks did") from None
        if first is not None:
            code = codes[first]
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code} (its traceback is above)"
            stopped = sum(1 for rank, c in enumerate(codes) if rank != first and c != 0)
            raise RuntimeError(f"rank {first} of {nprocs} ({fn.__qualname__}) {how}"
                               + (f"; {stopped} other rank(s) stopped" if stopped else ""))

    def close(self) -> None:
        """End the launcher (it exits when its pipe closes); kill it if it does not."""
        self._conn.close()
        self._proc.join(STOP_GRACE_S)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    def __enter__(self) -> RankLauncher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: Connection, preload: tuple[str, ...]) -> None:
    """The launcher: import `preload`, then fork the ranks of each job received, until the pipe closes."""
    for name in preload:
        importlib.import_module(name)
    import torch

    if torch.cuda.is_initialized():  # a forked rank could not use CUDA
        raise RuntimeError(f"importing {preload} initialized CUDA; the launcher cannot fork ranks after that")
    gc.freeze()  # what was imported stays shared with the ranks (the collector would otherwise write to its pages)
    fork = multiprocessing.get_context("fork")
    while True:
        try:
            fn, nprocs, args, env = conn.recv()
        except EOFError:
            return
        ranks = [fork.Process(target=_rank, args=(fn, rank, args, env), name=f"rank{rank}") for rank in range(nprocs)]
        for p in ranks:
            p.start()
        conn.send(_join(ranks))


def _rank(fn: Callable[..., Any], rank: int, args: tuple[Any, ...], env: dict[str, str]) -> None:
    os.environ.update(env)
    fn(rank, *args)


def _join(ranks: list[Any]) -> tuple[list[int], int | None]:
    """Exit codes of `ranks` once all have ended, and the index of the first that failed (None: none did); at that
    first failure, the others are stopped."""
    running, first = {p.sentinel: p for p in ranks}, None
    while running:
        for sentinel in wait(list(running)):
            p = running.pop(sentinel)
            p.join()
            if p.exitcode != 0:
                first = ranks.index(p)
                for other in running.values():
                    other.terminate()
                for other in running.values():
                    other.join(STOP_GRACE_S)
                    if other.is_alive():
                        other.kill()
                        other.join()
                running.clear()
                break
    return [p.exitcode for p in ranks], first
