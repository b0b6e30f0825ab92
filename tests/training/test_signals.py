"""Preemption and Ctrl-C: SIGTERM, SLURM's USR1 and SIGINT finish the step, write a checkpoint and exit
cleanly; a second Ctrl-C stops at once, in one line."""
import json
import os
import signal
import sys
import time

import pytest

from tests.distributed.launch import kill_group, latest_step, ldc_manifest, run, start, trace, train_args, wait_for

pytestmark = pytest.mark.slow  # real training processes, signalled


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
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
    assert "Traceback" not in (tmp_path / "log").read_text()
    summary = json.loads((tmp_path / "log").read_text().strip().splitlines()[-1])
    assert summary["stopped_by"] == sig.name
    last_traced = max(r["step"] for r in trace(out))
    assert latest_step(out) == last_traced == summary["step"]  # no step lost
    if sig != signal.SIGTERM:  # the checkpoint is the same kind for every signal: resume it once
        return
    run([sys.executable, "-m", "speechscale.cli",
         *train_args(m, out, f"trainer.max_steps={last_traced + 2}", "trainer.resume=auto")], tmp_path / "log2")
    assert latest_step(out) == last_traced + 2


def test_a_second_ctrl_c_stops_at_once_in_one_line(tmp_path):
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    # steps long enough (a wider model) that both signals land inside one step
    proc = start([sys.executable, "-m", "speechscale.cli", *train_args(m, out, "trainer.max_steps=100000",
                                                                        "model.overrides={rnn_hidden: 384}")],
                 tmp_path / "log")
    try:
        wait_for(lambda: sum(1 for _ in trace(out)) >= 2)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        kill_group(proc)
    log = (tmp_path / "log").read_text()
    assert log.strip().splitlines()[-1] == "speechscale train: interrupted" and "Traceback" not in log


def test_the_handler_flags_the_first_ctrl_c_and_raises_on_the_second():
    from speechscale.training.stop import StopSignals

    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background by a shell
    with StopSignals(announce=False) as signals:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs between bytecodes
        assert signals.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is before  # restored
