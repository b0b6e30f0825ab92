"""Loader workers are forked by a single-threaded forkserver, not by the (multi-threaded) trainer, and still
start with the trainer's environment and its signal policy."""
import os
import signal
import threading

import torch

from speechscale.config import DataConfig
from speechscale.data.loading import WorkerStart, worker_context


class _WhoAmI(torch.utils.data.Dataset):
    """What a worker sees: its parent, one environment variable, what it does on SIGTERM."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> tuple[int, str, bool]:
        return os.getppid(), os.environ.get("SPEECHSCALE_TEST_VAR", ""), signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def _ask() -> tuple[int, str, bool]:
    loader = torch.utils.data.DataLoader(_WhoAmI(), batch_size=None, num_workers=1,
                                         multiprocessing_context=worker_context(), worker_init_fn=WorkerStart())
    return next(iter(loader))


def test_workers_come_from_a_forkserver_with_the_environment_the_loader_was_built_with(monkeypatch):
    busy = threading.Event()
    t = threading.Thread(target=busy.wait, daemon=True)  # the trainer is multi-threaded (gloo, gossip, tqdm)
    t.start()
    try:
        monkeypatch.setenv("SPEECHSCALE_TEST_VAR", "first")
        parent, var, ignores_term = _ask()  # starts the forkserver (if no earlier test did)
        assert parent != os.getpid()  # forked by the server, not by this multi-threaded process
        assert var == "first" and ignores_term
        monkeypatch.setenv("SPEECHSCALE_TEST_VAR", "second")  # changed after the server started
        parent2, var2, _ = _ask()
        assert parent2 == parent and var2 == "second"
    finally:
        busy.set()
        t.join()


def test_the_training_loader_uses_them():
    from speechscale.data.loading import build_loader

    loader = build_loader(_WhoAmI(), [[0]], DataConfig(num_workers=1), pin_memory=False)
    assert loader.multiprocessing_context.get_start_method() == "forkserver"
    assert isinstance(loader.worker_init_fn, WorkerStart)
    assert build_loader(_WhoAmI(), [[0]], DataConfig(num_workers=0), pin_memory=False).worker_init_fn is None
