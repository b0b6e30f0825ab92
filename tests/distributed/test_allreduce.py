"""Data-parallel training under torchrun (gloo on CPU, real processes): sharding, agreement, exact resume."""
import signal
import time
from collections import Counter

import pytest
import torch

from tests.distributed.launch import (
    kill_group,
    latest_step,
    ldc_manifest,
    run,
    start,
    torchrun,
    trace,
    train_args,
    wait_for,
)

pytestmark = pytest.mark.slow  # real torchrun process groups


def _weights(out):
    return torch.load(out / "checkpoints" / "last.pt", weights_only=True)


# steps the outage runs plan: 10 epochs of 3 steps, the outage comes in the first 4 or so (at 4 steps read and the
# batches the loader had ready), and a resume trains on to the end
PLANNED = 30


def _movable_corpus(tmp_path):
    """(folder, manifest): 12 lines of LDC93S1 whose audio lies in a folder a test can move away (an outage)."""
    import json
    import shutil

    from tests.conftest import shared

    audio = tmp_path / "audio"
    audio.mkdir()
    shutil.copy(shared("ldc93s1", "LDC93S1.wav"), audio / "a.wav")
    row = json.loads(shared("ldc93s1", "manifest.jsonl").read_text().splitlines()[0])
    m = tmp_path / "m.jsonl"
    m.write_text((json.dumps({**row, "audio_filepath": str(audio / "a.wav")}) + "\n") * 12)
    return audio, m


def _resume_reads_the_epoch_once(tmp_path, args, out, rows, stopped_at):
    """trainer.resume=auto from `stopped_at` runs to its PLANNED steps, and the epoch it resumed in read every utterance
    once (`rows`: the first run's traces): none lost to the outage."""
    run(torchrun(2, [*args, "trainer.resume=auto"]), tmp_path / "log2")
    assert latest_step(out) == PLANNED
    resumed = [r for r in trace(out) if r["resumed_at"] == stopped_at and r["step"] > stopped_at]
    epoch = next(r["epoch"] for r in resumed)
    read = [i for r in rows + resumed if r["epoch"] == epoch and (r in resumed or r["step"] <= stopped_at)
            for i in r["ids"]]
    assert sorted(read) == list(range(12))


# grad_accum=2 only: DDP without accumulation trains the same way in test_resume's allreduce-shards legs, the
# first legs of test_elastic and test_nodes' stuck-node job (issue #20 §4: one torchrun of 2 ranks fewer)
@pytest.mark.parametrize("accum", [2])
def test_two_ranks_share_each_epoch_and_agree(tmp_path, accum):
    """With trainer.grad_accum=2 DDP skips the allreduce of the first micro-batch (no_sync)."""
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    run(torchrun(2, train_args(m, out, "trainer.max_epochs=2", f"trainer.grad_accum={accum}")), tmp_path / "log")
    rows = list(trace(out))
    for epoch in (0, 1):
        ids = [i for r in rows if r["epoch"] == epoch for i in r["ids"]]
        assert sorted(ids) == list(range(12))  # every sample once per epoch, split over the ranks
    steps = Counter(r["rank"] for r in rows)
    state = _weights(out)
    assert steps[0] == steps[1] == state["training"]["step"] > 0  # every rank takes every step (no hang at the end)
    # a batch holds at most 2 of these 2.9 s clips (data.batch_seconds=6): a step that trained 3 or more
    # accumulated micro-batches, on each rank
    assert all(max(len(r["ids"]) for r in rows if r["rank"] == k) >= 3 for k in (0, 1))
    assert state["world_size"] == 2 and len(state["ranks"]) == 2
    digests = [p["strategy"]["weights_digest"] for p in state["ranks"]]
    assert digests[0] == digests[1]  # DDP kept the ranks' weights equal, to the bit
    assert (out / "metrics.jsonl").is_file() and state["training"]["epoch"] == 2


def test_checkpoint_every_minutes_is_agreed_by_two_ranks_at_their_logging_steps(tmp_path):
    """The ranks' clocks differ, so they agree on trainer.checkpoint_every_minutes at their log_every steps (one
    collective there): an interval shorter than any step writes at steps 2 and 4 of 5, none at the others, and
    no rank waits for another."""
    m = ldc_manifest(tmp_path / "data", copies=40)  # 10 steps an epoch: no epoch end in these 5
    out = tmp_path / "run"
    run(torchrun(2, train_args(m, out, "trainer.max_epochs=0", "trainer.max_steps=5", "trainer.log_every=2",
                               "trainer.checkpoint_every_minutes=1e-9", "trainer.keep_checkpoints=10")), tmp_path / "log")
    saved = sorted(int(p.stem.split("-")[1]) for p in (out / "checkpoints").glob("step-*.pt"))
    assert saved == [2, 4, 5] and _weights(out)["training"]["step"] == 5


