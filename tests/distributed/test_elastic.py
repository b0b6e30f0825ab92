"""Resume onto another number of ranks (1 and 3 after 2), from a manifest or a shard stream. Whole nodes lost,
stuck and joined under torchrun (restarts included) are tests/distributed/test_nodes.py."""
import shutil
import signal
import sys

import pytest
import torch

from tests.distributed.launch import (
    accepted,
    ids_by_epoch,
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

pytestmark = pytest.mark.slow  # real torchrun process groups


RING = ["distributed.strategy=adpsgd", "distributed.adpsgd.variant=fixed_ring", "data.num_workers=1"]


# Each strategy shrinks (2 -> 1, a plain process) and grows (2 -> 3) once, from a manifest or a shard stream; the
# ring grows from a manifest in the SIGTERM test below.
@pytest.mark.parametrize("strategy, new_world, source", [("allreduce", 1, "manifest"), ("allreduce", 3, "shards"),
                                                         ("fixed_ring", 1, "shards")])
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
    run(torchrun(new_world, args) if new_world > 1 else [sys.executable, "-m", "speechscale.cli",
                                                          *args], tmp_path / "log2")
    rows = list(trace(cont))
    assert {r["world"] for r in rows if r["resumed_at"] > 0} == {new_world}
    assert sorted(ids_by_epoch(accepted(rows) if not extra else rows)[0]) == list(range(12))


def test_a_ring_stopped_mid_epoch_resumes_on_as_many_and_on_more_learners_reading_nothing_twice(tmp_path):
    """SIGTERM in the middle of an epoch: each learner's claimed but untrained batches (a loader worker runs
    ahead) are saved with the shared position. Resumed on the same 2 learners (each takes its own back) and,
    from a copy, on 3 (all of them shared out), every sample is read once per epoch."""
    m = ldc_manifest(tmp_path / "data", copies=24)
    out = tmp_path / "run"
    args = train_args(m, out, *RING, "trainer.max_epochs=2")
    slow = "distributed.simulate_straggler={rank: 1, slowdown: 2}"  # the first leg only: learners run apart
    proc = start(torchrun(2, [*args, slow]), tmp_path / "log1")
    try:
        wait_for(lambda: sum(1 for r in trace(out) if r["epoch"] == 0) >= 3)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        kill_group(proc)
    ckpt = torch.load(out / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["training"]["epoch"] == 0  # stopped mid-epoch
    assert sum(len(p["data"]["pending"]) for p in ckpt["ranks"]) >= 1  # claimed ahead, not yet trained
    on3 = tmp_path / "on3"
    shutil.copytree(out, on3)
    run(torchrun(2, [*args, "trainer.resume=auto"]), tmp_path / "log2", timeout=300)
    for epoch in (0, 1):
        ids = sorted(i for r in trace(out) if r["epoch"] == epoch for i in r["ids"])
        assert ids == list(range(24)), epoch
    run(torchrun(3, train_args(m, on3, *RING, "trainer.max_epochs=1", "trainer.resume=auto")), tmp_path / "log3",
        timeout=300)
    rows = list(trace(on3))
    assert {r["world"] for r in rows if r["resumed_at"] > 0} == {3}
    assert sorted(ids_by_epoch(rows)[0]) == list(range(24))
