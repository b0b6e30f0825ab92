import random

import pytest

from speechscale.data.sampler import BucketBatchSampler


@pytest.fixture
def durations():
    rng = random.Random(0)
    return [round(rng.uniform(0.5, 12.0), 2) for _ in range(300)]


def test_every_utterance_once_and_padded_batch_bounded(durations):
    s = BucketBatchSampler(durations, batch_seconds=40, max_batch_size=16, seed=3)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(durations)))
        for b in batches:
            assert len(b) <= 16
            assert len(b) == 1 or len(b) * max(durations[i] for i in b) <= 40


def test_sortagrad_first_epoch_is_shortest_first_then_shuffled(durations):
    s = BucketBatchSampler(durations, batch_seconds=40, seed=3, sortagrad=True)
    first = [durations[i] for b in s.batches(0) for i in b]
    assert first == sorted(first)
    second = [durations[i] for b in s.batches(1) for i in b]
    assert second != sorted(second)


def test_order_is_a_pure_function_of_seed_and_epoch(durations):
    a = BucketBatchSampler(durations, batch_seconds=40, seed=3)
    b = BucketBatchSampler(durations, batch_seconds=40, seed=3)
    assert a.batches(5) == b.batches(5)
    assert a.batches(5) != a.batches(6)
    assert a.batches(5) != BucketBatchSampler(durations, batch_seconds=40, seed=4).batches(5)


def test_resume_mid_epoch_continues_with_the_remaining_batches(durations):
    s = BucketBatchSampler(durations, batch_seconds=40, seed=3)
    s.set_epoch(2)
    it = iter(s)
    seen = [next(it) for _ in range(7)]
    state = s.state_dict()
    fresh = BucketBatchSampler(durations, batch_seconds=40, seed=0)
    fresh.load_state_dict(state)
    assert seen + list(fresh) == s.batches(2)


def test_buckets_group_similar_durations(durations):
    s = BucketBatchSampler(durations, batch_seconds=60, seed=1, num_buckets=10)
    spread = [max(durations[i] for i in b) - min(durations[i] for i in b) for b in s.batches(1)]
    assert sum(spread) / len(spread) < 1.5  # vs ~11.5 s for random batches


def test_len_follows_the_current_epoch(durations):
    s = BucketBatchSampler(durations, batch_seconds=40, seed=3, sortagrad=True)
    assert len(s) == len(s.batches(0))
    s.set_epoch(1)
    assert len(s) == len(s.batches(1)) == len(list(s))
