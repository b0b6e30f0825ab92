"""A ring learner that is alive but stuck (SIGSTOP) must not hang the others: the run fails within the
configured distributed.adpsgd.timeout_s (not the 600 s group default), so the launcher can restart it."""
import os
import signal
import subprocess
import time

import pytest

from tests.distributed.launch import kill_group, ldc_manifest, start, torchrun, trace, train_args, wait_for

pytestmark = pytest.mark.slow  # real torchrun learners, one stopped


def _worker(torchrun_pid: int, rank: int) -> int:
    """The pid of the worker process with RANK=rank under the torchrun agent."""
    out = subprocess.run(["pgrep", "-P", str(torchrun_pid)], capture_output=True, text=True).stdout.split()
    for pid in map(int, out):
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        if f"RANK={rank}".encode() in env:
            return pid
    raise AssertionError(f"no worker with RANK={rank} under {torchrun_pid}")


def test_a_stopped_ring_learner_fails_the_run_within_the_configured_timeout(tmp_path):
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    proc = start(torchrun(2, train_args(m, out, "trainer.max_steps=100000", "distributed.strategy=adpsgd",
                                        "distributed.adpsgd.variant=fixed_ring", "distributed.adpsgd.skip_after_s=1",
                                        "distributed.adpsgd.timeout_s=8")), tmp_path / "log")
    stopped = None
    try:
        wait_for(lambda: sum(1 for r in trace(out) if r["rank"] == 1) >= 2)
        stopped = _worker(proc.pid, 1)
        os.kill(stopped, signal.SIGSTOP)
        since = time.monotonic()
        code = proc.wait(timeout=150)  # the 600 s default would hold it here
        waited = time.monotonic() - since
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        kill_group(proc)
    log = (tmp_path / "log").read_text()
    assert code != 0, log[-3000:]
    assert waited < 120, waited  # timeout_s, then torchrun's grace before it SIGKILLs the stopped learner
    assert "Timed out waiting 8000ms" in log  # the learners' group gave up after distributed.adpsgd.timeout_s
    print(f"a stopped learner ended the run after {waited:.1f} s (timeout_s 8, skip_after_s 1)")
