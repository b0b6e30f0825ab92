"""Sharding the epoch over ranks: equal batch counts, every sample once, resumable onto other world sizes."""
import random

import pytest

from speechscale.data.distributed_sampler import ShardedBatchSampler, deal
from speechscale.data.sampler import BucketBatchSampler


def _base(n=101, seed=3):
    rng = random.Random(seed)
    return BucketBatchSampler([rng.uniform(0.5, 6.0) for _ in range(n)], batch_seconds=20.0, max_batch_size=8,
                              num_buckets=4, seed=seed, sortagrad=True)


def _ranks(base, world, epoch, consumed=0):
    samplers = [ShardedBatchSampler(base, r, world) for r in range(world)]
    for s in samplers:
        s.resume(epoch, consumed)
    return samplers


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_every_rank_gets_the_same_number_of_batches_and_every_sample_is_used_once(world, epoch):
    base = _base()
    samplers = _ranks(base, world, epoch)
    per_rank = [list(s) for s in samplers]
    assert len({len(b) for b in per_rank}) == 1
    used = sorted(i for batches in per_rank for b in batches for i in b)
    assert used == list(range(101)) and samplers[0].dropped == 0
    assert samplers[0].round_samples == [sum(len(b[i]) for b in per_rank) for i in range(len(per_rank[0]))]


@pytest.mark.parametrize("before, after", [(2, 2), (2, 1), (2, 3), (1, 4), (3, 2)])
@pytest.mark.parametrize("rounds_done", [0, 1, 5])
def test_resume_onto_another_world_size_uses_each_remaining_sample_once(before, after, rounds_done):
    base = _base()
    first = _ranks(base, before, epoch=1)
    consumed = sum(first[0].round_samples[:rounds_done])
    done = [i for r in first[0].rounds[:rounds_done] for b in r for i in b]
    second = _ranks(base, after, epoch=1, consumed=consumed)
    rest = [i for s in second for b in s for i in b]
    assert sorted(done + rest) == list(range(101))
    assert len({len(s) for s in second}) == 1
    if before == after:  # same world size: the plan continues exactly as if never interrupted
        assert second[0].rounds == first[0].rounds[rounds_done:]


def test_the_plan_is_a_pure_function_of_seed_and_epoch():
    a, b = _ranks(_base(), 2, epoch=3), _ranks(_base(), 2, epoch=3)
    assert a[1].rounds == b[1].rounds
    assert a[1].rounds != _ranks(_base(), 2, epoch=4)[1].rounds


def test_deal_splits_until_divisible_and_drops_only_what_cannot_be_shared():
    rounds, dropped = deal([[1, 2, 3], [4]], 3)
    assert [b for r in rounds for b in r] == [[1], [2, 3], [4]] and dropped == 0
    rounds, dropped = deal([[1], [2]], 3)
    assert rounds == [] and dropped == 2
