"""Multi-domain mixing: shares by utterance counts (the default), by weights, flattened by a temperature;
the epoch plan is deterministic, keeps its size and spreads repeats evenly; a run logs per-domain counts."""
import json
from collections import Counter

import pytest

from speechscale.config import ConfigError
from speechscale.data.mixing import MixPlan, domain_names, domain_probabilities, quotas
from speechscale.recipe import load_recipe
from tests.conftest import shared


def test_default_shares_follow_utterance_counts_and_temperature_flattens_them():
    assert domain_probabilities([300, 100]) == [0.75, 0.25]
    assert domain_probabilities([300, 100], [1, 1]) == [0.5, 0.5]
    flat = domain_probabilities([300, 100], temperature=2.0)
    assert 0.5 < flat[0] < 0.75 and sum(flat) == pytest.approx(1.0)
    assert sum(quotas([1 / 3, 1 / 3, 1 / 3], 100)) == 100 and quotas([0.75, 0.25], 400) == [300, 100]
    assert domain_names(["a/train.jsonl", "b/train.jsonl", "c/x.jsonl"]) == ["a_train", "b_train", "x"]


def test_the_epoch_plan_upsamples_evenly_keeps_its_size_and_is_a_function_of_seed_and_epoch():
    plan = MixPlan([10, 3], domain_probabilities([10, 3], [1, 1]), seed=5)
    e0 = plan(0)
    assert len(e0) == 13 and plan.quotas == [7, 6]
    counts = Counter(e0)
    assert sorted(counts[i] for i in range(10, 13)) == [2, 2, 2]  # 6 samples of 3 utterances: twice each
    assert sum(1 for i in range(10) if counts[i]) == 7 and max(counts[i] for i in range(10)) == 1
    assert plan(0) == e0 and plan(1) != e0  # deterministic; another subset the next epoch
    assert sorted(MixPlan([10, 3], domain_probabilities([10, 3]), seed=5)(0)) == list(range(13))  # default: all once


def test_mix_settings_are_checked_when_the_config_loads():
    with pytest.raises(ConfigError, match="leave data.train_manifest"):
        load_recipe(None, ["data.mix=[a.jsonl]", "data.train_manifest=b.jsonl"])
    with pytest.raises(ConfigError, match="one positive weight per"):
        load_recipe(None, ["data.mix=[a.jsonl, b.jsonl]", "data.mix_weights=[1]"])
    with pytest.raises(ConfigError, match="mix_temperature"):
        load_recipe(None, ["data.mix_temperature=0"])


@pytest.mark.parametrize("source", ["manifests", "shards"])
def test_a_run_mixes_two_real_corpora_and_logs_each_domains_samples(tmp_path, source):
    from speechscale.data.shards import write_shards
    from speechscale.training.trainer import train

    ldc = shared("ldc93s1")
    row = {"audio_filepath": str(ldc / "LDC93S1.wav"), "duration": 2.92, "text": "she had your dark suit"}
    (tmp_path / "speech.jsonl").write_text((json.dumps(row) + "\n") * 3)
    fsdd = shared("fsdd")
    digits = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:9]]
    for d in digits:
        d["audio_filepath"] = str(fsdd / d["audio_filepath"])
    (tmp_path / "digits.jsonl").write_text("".join(json.dumps(d) + "\n" for d in digits))
    mix = f"[{tmp_path}/digits.jsonl, {tmp_path}/speech.jsonl]"
    if source == "shards":  # shard sets mix batch by batch, bucketed as a manifest is (issue #43 §4)
        for name in ("digits", "speech"):
            write_shards(str(tmp_path / f"{name}.jsonl"), tmp_path / "shards" / name, shard_size=4)
        mix = f"[{tmp_path}/shards/digits, {tmp_path}/shards/speech/index.jsonl]"
    cfg = load_recipe(None, [f"data.mix={mix}", "data.mix_weights=[1, 1]",
                             f"data.val_manifest={tmp_path}/speech.jsonl", f"trainer.out_dir={tmp_path}/run",
                             "trainer.max_epochs=2", "trainer.progress=false", "trainer.trace_samples=true",
                             "data.batch_seconds=20", "model.overrides={rnn_hidden: 32, rnn_layers: 1}"])
    summary = train(cfg)
    assert summary["epoch"] == 2 and summary["train_utterances"] == 12
    val = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"val"' in x]
    digits_n = 6  # 9 digits in 10 duration buckets: 9 batches of one, so batch by batch mixes as item by item
    assert [(r["samples_digits"], r["samples_speech"]) for r in val] == [(digits_n, 6)] * 2
    trained = [json.loads(x) for x in (tmp_path / "run" / "samples-rank0.jsonl").read_text().splitlines()]
    for epoch in (0, 1):
        ids = Counter(i for r in trained if r["epoch"] == epoch for i in r["ids"])
        assert sum(ids.values()) == digits_n + 6 and all(ids[i] == 2 for i in (9, 10, 11))  # speech upsampled 2x


