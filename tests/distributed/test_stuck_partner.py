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


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie does not count)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_stopped_ring_learner_fails_the_run_within_the_configured_timeout(tmp_path):
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    proc = start(torchrun(2, train_args(m, out, "trainer.max_steps=100000", "distributed.strategy=adpsgd",
                                        "distributed.adpsgd.variant=fixed_ring", "distributed.adpsgd.skip_after_s=1",
                                        "distributed.adpsgd.timeout_s=8"), warm=False),  # workers by environment
                 tmp_path / "log")
    stopped = None
    try:
        wait_for(lambda: sum(1 for r in trace(out) if r["rank"] == 1) >= 2)
        stopped, running = _worker(proc.pid, 1), _worker(proc.pid, 0)
        os.kill(stopped, signal.SIGSTOP)
        since = time.monotonic()
        # the running learner must give up after timeout_s (the 600 s default would hold it here) and exit
        wait_for(lambda: not _alive(running) and "Timed out waiting 8000ms" in (tmp_path / "log").read_text(),
                 timeout=150)
        waited = time.monotonic() - since
        # torchrun now stops the group: SIGTERM, which a stopped process keeps pending, then SIGKILL after its
        # 30 s grace; the test does the SIGKILL at once instead of sitting out that grace
        os.kill(stopped, signal.SIGKILL)
        code = proc.wait(timeout=60)
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        kill_group(proc)
    log = (tmp_path / "log").read_text()
    assert code != 0, log[-3000:]
    assert waited < 60, waited  # timeout_s 8 after the learner's last exchange, plus the error's way out
    print(f"a stopped learner failed the other after {waited:.1f} s (timeout_s 8, skip_after_s 1)")
