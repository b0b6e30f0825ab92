"""Preemption: SIGTERM (and SLURM's USR1) finish the step, write a checkpoint and exit cleanly."""
import json
import signal
import sys

import pytest

from tests.distributed.launch import kill_group, latest_step, ldc_manifest, run, start, trace, train_args, wait_for


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_stop_signal_writes_a_checkpoint_at_the_last_step_and_exits_zero(tmp_path, sig):
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    proc = start([sys.executable, "-m", "speechscale.cli", *train_args(m, out, "trainer.max_steps=100000")],
                 tmp_path / "log")
    try:
        wait_for(lambda: sum(1 for _ in trace(out)) >= 3)
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == 0, (tmp_path / "log").read_text()[-3000:]
    finally:
        kill_group(proc)
    summary = json.loads((tmp_path / "log").read_text().strip().splitlines()[-1])
    assert summary["stopped_by"] == sig.name
    last_traced = max(r["step"] for r in trace(out))
    assert latest_step(out) == last_traced == summary["step"]  # no step lost
    run([sys.executable, "-m", "speechscale.cli",
         *train_args(m, out, f"trainer.max_steps={last_traced + 2}", "trainer.resume=auto")], tmp_path / "log2")
    assert latest_step(out) == last_traced + 2
