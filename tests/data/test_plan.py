"""The lockstep plan over a manifest's batches: equal step counts, every sample once, resumable onto other
world sizes, also from a position inside a batch (checkpoints of the older plan that split batches)."""
import random

import pytest

from speechscale.data.batch_plan import ListUnits, LockstepPlan
from speechscale.data.sampler import BucketBatchSampler


def _units(n=101, seed=3):
    rng = random.Random(seed)
    return ListUnits(BucketBatchSampler([rng.uniform(0.5, 6.0) for _ in range(n)], batch_seconds=20.0,
                                        max_batch_size=8, num_buckets=4, seed=seed, sortagrad=True))


def _ranks(units, world, epoch, consumed=0):
    plans = [LockstepPlan(units, r, world) for r in range(world)]
    for p in plans:
        p.resume(epoch, consumed)
    return plans


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_every_rank_takes_the_same_number_of_steps_and_every_sample_is_used_once(world, epoch):
    plans = _ranks(_units(), world, epoch)
    per_rank = [list(p) for p in plans]
    assert len({len(b) for b in per_rank}) == 1
    used = sorted(i for batches in per_rank for b in batches for i in b)
    assert used == list(range(101)) and plans[0].dropped == 0
    assert [plans[0].advance(i) for i in range(len(plans[0]))] == [sum(len(b[i]) for b in per_rank)
                                                                   for i in range(len(per_rank[0]))]
    assert sum(not b for b in per_rank[-1]) < world  # only the last round holds empty fillers
    assert all(b for batches in per_rank for b in batches[:-1])


@pytest.mark.parametrize("before, after", [(2, 2), (2, 1), (2, 3), (1, 4), (3, 2)])
@pytest.mark.parametrize("rounds_done", [0, 1, 5])
def test_resume_onto_another_world_size_uses_each_remaining_sample_once(before, after, rounds_done):
    units = _units()
    first = _ranks(units, before, epoch=1)
    consumed = sum(first[0].advance(i) for i in range(rounds_done))
    done = [i for p in first for b in list(p)[:rounds_done] for i in b]
    second = _ranks(units, after, epoch=1, consumed=consumed)
    rest = [i for p in second for b in p for i in b]
    assert sorted(done + rest) == list(range(101))
    assert len({len(p) for p in second}) == 1
    if before == after:  # same world size: the plan continues exactly as if never interrupted
        assert [list(p) for p in second] == [list(p)[rounds_done:] for p in _ranks(units, before, epoch=1)]


@pytest.mark.parametrize("consumed", [1, 5, 13, 50, 100])
def test_a_position_inside_a_batch_continues_with_the_rest_of_that_batch(consumed):
    units = _units()
    flat = [i for k in range(units.num_units(0)) for i in units.unit(0, k)]
    plans = _ranks(units, 2, epoch=0, consumed=consumed)
    rest = [i for r in range(len(plans[0])) for p in plans for i in list(p)[r]]  # round by round, rank by rank
    assert rest == flat[consumed:]
    assert plans[0].complete(consumed + sum(p.advance(i) for p in plans[:1] for i in range(len(p))))


def test_the_plan_is_a_pure_function_of_seed_and_epoch():
    a, b = _ranks(_units(), 2, epoch=3), _ranks(_units(), 2, epoch=3)
    assert list(a[1]) == list(b[1])
    assert list(a[1]) != list(_ranks(_units(), 2, epoch=4)[1])