def test_sigterm_to_torchrun_checkpoints_every_rank_at_the_same_step(tmp_path):
    """What SLURM and Kubernetes do before preemption: torchrun passes SIGTERM on to its workers, which
    agree at the next step boundary (not the next logging step: log_every is 1000 here), write one
    checkpoint and exit inside torchrun's 30 s grace period."""
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    # ds2-tiny as its preset (3 x 256 GRU), not the launcher's 32-unit model: the figure in BENCHMARKS.md
    proc = start(torchrun(2, train_args(m, out, "trainer.max_steps=100000", "trainer.log_every=1000",
                                        "model.name=ds2-tiny", "model.overrides={}"), warm=False), tmp_path / "log")
    try:
        wait_for(lambda: sum(1 for _ in trace(out)) >= 6)
        at_signal = max(r["step"] for r in trace(out))
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        kill_group(proc)
    rows = list(trace(out))
    last = {r: max(x["step"] for x in rows if x["rank"] == r) for r in (0, 1)}
    assert last[0] == last[1] == latest_step(out)  # both ranks stopped together; nothing lost
    assert last[0] <= at_signal + 2  # the step in flight, at most one more, then the checkpoint
    written = (out / "checkpoints" / "last.pt").stat().st_mtime
    print(f"SIGTERM to checkpoint: {written - sent:.2f} s, {last[0] - at_signal} step(s) after the last traced one"
          f" (steps {at_signal} -> {last[0]})")
    assert "stopping" in (tmp_path / "log").read_text()


def test_data_gone_under_two_ranks_stops_both_in_one_line_and_a_resume_finishes(tmp_path):
    """The audio folder vanishes mid-run under DDP: each rank stops after data.max_unreadable_batches batches
    with nothing read (a rank in step with others writes no checkpoint alone), torchrun ends non-zero without a
    process left or a hang, and with the audio back trainer.resume=auto continues from the last checkpoint to the
    planned step."""
    audio, m = _movable_corpus(tmp_path)
    out = tmp_path / "run"
    args = train_args(m, out, "trainer.max_epochs=0", f"trainer.max_steps={PLANNED}", "trainer.checkpoint_every_steps=2",
                      "data.max_unreadable_batches=3")
    proc = start(torchrun(2, args), tmp_path / "log")
    try:
        wait_for(lambda: sum(1 for _ in trace(out)) >= 8)
        audio.rename(tmp_path / "away")
        proc.wait(timeout=120)
    finally:
        kill_group(proc)
    said = (tmp_path / "log").read_text()
    assert proc.returncode != 0
    for rank in (0, 1):
        assert f"rank {rank}: stopped at epoch" in said, said[-3000:]
    assert "speechscale train: stopped: 3 batches in a row had no utterance that could be read" in said
    rows = list(trace(out))
    stopped_at = latest_step(out)  # no checkpoint amid the unreadable batches: the newest one before them
    last_read = max(r["step"] for r in rows if r["ids"])  # the audio goes at any moment: any step may be the last
    assert last_read - 2 < stopped_at <= last_read  # (checkpoint_every_steps=2; ranks in step write none alone)
    assert any(not r["ids"] and r["step"] % 2 == 0 for r in rows), "no checkpoint step fell amid them"
    (tmp_path / "away").rename(audio)
    _resume_reads_the_epoch_once(tmp_path, args, out, rows, stopped_at)


def test_a_sigterm_amid_unreadable_batches_under_two_ranks_resumes_before_them(tmp_path):
    """SIGTERM while the audio is away under DDP (data.max_unreadable_batches=0: skipped and counted, no stop of
    its own): the stop writes no checkpoint past the batches no rank could read, so with the audio back
    trainer.resume=auto reads that epoch's every utterance once. (A checkpoint at the signal resumed past them.)"""
    audio, m = _movable_corpus(tmp_path)
    out = tmp_path / "run"
    args = train_args(m, out, "trainer.max_epochs=0", f"trainer.max_steps={PLANNED}", "trainer.checkpoint_every_steps=2",
                      "data.max_unreadable_batches=0")
    proc = start(torchrun(2, args), tmp_path / "log")
    try:
        wait_for(lambda: sum(1 for _ in trace(out)) >= 8)
        audio.rename(tmp_path / "away")
        wait_for(lambda: {r["rank"] for r in trace(out) if not r["ids"]} == {0, 1})  # both amid unreadable batches
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        kill_group(proc)
    said = (tmp_path / "log").read_text()
    assert "no checkpoint at the stop" in said, said[-3000:]
    rows = list(trace(out))
    stopped_at = latest_step(out)
    assert stopped_at <= max(r["step"] for r in rows if r["ids"])  # a checkpoint from before the outage
    (tmp_path / "away").rename(audio)
    _resume_reads_the_epoch_once(tmp_path, args, out, rows, stopped_at)
