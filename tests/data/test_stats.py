"""`data stats`: a corpus's counts and spreads, recomputed here from the manifest with numpy; a transcript that
does not fit its audio is named first; a shard index says what its manifest says."""
import json

import numpy as np
import pytest

from speechscale.data.shards import write_shards
from speechscale.data.stats import corpus_stats
from tests.conftest import main_cli, shared


def _fsdd_with_a_wrong_transcript(tmp_path):
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:300]]
    for r in rows:
        r["audio_filepath"] = str(fsdd / r["audio_filepath"])
    rows[17]["text"] = "the transcript of a whole other and much longer recording"  # on a clip of one digit
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    return path, rows


def test_counts_quantiles_rates_and_fields_match_a_recomputation(tmp_path):
    path, rows = _fsdd_with_a_wrong_transcript(tmp_path)
    stats = corpus_stats([str(path)], top=3)
    durations = np.array([r["duration"] for r in rows])
    assert stats["utterances"] == len(rows) and stats["skipped"] == {"malformed JSON": 1}
    assert stats["hours"] == pytest.approx(durations.sum() / 3600, abs=1e-4)
    d = stats["duration_s"]
    assert d["min"] == pytest.approx(durations.min(), abs=1e-3) and d["max"] == pytest.approx(durations.max(), abs=1e-3)
    for q in (50, 90, 99):  # 10 ms bins: within one bin of numpy's quantile
        assert abs(d[f"p{q}"] - np.quantile(durations, q / 100, method="inverted_cdf")) <= 0.0101, q
    rates = np.array([sum(c.isalnum() for c in r["text"]) / r["duration"] for r in rows])
    assert stats["letters_per_s"]["p50"] == pytest.approx(np.quantile(rates, 0.5, method="inverted_cdf"), abs=0.0101)
    assert stats["fastest"][0]["where"] == f"{path} line 18"  # the wrong transcript, named first
    assert stats["fastest"][0]["letters_per_s"] == pytest.approx(rates[17], abs=0.01)
    assert [s["letters_per_s"] for s in stats["slowest"]] == sorted(s["letters_per_s"] for s in stats["slowest"])
    assert stats["fields"]["speaker"] == len({r["speaker"] for r in rows})
    assert stats["longer_than_s"]["20"] == {"utterances": 0, "hours": 0.0}
    by = corpus_stats([str(path)], top=2, by="speaker")["by"]["speaker"]
    both = corpus_stats([str(path)], top=2, by=["speaker", "room"])["by"]  # --by repeated: each field kept
    assert list(both) == ["speaker", "room"] and both["speaker"] == by and both["room"]["values"] == 1
    hours = {}
    for r in rows:
        hours[r["speaker"]] = hours.get(r["speaker"], 0.0) + r["duration"] / 3600
    ranked = sorted(hours.items(), key=lambda kv: -kv[1])
    assert [(g["value"], g["hours"]) for g in by["largest"]] == [(k, round(v, 4)) for k, v in ranked[:2]]
    assert by["values"] == len(hours) and by["others"]["values"] == len(hours) - 2
    assert by["others"]["hours"] == pytest.approx(sum(v for _, v in ranked[2:]), abs=1e-4)


def test_a_shard_index_says_what_its_manifest_says_and_the_cli_prints_both_ways(tmp_path, capsys):
    path, _ = _fsdd_with_a_wrong_transcript(tmp_path)
    write_shards(str(path), tmp_path / "sh", shard_size=100)
    from_manifest, from_shards = corpus_stats([str(path)]), corpus_stats([str(tmp_path / "sh")])
    for key in ("utterances", "hours", "duration_s", "letters_per_s", "longer_than_s"):
        assert from_shards[key] == from_manifest[key], key
    assert from_shards["fastest"][0]["where"].endswith("shard-000000.tar member 000000000017")
    code, out, err = main_cli(capsys, "data", "stats", str(path), "--json")
    assert code == 0 and json.loads(out) == from_manifest, err
    code, out, err = main_cli(capsys, "data", "stats", str(tmp_path / "sh"), str(path))
    assert code == 0 and out.splitlines()[0].split() == ["utterances", str(2 * from_manifest["utterances"])], err
    assert f"{path} line 18" in out and "field speaker" in out
    code, _, err = main_cli(capsys, "data", "stats", str(tmp_path / "nowhere.jsonl"))
    assert code == 2 and "manifest not found" in err