# ---- shard sets: mixed batch by batch ------------------------------------------------------------------
def _shard_domains(tmp_path, sizes_by_domain):
    from speechscale.data.shard_stream import ShardUnits
    from tests.data.test_stream import synthetic_index

    parts, bases = [], [0]
    for d, sizes in enumerate(sizes_by_domain):
        index = synthetic_index(tmp_path / f"d{d}", sizes, seed=d)
        parts.append(ShardUnits(index, batch_seconds=12.0 * (d + 1), max_batch_size=8, seed=5))
        bases.append(bases[-1] + index.utterances)
    return parts, bases


def _counts(units, epoch):
    from collections import Counter

    return Counter(i for k in range(units.num_units(epoch)) for i in units.unit(epoch, k))


def test_shard_sets_with_default_weights_read_every_utterance_once(tmp_path):
    from speechscale.data.mixing import MixedUnits

    parts, bases = _shard_domains(tmp_path, [[40, 40, 13], [25]])
    mixed = MixedUnits(parts, domain_probabilities([93, 25]), bases, seed=1)
    for epoch in (0, 1):
        counts = _counts(mixed, epoch)
        assert sorted(counts) == list(range(118)) and set(counts.values()) == {1}
        assert mixed.epoch_samples(epoch) == 118 and mixed.domain_samples(epoch) == [93, 25]
        k = mixed.num_units(epoch) // 2
        assert mixed.offset(epoch, k) == sum(len(mixed.unit(epoch, j)) for j in range(k))
    first = [mixed.unit(0, k) for k in range(mixed.num_units(0))]
    assert first != [mixed.unit(1, k) for k in range(mixed.num_units(1))]  # the interleaving changes
    again = MixedUnits(parts, domain_probabilities([93, 25]), bases, seed=1)
    assert [again.unit(0, k) for k in range(again.num_units(0))] == first


@pytest.mark.parametrize("weights, temperature", [([1, 1], 1.0), ([1, 4], 1.0), ([], 3.0)])
def test_shard_set_shares_follow_the_weights_and_repeat_evenly(tmp_path, weights, temperature):
    from speechscale.data.mixing import MixedUnits

    parts, bases = _shard_domains(tmp_path, [[60, 60, 60, 60], [30]])
    probs = domain_probabilities([240, 30], weights, temperature)
    mixed = MixedUnits(parts, probs, bases, seed=2)
    for epoch in range(4):
        share = mixed.domain_samples(epoch)[1] / mixed.epoch_samples(epoch)
        assert abs(share - probs[1]) < 0.03, (epoch, share, probs)
        small = [n for i, n in _counts(mixed, epoch).items() if i >= 240]
        if probs[1] * mixed.epoch_samples(epoch) > 30:  # upsampled: every utterance about equally often
            assert len(small) == 30 and max(small) - min(small) <= 1


def test_mixed_shard_sets_resume_onto_another_world_size_exactly(tmp_path):
    from speechscale.data.batch_plan import LockstepPlan
    from speechscale.data.mixing import MixedUnits

    parts, bases = _shard_domains(tmp_path, [[30, 11], [20]])
    make = lambda: MixedUnits(parts, domain_probabilities([41, 20], [1, 2]), bases, seed=3)  # noqa: E731
    before = [LockstepPlan(make(), r, 2) for r in range(2)]
    seen, consumed = [], 0
    for p in before:
        p.resume(1, 0)
    for i, batches in enumerate(zip(*before)):
        if i == 3:
            break
        seen += [x for b in batches for x in b]
        consumed += before[0].advance(i)
    after = [LockstepPlan(make(), r, 3) for r in range(3)]
    for p in after:
        p.resume(1, consumed)
    rest = [x for p in after for b in p for x in b]
    assert sorted(seen + rest) == sorted(_counts(make(), 1).elements())
