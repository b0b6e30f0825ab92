"""Resume onto another number of ranks (1 and 3 after 2), from a manifest or a shard stream. Whole nodes lost,
stuck and joined under torchrun (restarts included) are tests/distributed/test_nodes.py."""
import shutil
import sys

import pytest

from tests.distributed.launch import (
    accepted,
    ids_by_epoch,
    latest_step,
    ldc_manifest,
    ldc_shards,
    run,
    torchrun,
    trace,
    train_args,
)

pytestmark = pytest.mark.slow  # real torchrun process groups


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
    run(torchrun(new_world, args) if new_world > 1 else [sys.executable, "-m", "speechscale.cli",
                                                          *args], tmp_path / "log2")
    rows = list(trace(cont))
    assert {r["world"] for r in rows if r["resumed_at"] > 0} == {new_world}
    assert sorted(ids_by_epoch(accepted(rows) if not extra else rows)[0]) == list(range(12))
