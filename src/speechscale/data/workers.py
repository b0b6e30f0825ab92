"""Loader worker processes: forked by a single-threaded forkserver (never by the trainer), started with the
trainer's environment, leaving Ctrl-C and SIGTERM to the trainer (which checkpoints, then stops them), and exiting by
themselves when their trainer is gone. `data/worker_server.py` is what the forkserver imports first."""
from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import threading
import time
from pathlib import Path


class WorkerStart:
    """What a loader worker does first: take the environment its trainer had when the loader was built (a
    forkserver started earlier holds an older one: S3 endpoints and credentials come from it), and leave
    Ctrl-C and SIGTERM (a launcher may signal the whole process group) to the main process, which
    checkpoints and then stops its workers; they also exit by themselves when it dies."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.trainer = os.getpid()

    def __call__(self, worker_id: int) -> None:
        os.environ.clear()
        os.environ.update(self.environ)
        # a worker starts with both signals blocked (the server's mask), so that one sent between torch's
        # own SIGTERM handler (installed first thing in the worker) and this line stays pending; ignoring
        # it discards it, and only then may they arrive
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, LEFT_TO_TRAINER)
        # torch's own check watches the worker's parent, which is the server here, not the trainer
        threading.Thread(target=_exit_with, args=(self.trainer,), name="trainer-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:  # a zombie still takes signals: its state in /proc tells
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # gone meanwhile (the next check says so), or no /proc (macOS)
        return True


def _exit_with(pid: int, every_s: float = 1.0) -> None:
    """In a loader worker: exit once its trainer is gone (killed with SIGKILL, say), so none is left behind."""
    while _alive(pid):
        time.sleep(every_s)
    os._exit(0)


# Signals a loader worker leaves to its trainer; blocked from the server's start to the end of WorkerStart.
LEFT_TO_TRAINER = {signal.SIGINT, signal.SIGTERM}

# What the forkserver imports once, so that each worker it forks starts with them (milliseconds, not seconds);
# worker_server also leaves SIGTERM to the trainer, as the workers do.
WORKER_PRELOAD = ["speechscale.data.worker_server", "speechscale.data.dataset", "speechscale.data.shard_stream"]


def worker_context() -> multiprocessing.context.BaseContext:
    """Loader workers are forked by a single-threaded server, never by the trainer itself: a trainer has
    threads (gloo's, the ADPSGD gossip thread, tqdm's monitor), and a child forked while one of them holds a
    lock can hang inside fork() for good, deaf to the SIGTERM its parent's handler left it (seen in CI: a
    validation worker of an ADPSGD learner, and that learner waiting for it at exit). Python 3.14 makes
    forkserver the default for the same reason."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)  # takes effect when the server starts (once per process)
    # The server starts with SIGINT and SIGTERM blocked (an exec keeps the mask), so that a launcher's SIGTERM
    # to the process group in its first milliseconds cannot kill it, and it forks every worker with them
    # blocked. A signal meanwhile waits for this process, not lost. The resource tracker starts first: Python
    # starts it the same way but then unblocks both signals in the calling thread, whatever they were before.
    multiprocessing.resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, LEFT_TO_TRAINER)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return ctx
