"""The one resume test: every strategy through save -> kill -9 -> restore -> compare with a run that was
never interrupted."""
import json
import signal
import sys

import pytest
import torch

from tests.distributed.launch import (
    assert_saved_average,
    consensus_distance,
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

pytestmark = pytest.mark.slow  # real processes, killed


def _weights(out):
    return torch.load(out / "checkpoints" / "last.pt", weights_only=True)


# (id, processes, extra overrides, tolerance). One process is bit-exact. DDP rebuilds its gradient buckets in
# the new processes, which can change the order of float additions: 1e-6 (LESSONS: 1.8e-7 seen with 4
# ranks). delay_by_one saves each learner's weights, optimizer and the exchange in flight: bit-exact (3
# learners, so that one of them sits out every other round).
STRATEGIES = [("local", 1, [], 0.0),
              ("adpsgd-delay_by_one-3", 3, ["distributed.strategy=adpsgd", "distributed.adpsgd.variant=delay_by_one"],
               0.0),
              # the rings are asynchronous: no two runs interleave alike, so resume is consistent, not exact; the
              # fixed ring and allreduce are resumed below from shards only (both ran from the manifest too until
              # issue #20 §4 cut the suite's repeats: the manifest path is the local run's and the other rings')
              ("adpsgd-random_ring-3", 3, ["distributed.strategy=adpsgd", "distributed.adpsgd.variant=random_ring"],
               None),
              # the same utterances streamed from uneven tar shards (the val set stays the manifest)
              ("allreduce-shards", 2, ["SHARDS"], 1e-6),
              ("adpsgd-fixed_ring-shards", 2, ["SHARDS", "distributed.strategy=adpsgd",
                                               "distributed.adpsgd.variant=fixed_ring"], None)]


@pytest.mark.parametrize("name, nproc, extra, atol", STRATEGIES, ids=[s[0] for s in STRATEGIES])
def test_kill_9_and_resume_matches_training_straight_through(tmp_path, name, nproc, extra, atol):
    """SIGKILL the whole run after a checkpoint, resume to N steps: equal to N steps straight through (lockstep
    strategies), or every learner going on from the checkpoint's step (asynchronous ones)."""
    m = ldc_manifest(tmp_path / "data", copies=12)
    if "SHARDS" in extra:
        extra = [f"data.train_manifest={ldc_shards(tmp_path / 'sharded')}", *extra[1:]]
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    launch = (lambda args: torchrun(nproc, args)) if nproc > 1 else (
        lambda args: [sys.executable, "-m", "speechscale.cli", *args])
    # Every leg runs to the same TARGET steps; the kill comes at the first checkpoint (step 2 or 4), so the
    # resume starts mid-epoch (3 rounds an epoch with 2 ranks, 6 with 1). The straight run is independent
    # of the kill and runs beside it.
    target = 9
    steps = ["trainer.checkpoint_every_steps=2", f"trainer.max_steps={target}", *extra]
    straight_run = launch(train_args(m, straight, f"trainer.max_steps={target}", *extra))
    ref = start(straight_run, tmp_path / "log3") if atol is not None else None  # asynchronous: none (below)
    # the first leg's rank 0 sleeps 3x its compute after each step (no effect on the numbers), so that on a
    # fast machine the kill still lands a few steps after the first checkpoint, not near the end
    slow = "distributed.simulate_straggler={rank: 0, slowdown: 4}"
    proc = start(launch(train_args(m, killed, *steps, slow)), tmp_path / "log1")
    try:
        wait_for(lambda: (killed / "checkpoints" / "latest").is_file() and proc.poll() is None)
        kill_group(proc, signal.SIGKILL)
        kill_step = latest_step(killed)
        assert kill_step < target - 2  # killed well before the end
        at_kill = _weights(killed)  # the weights the resume starts from
        run(launch(train_args(m, killed, *steps, "trainer.resume=auto")), tmp_path / "log2")
        if ref is not None:
            ref.wait(timeout=300)
            assert ref.returncode == 0, (tmp_path / "log3").read_text()[-4000:]
    finally:
        kill_group(proc, signal.SIGKILL)
        if ref is not None:
            kill_group(ref)
    b = _weights(killed)
    floats = [k for k, v in b["model"].items() if v.is_floating_point()]
    if atol is None:  # asynchronous: the first learner at max_steps stops all; each epoch's data read once
        # the furthest learner reached max_steps; rank 0 (whose step the checkpoint records) may be far behind:
        # learners keep their own pace (CI once saw rank 0 4 steps behind; beside two other trainings here, 6)
        assert max(r["step"] for r in trace(killed)) == target
        # Not compared with a run straight through: asynchronous learners take other batches in another order
        # (the first leg's rank 0 is slowed), and two such runs end as far apart as a run moves after the kill
        # point (measured: 1.24 against 3.25 for random_ring, 2.10 against 2.18 for fixed_ring; a 10 % bound on
        # the norm could not tell a resume from a restart), so none is trained. What a resume must do is checked
        # instead: every learner went on from the checkpoint's step, and trained.
        wb, wk = (torch.cat([w["model"][k].double().flatten() for k in floats]) for w in (b, at_kill))
        assert torch.isfinite(wb).all() and not torch.equal(wb, wk)
        print(json.dumps({"test": name, "moved_after_kill": float((wb - wk).norm())}))
        resumed = [r for r in trace(killed) if r["resumed_at"]]
        assert {r["resumed_at"] for r in resumed} == {kill_step}
        for rank in {r["rank"] for r in resumed}:
            assert min(r["step"] for r in resumed if r["rank"] == rank) == kill_step + 1, rank
        for epoch in sorted({r["epoch"] for r in resumed})[:-1]:
            ids = sorted(i for r in resumed if r["epoch"] == epoch for i in r["ids"])
            assert ids == list(range(12)), epoch
        if name == "adpsgd-random_ring-3":  # this run also stands for test_adpsgd.py's training test of the variant
            _learns_and_saves_the_average(killed, b, nproc)
        return
    a = _weights(straight)
    assert a["training"]["step"] == b["training"]["step"] == target
    for k, v in a["model"].items():
        torch.testing.assert_close(b["model"][k], v, rtol=0, atol=atol)
    for ra, rb in zip(a["ranks"], b["ranks"]):  # every learner's own state, too
        for k, v in ra["strategy"].get("model", {}).items():
            torch.testing.assert_close(rb["strategy"]["model"][k], v, rtol=0, atol=atol)
    if name == "adpsgd-delay_by_one-3":
        _learns_as_adpsgd_does(straight, a, nproc)


def _learns_and_saves_the_average(out, ckpt, nproc):
    """An ADPSGD run learns, logs the consensus distance and saves the learners' average."""
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if r["kind"] == "val"]
    assert len(val) >= 3 and val[-1]["train_loss"] < val[0]["train_loss"]  # two epochs and the stop at step 9
    assert_saved_average(ckpt, nproc)
    # the last validation's distance is that of the learners the checkpoint saved (written right after it)
    assert val[-1]["consensus_distance"] == pytest.approx(consensus_distance(ckpt), rel=1e-4)


def _learns_as_adpsgd_does(out, ckpt, nproc):
    """The uninterrupted delay_by_one run also stands for test_adpsgd.py's training test of that variant (one
    set of 3 learners fewer): it learns, logs the consensus distance, reads every sample once per epoch, and saves
    the learners' average."""
    _learns_and_saves_the_average(out, ckpt, nproc)
    steps = list(trace(out))
    for epoch in range(max(r["epoch"] for r in steps)):  # the last epoch is cut short by max_steps
        assert sorted(i for r in steps if r["epoch"] == epoch for i in r["ids"]) == list(range(12)), epoch
