"""A full disk under a real run: the failed checkpoint write stops every rank in one line (no rank left
waiting in the next collective), leaves no temp file, and stale temp files of earlier crashes are swept."""
import os
import subprocess
import sys

import pytest

from tests.distributed.launch import kill_group, ldc_manifest, start, torchrun, train_args

pytestmark = pytest.mark.slow  # real torchrun processes on a real (tiny) file system


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KB tmpfs: room for the run's logs, not for a checkpoint. Needs root (CI runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; run the suite as root (as CI does) to test a full disk")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_every_rank_cleanly_and_leaves_no_temp_files(tmp_path, small_disk):
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = small_disk / "run"
    (out / "checkpoints").mkdir(parents=True)
    stale = out / "checkpoints" / ".last.pt.tmp.424242"  # what a crash mid-write left behind
    stale.write_bytes(b"x" * 1000)
    proc = start(torchrun(2, train_args(m, out, "trainer.max_steps=100000", "trainer.checkpoint_every_steps=2",
                                        "trainer.trace_samples=false", "trainer.progress=false")), tmp_path / "log")
    try:
        code = proc.wait(timeout=180)  # a rank left in a collective would hold it here for the group timeout
    finally:
        kill_group(proc)
    log = (tmp_path / "log").read_text()
    assert code != 0, log[-3000:]
    errors = [x for x in log.splitlines() if x.startswith("speechscale train: error:")]
    # each rank stops on the error by itself (one line; torchrun may stop the second after the first exits)
    assert errors and all("the run stopped on every rank" in x for x in errors), log[-3000:]
    assert "writing the checkpoint of step 2" in errors[0] and "No space left on device" in log
    assert "trainer.resume=auto" in errors[0]
    assert "src/speechscale" not in log  # no traceback from our code (torchrun prints its own ChildFailedError)
    assert not stale.exists()
    assert not list((out / "checkpoints").glob(".*.tmp.*")), list((out / "checkpoints").iterdir())
    if sys.platform == "linux":
        assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith("step-")]
