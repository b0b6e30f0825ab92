"""Shard streams: epochs of bucketed batches from an index, dealt evenly to ranks, resumable onto any world
size, with memory that does not grow with the corpus."""
import json
import random
import tracemalloc

import pytest

from speechscale.data.batch_plan import ClaimedPlan, LockstepPlan
from speechscale.data.shard_stream import ShardUnits
from speechscale.data.shards import ShardIndex


def synthetic_index(folder, sizes, seed=0):
    """An index.jsonl of shards of `sizes` utterances with random durations (0.5-8 s); no audio is needed to
    plan epochs."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"speechscale_shards": 1, "shards": len(sizes), "utterances": sum(sizes)})]
    for s, n in enumerate(sizes):
        members = [[f"{s:06d}{m:06d}", round(rng.uniform(0.5, 8.0), 3), 0, 0] for m in range(n)]
        lines.append(json.dumps({"shard": f"shard-{s:06d}.tar", "bytes": 0, "utterances": n,
                                 "seconds": sum(m[1] for m in members), "members": members}))
    (folder / "index.jsonl").write_text("\n".join(lines) + "\n")
    return ShardIndex(str(folder / "index.jsonl"))


def units_of(index, **kw):
    return ShardUnits(index, batch_seconds=kw.pop("batch_seconds", 20.0), max_batch_size=8, seed=3, **kw)


def test_each_epoch_reads_every_utterance_once_in_batches_of_similar_duration(tmp_path):
    index = synthetic_index(tmp_path, [50, 37, 50, 3, 50])
    units = units_of(index, shuffle_shards=2)
    durations = {index.starts[s] + m: d for s in range(5) for m, (_, d, _, _) in enumerate(index.members(s))}
    epochs = []
    for epoch in (0, 1):
        batches = [units.unit(epoch, k) for k in range(units.num_units(epoch))]
        ids = sorted(i for b in batches for i in b)
        assert ids == list(range(190)) and units.epoch_samples(epoch) == 190
        assert all(max(durations[i] for i in b) * len(b) <= 20.0 for b in batches)  # the padded bound
        # bucketed within a window of 2 shards (~100 utterances: 5 buckets of 0.5-8 s): a batch spans a narrow
        # duration range, a fifth of the 7.5 s at most
        spread = sum(max(durations[i] for i in b) - min(durations[i] for i in b) for b in batches) / len(batches)
        assert spread < 1.5
        assert [units.offset(epoch, k) for k in range(3)] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
        epochs.append(batches)
    assert epochs[0] != epochs[1]  # shard order, ties and batch order change with the epoch
    again = units_of(index, shuffle_shards=2)
    assert [again.unit(1, k) for k in range(again.num_units(1))] == epochs[1]  # a pure function of (seed, epoch)


def test_duration_bounds_and_the_longest_utterances(tmp_path):
    index = synthetic_index(tmp_path, [40, 40])
    units = units_of(index, min_duration=1.0, max_duration=6.0)
    kept = [i for k in range(units.num_units(0)) for i in units.unit(0, k)]
    assert len(kept) == units.kept == units.epoch_samples(0) and units.kept + units.out_of_range == 80
    assert max(d for d, _ in units.longest) <= 6.0 and units.longest == sorted(units.longest, reverse=True)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_every_rank_takes_the_same_number_of_batches_with_uneven_shards(tmp_path, world):
    index = synthetic_index(tmp_path, [13, 5, 21, 1, 8])
    units = units_of(index, batch_seconds=12.0)
    plans = [LockstepPlan(units, r, world) for r in range(world)]
    for p in plans:
        p.resume(1, 0)
    per_rank = [list(p) for p in plans]
    assert len({len(b) for b in per_rank}) == 1  # the same number of steps everywhere (short ones: empty)
    assert sorted(i for b in per_rank for batch in b for i in batch) == list(range(48))
    assert sum(plans[0].advance(i) for i in range(len(plans[0]))) == 48
    assert plans[0].complete(48) and not plans[0].complete(47)


@pytest.mark.parametrize("before, after, rounds", [(2, 3, 4), (3, 1, 2), (4, 2, 5), (1, 4, 9)])
def test_resume_mid_epoch_onto_another_world_size_reads_the_rest_exactly_once(tmp_path, before, after, rounds):
    index = synthetic_index(tmp_path, [30, 17, 30])
    units = units_of(index, batch_seconds=12.0)
    first = [LockstepPlan(units, r, before) for r in range(before)]
    seen, consumed = [], 0
    for p in first:
        p.resume(2, 0)
    for i, batches in enumerate(zip(*first)):
        if i == rounds:
            break
        seen += [x for b in batches for x in b]
        consumed += first[0].advance(i)
    assert consumed == len(seen)
    fresh = units_of(index, batch_seconds=12.0)  # a new process: only the position is carried over
    second = [LockstepPlan(fresh, r, after) for r in range(after)]
    for p in second:
        assert p.resume(2, consumed) == consumed
    rest = [x for p in second for b in p for x in b]
    assert sorted(seen + rest) == list(range(77))


class CountingClaims:
    """The shared counter of asynchronous learners, in one process (distributed/rings.py keeps it in the
    c10d store; the multi-process tests use that one)."""

    def __init__(self):
        self.counters = {}

    def start(self, epoch, claimed):
        self.counters[epoch] = claimed

    def next(self, epoch):
        self.counters[epoch] += 1
        return self.counters[epoch] - 1

    def count(self, epoch):
        return self.counters[epoch]


def _two_learners(tmp_path):
    """Two asynchronous learners at the start of epoch 0 of a 49-utterance shard set; (index, claims, learners)."""
    index = synthetic_index(tmp_path, [20, 20, 9])
    claims = CountingClaims()
    learners = [ClaimedPlan(units_of(index, batch_seconds=12.0), claims) for _ in range(2)]
    for s in learners:
        s.resume(0, 0)
    return index, claims, learners


def test_a_learner_whose_loader_died_reads_its_claimed_untrained_batches_again_then_claims_on(tmp_path):
    """Asynchronous learners: learner 0's loader claimed two batches ahead of its training when its workers died;
    after `restart` (this learner alone; the shared counter is not touched) it yields those two first, then new
    claims, and the epoch is every utterance once."""
    _, claims, learners = _two_learners(tmp_path)
    a, b = learners
    first = iter(a)
    got = [next(first) for _ in range(3)]  # claimed 3, trained 1 when its worker died
    seen = a.advance(0)
    a.restart(consumed=seen)
    other = [next(iter(b))]  # meanwhile learner 1 claims on
    b.advance(0)
    again = list(a)
    assert again[:2] == got[1:]  # the claimed, untrained ones first
    trained = got[:1] + again + other
    assert sorted(x for batch in trained for x in batch) == list(range(49))
    for i in range(len(again)):
        seen += a.advance(i)
    assert a.complete(seen) and not a.rank_state()["pending"]


def test_a_lockstep_restart_deals_the_rest_of_the_epoch_from_the_position(tmp_path):
    index = synthetic_index(tmp_path, [20, 20, 9])
    plan = LockstepPlan(units_of(index, batch_seconds=12.0), 0, 1)
    plan.resume(1, 0)
    batches = list(plan)
    consumed = sum(plan.advance(i) for i in range(2))
    plan.restart(consumed)
    assert plan.epoch == 1 and list(plan) == batches[2:]


def _lockstep_rest(index, parts, consumed=0):
    """One lockstep rank resuming the learners' saved `parts`: (its plan, its batches, the position after them)."""
    from speechscale.training.state import data_part

    lockstep = LockstepPlan(units_of(index, batch_seconds=12.0), 0, 1)
    consumed = lockstep.resume(0, consumed, data_part([{"data": p} for p in parts], 0, 1))
    rest = list(lockstep)
    return lockstep, rest, consumed + sum(lockstep.advance(i) for i in range(len(rest)))


