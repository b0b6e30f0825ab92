"""Loader workers are forked by a single-threaded forkserver, not by the (multi-threaded) trainer, and still
start with the trainer's environment and its signal policy, also when a signal comes while they start."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from speechscale.config import DataConfig
from speechscale.data.loading import WorkerStart, worker_context
from tests.conftest import ROOT


class _WhoAmI(torch.utils.data.Dataset):
    """What a worker sees: its parent, one environment variable, what it does on SIGTERM."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> tuple[int, str, bool, int]:
        return (os.getppid(), os.environ.get("SPEECHSCALE_TEST_VAR", ""),
                signal.getsignal(signal.SIGTERM) == signal.SIG_IGN, os.getpid())


def _ask() -> tuple[int, str, bool, int]:
    loader = torch.utils.data.DataLoader(_WhoAmI(), batch_size=None, num_workers=1,
                                         multiprocessing_context=worker_context(), worker_init_fn=WorkerStart())
    return next(iter(loader))


def test_workers_come_from_a_forkserver_with_the_environment_the_loader_was_built_with(monkeypatch):
    busy = threading.Event()
    t = threading.Thread(target=busy.wait, daemon=True)  # the trainer is multi-threaded (gloo, gossip, tqdm)
    t.start()
    try:
        monkeypatch.setenv("SPEECHSCALE_TEST_VAR", "first")
        parent, var, ignores_term, _ = _ask()  # starts the forkserver (if no earlier test did)
        assert parent != os.getpid()  # forked by the server, not by this multi-threaded process
        assert var == "first" and ignores_term
        monkeypatch.setenv("SPEECHSCALE_TEST_VAR", "second")  # changed after the server started
        parent2, var2, _, _ = _ask()
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


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_trainer_killed_with_sigkill_leaves_no_worker_or_server_behind(tmp_path):
    """torch's own check watches a worker's parent (the server); the worker watches its trainer instead."""
    code = ("import time, torch\nfrom tests.data.test_workers import _WhoAmI\n"
            "from speechscale.data.loading import WorkerStart, worker_context\n"
            "it = iter(torch.utils.data.DataLoader(_WhoAmI(), batch_size=None, num_workers=1, "
            "multiprocessing_context=worker_context(), worker_init_fn=WorkerStart()))\n"
            "server, _, _, worker = next(it)\nprint(server, worker, flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    server = worker = 0
    try:
        server, worker = map(int, proc.stdout.readline().split())
        assert not _gone(server) and not _gone(worker)
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while not (_gone(server) and _gone(worker)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(worker) and _gone(server)
    finally:
        proc.kill()
        for pid in (worker, server):  # on failure: both ignore SIGTERM
            if pid and not _gone(pid):
                os.kill(pid, signal.SIGKILL)


SIGTERM_WHILE_STARTING = """
import json, os, random, signal, sys, threading
import torch
from speechscale.data.loading import WorkerStart, worker_context

class Four(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i

if __name__ == "__main__":
    received, failed = [], []
    signal.signal(signal.SIGTERM, lambda *_: received.append(1))  # the trainer checkpoints, its workers go on
    rng = random.Random(int(sys.argv[2]))
    for k in range(int(sys.argv[1])):  # the first loader also starts the server
        loader = torch.utils.data.DataLoader(Four(), batch_size=1, num_workers=2, timeout=30,
                                             multiprocessing_context=worker_context(), worker_init_fn=WorkerStart())
        timer = threading.Timer(rng.uniform(0, 0.05), os.killpg, (0, signal.SIGTERM))  # as torchrun does
        timer.start()
        try:
            assert sorted(int(b) for b in loader) == [0, 1, 2, 3]
        except Exception as e:
            failed.append(f"{k}: {type(e).__name__}: {str(e)[:200]}")
        timer.join()
    print(json.dumps({"received": len(received), "failed": failed}))
"""


def test_a_sigterm_to_the_process_group_while_workers_start_kills_none_of_them(tmp_path):
    """torchrun signals each worker's whole process group, loader workers included. A worker installs torch's
    own SIGTERM handler before WorkerStart ignores the signal, and the server starts without our preload: a
    signal in either window used to kill the worker (31 of 100 loaders in a probe here; in CI, an ADPSGD
    learner's only worker, and so its SIGTERM checkpoint)."""
    script = tmp_path / "starting.py"
    script.write_text(SIGTERM_WHILE_STARTING)
    proc = subprocess.run([sys.executable, str(script), "24", "0"], capture_output=True, text=True, cwd=ROOT,
                          timeout=240, start_new_session=True)  # its own group: the signals stay in there
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["received"] == 24  # each signal reached the trainer, and was left to it
    assert out["failed"] == [], proc.stderr[-3000:]
