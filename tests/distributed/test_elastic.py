"""Faults and membership changes: a worker killed under torchrun --max-restarts, resume onto 1 and 3 ranks."""
import json
import os
import shutil
import signal
from collections import defaultdict
from pathlib import Path

import pytest

from tests.distributed.launch import (
    descendants,
    kill_group,
    latest_step,
    ldc_manifest,
    ldc_shards,
    run,
    start,
    torchrun,
    trace,
    train_args,
    wait_for,
)

pytestmark = pytest.mark.slow  # real torchrun process groups, restarts


def accepted(rows):
    """Rows that count: an attempt's steps up to where the next attempt resumed (later ones were redone)."""
    starts = sorted({r["resumed_at"] for r in rows})
    nxt = {s: (starts[i + 1] if i + 1 < len(starts) else float("inf")) for i, s in enumerate(starts)}
    return [r for r in rows if r["step"] <= nxt[r["resumed_at"]]]


def ids_by_epoch(rows):
    out = defaultdict(list)
    for r in rows:
        out[r["epoch"]].extend(r["ids"])
    return out


def _workers(proc):
    """Worker processes of a torchrun launch (not the agent itself)."""
    pids = []
    for pid in descendants(proc.pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"speechscale.cli" in cmd and b"torch.distributed.run" not in cmd:
            pids.append(pid)
    return pids


def test_a_killed_worker_is_restarted_and_training_resumes_exactly_once_per_sample(tmp_path):
    """torchrun --nnodes=1:2 --max-restarts=2 (elastic, c10d), with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
    as the launch recipes set it; one of the two workers is SIGKILLed after the first checkpoint."""
    m = ldc_manifest(tmp_path / "data", copies=40)  # 20 batches: 10 rounds an epoch on 2 ranks
    out = tmp_path / "run"
    proc = start(torchrun(2, train_args(m, out, "trainer.max_epochs=2", "trainer.checkpoint_every_steps=3",
                                        "trainer.resume=auto"),
                          max_restarts=2, nnodes="1:2"), tmp_path / "log")
    try:
        wait_for(lambda: (out / "checkpoints" / "latest").is_file() and latest_step(out) >= 3)
        victims = _workers(proc)
        assert len(victims) == 2
        killed_after = max(r["step"] for r in trace(out))
        os.kill(victims[1], signal.SIGKILL)
        assert proc.wait(timeout=300) == 0, (tmp_path / "log").read_text()[-4000:]
    finally:
        kill_group(proc)
    rows = list(trace(out))
    attempts = sorted({r["resumed_at"] for r in rows})
    assert len(attempts) >= 2  # the group was restarted and resumed from a checkpoint
    for epoch, ids in ids_by_epoch(accepted(rows)).items():
        assert sorted(ids) == list(range(40)), epoch
    first = [r for r in rows if r["resumed_at"] == 0]
    lost = max(r["step"] for r in first) - attempts[1]
    assert 0 <= lost <= 3 + 1  # at most one checkpoint interval (+1: the step in flight at the kill)
    assert killed_after <= max(r["step"] for r in first)
    summary = json.loads((tmp_path / "log").read_text().strip().splitlines()[-1])
    assert summary["epoch"] == 2 and summary["step"] == 20 and summary["world_size"] == 2


RING = ["distributed.strategy=adpsgd", "distributed.adpsgd.variant=fixed_ring", "data.num_workers=1"]


# Each strategy shrinks (2 -> 1, a plain process) and grows (2 -> 3) once, from a manifest or a shard stream.
@pytest.mark.parametrize("strategy, new_world, source", [("allreduce", 1, "manifest"), ("fixed_ring", 3, "manifest"),
                                                         ("allreduce", 3, "shards"), ("fixed_ring", 1, "shards")])
def test_resume_onto_another_number_of_ranks_uses_each_remaining_sample_once(tmp_path, strategy, new_world, source):
    """Lockstep ranks resume at the global position; asynchronous learners' claimed but untrained batches
    (a loader worker runs ahead) are shared out among the new ranks, or read first by one process. The same
    from a shard stream."""
    m = ldc_manifest(tmp_path / "data", copies=12)  # 6 batches of 2
    out = tmp_path / "run"
    extra = RING if strategy == "fixed_ring" else []
    if source == "shards":
        m_train = ldc_shards(tmp_path / "sharded")
        extra = [*extra, f"data.train_manifest={m_train}"]
    run(torchrun(2, train_args(m, out, "trainer.max_steps=2", "trainer.max_epochs=1", *extra)), tmp_path / "log1")
    if extra:  # the first learner at max_steps stopped both
        assert max(r["step"] for r in trace(out)) == 2 and latest_step(out) in (1, 2)
    else:
        assert latest_step(out) == 2
    cont = tmp_path / f"on{new_world}"
    shutil.copytree(out, cont)
    keep = extra if new_world > 1 else [x for x in extra if x.startswith("data.train_manifest")]
    args = train_args(m, cont, "trainer.max_epochs=1", "trainer.resume=auto", *keep)
    run(torchrun(new_world, args) if new_world > 1 else [__import__("sys").executable, "-m", "speechscale.cli",
                                                          *args], tmp_path / "log2")
    rows = list(trace(cont))
    assert {r["world"] for r in rows if r["resumed_at"] > 0} == {new_world}
    assert sorted(ids_by_epoch(accepted(rows) if not extra else rows)[0]) == list(range(12))


def test_a_killed_ring_learner_is_restarted_and_resumes_from_the_epoch_checkpoint(tmp_path):
    """ADPSGD fixed_ring under torchrun --max-restarts: one learner SIGKILLed after the first epoch's
    checkpoint; the group restarts, resumes, and every epoch of the last attempt reads each sample once."""
    m = ldc_manifest(tmp_path / "data", copies=24)  # 12 batches an epoch, claimed by 2 learners
    out = tmp_path / "run"
    # the survivor's SIGTERM handler finishes its step, whose exchange with the dead partner is skipped
    # after skip_after_s (30 s by default; 2 s here keeps the restart quick)
    proc = start(torchrun(2, train_args(m, out, "trainer.max_epochs=2", "trainer.resume=auto", *RING[:2],
                                        "distributed.adpsgd.skip_after_s=2"),
                          max_restarts=2, nnodes="1:2"), tmp_path / "log")
    try:
        wait_for(lambda: (out / "checkpoints" / "latest").is_file() and len(_workers(proc)) == 2)
        os.kill(_workers(proc)[1], signal.SIGKILL)
        assert proc.wait(timeout=300) == 0, (tmp_path / "log").read_text()[-4000:]
    finally:
        kill_group(proc)
    rows = list(trace(out))
    attempts = sorted({r["resumed_at"] for r in rows})
    assert len(attempts) >= 2  # restarted, and resumed from a checkpoint
    last = [r for r in rows if r["resumed_at"] == attempts[-1]]
    for epoch, ids in ids_by_epoch(last).items():
        assert sorted(ids) == list(range(24)), epoch
    summary = json.loads((tmp_path / "log").read_text().strip().splitlines()[-1])
    assert summary["epoch"] == 2 and summary["world_size"] == 2