def test_asynchronous_learners_claim_stream_batches_and_resume_their_pending_ones(tmp_path):
    index, claims, learners = _two_learners(tmp_path)
    its = [iter(s) for s in learners]
    got = [[], []]
    for turn in [0, 0, 1, 0, 1, 0, 0]:  # learner 0 is faster
        got[turn].append(next(its[turn]))
    trained = [len(got[0]) - 1, len(got[1])]  # learner 0's loader ran one batch ahead
    for s, n in zip(learners, trained):
        for i in range(n):
            s.advance(i)
    parts = [s.rank_state() for s in learners]
    assert parts[0]["pending"] and not parts[1]["pending"]
    done = [x for g, n in zip(got, trained) for b in g[:n] for x in b]
    # continue on one lockstep rank: the pending batch first, then everything not yet claimed
    _, rest, _ = _lockstep_rest(index, parts)
    assert sorted(done + [x for b in rest for x in b]) == list(range(49))


def _plan_peak(tmp_path, utterances):
    index = synthetic_index(tmp_path / str(utterances), [1000] * (utterances // 1000))
    tracemalloc.start()
    units = units_of(index)
    plan = LockstepPlan(units, 0, 2)
    plan.resume(1, 0)
    n = sum(len(b) for b in plan)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n > 0
    return peak


def test_planning_memory_does_not_grow_with_the_corpus(tmp_path):
    """The plan holds a few windows of member lists and two integers per window, whatever the corpus size:
    10x more utterances may not cost 2x the memory (BENCHMARKS.md has the loader process's RSS)."""
    small, large = _plan_peak(tmp_path, 5_000), _plan_peak(tmp_path, 50_000)
    assert large < 2 * small, (small, large)


def test_a_checkpoint_after_a_learner_ran_past_the_epochs_end_resumes_each_sample_once(tmp_path):
    """A learner whose loader asks again after the last batch moves the shared counter past the end; the
    saved position is the epoch's batch count, so a lockstep resume reads the pending batches, then the end
    (a position past it once dropped a pending batch and read another twice: a load-dependent CI failure)."""
    index, claims, learners = _two_learners(tmp_path)
    fast = list(learners[0])  # learner 0's loader takes every batch left, and asks once more
    slow = list(learners[1])  # learner 1 asks too: the counter is now 2 past the end
    assert claims.count(0) > len(learners[0]) and not slow
    learners[0].advance(0)  # learner 0 trained its first batch, the rest is pending
    parts = [s.rank_state() for s in learners]
    assert parts[0]["claimed"] == len(learners[0])
    older = [{**p, "claimed": claims.count(0)} for p in parts]  # checkpoints written before the fix
    for saved in (parts, older):
        lockstep, rest, consumed = _lockstep_rest(index, saved, len(fast[0]))
        assert sorted(fast[0] + [x for b in rest for x in b]) == list(range(49))
        assert lockstep.complete(consumed)


def test_a_corpus_as_shards_packs_the_batches_its_manifest_packs(tmp_path):
    """Issue #43 §4: yesno from `speechscale data shard` took 160 steps where its manifest took 198 (fuller
    batches). Shards and manifest now bucket alike: the same batch-size distribution per epoch. Here the real
    durations of FSDD's 300 first clips, as one manifest sampler and as shards of 8 (one window or several)."""
    import statistics

    from speechscale.data.sampler import BucketBatchSampler
    from tests.conftest import shared

    rows = [json.loads(x) for x in shared("fsdd", "manifest.jsonl").read_text().splitlines()[:300]]
    durations = [r["duration"] for r in rows]
    sizes = [8] * (len(rows) // 8) + ([len(rows) % 8] if len(rows) % 8 else [])
    lines = [json.dumps({"speechscale_shards": 1, "shards": len(sizes), "utterances": len(rows)})]
    at = 0
    for s, n in enumerate(sizes):
        members = [[f"{s:06d}{m:06d}", durations[at + m], 0, 0] for m in range(n)]
        at += n
        lines.append(json.dumps({"shard": f"shard-{s:06d}.tar", "bytes": 0, "utterances": n,
                                 "seconds": sum(m[1] for m in members), "members": members}))
    (tmp_path / "index.jsonl").write_text("\n".join(lines) + "\n")
    index = ShardIndex(str(tmp_path / "index.jsonl"))
    # the whole corpus in one window (any corpus up to shard_size x shuffle_shards utterances): as the manifest;
    # windows of half the corpus: within 10 % (a window's buckets end in part-full batches more often)
    for window, within in ((len(sizes), 0.05), (len(sizes) // 2, 0.10)):
        steps = {"manifest": [], "shards": []}
        for seed in (1, 2, 3):
            manifest = BucketBatchSampler(durations, batch_seconds=6.0, max_batch_size=48, seed=seed)
            units = ShardUnits(index, batch_seconds=6.0, max_batch_size=48, seed=seed, shuffle_shards=window)
            for epoch in range(3):
                m = [len(b) for b in manifest.batches(epoch)]
                s = [len(units.unit(epoch, k)) for k in range(units.num_units(epoch))]
                assert sum(m) == sum(s) == 300
                steps["manifest"].append(len(m))
                steps["shards"].append(len(s))
        mean_m, mean_s = statistics.mean(steps["manifest"]), statistics.mean(steps["shards"])
        assert abs(mean_s - mean_m) <= within * mean_m, (window, steps)
