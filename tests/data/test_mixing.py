"""Multi-domain mixing: shares by utterance counts (the default), by weights, flattened by a temperature;
the epoch plan is deterministic, keeps its size and spreads repeats evenly; a run logs per-domain counts."""
import json
from collections import Counter

import pytest

from speechscale.config import ConfigError, load_config
from speechscale.data.mixing import MixPlan, domain_names, domain_probabilities, quotas
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
        load_config(None, ["data.mix=[a.jsonl]", "data.train_manifest=b.jsonl"])
    with pytest.raises(ConfigError, match="one positive weight per"):
        load_config(None, ["data.mix=[a.jsonl, b.jsonl]", "data.mix_weights=[1]"])
    with pytest.raises(ConfigError, match="mix_temperature"):
        load_config(None, ["data.mix_temperature=0"])


def test_a_run_mixes_two_real_corpora_and_logs_each_domains_samples(tmp_path):
    from speechscale.training.trainer import train

    ldc = shared("ldc93s1")
    row = {"audio_filepath": str(ldc / "LDC93S1.wav"), "duration": 2.92, "text": "she had your dark suit"}
    (tmp_path / "speech.jsonl").write_text((json.dumps(row) + "\n") * 3)
    fsdd = shared("fsdd")
    digits = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:9]]
    for d in digits:
        d["audio_filepath"] = str(fsdd / d["audio_filepath"])
    (tmp_path / "digits.jsonl").write_text("".join(json.dumps(d) + "\n" for d in digits))
    cfg = load_config(None, [f"data.mix=[{tmp_path}/digits.jsonl, {tmp_path}/speech.jsonl]", "data.mix_weights=[1, 1]",
                             f"data.val_manifest={tmp_path}/speech.jsonl", f"trainer.out_dir={tmp_path}/run",
                             "trainer.max_epochs=2", "trainer.progress=false", "trainer.trace_samples=true",
                             "data.batch_seconds=20", "model.overrides={rnn_hidden: 32, rnn_layers: 1}"])
    summary = train(cfg)
    assert summary["epoch"] == 2 and summary["train_utterances"] == 12
    val = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"val"' in x]
    assert [(r["samples_digits"], r["samples_speech"]) for r in val] == [(6, 6), (6, 6)]
    trained = [json.loads(x) for x in (tmp_path / "run" / "samples-rank0.jsonl").read_text().splitlines()]
    for epoch in (0, 1):
        ids = Counter(i for r in trained if r["epoch"] == epoch for i in r["ids"])
        assert sum(ids.values()) == 12 and all(ids[i] == 2 for i in (9, 10, 11))  # speech upsampled 2x
