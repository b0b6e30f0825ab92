"""`data split`: every valid line lands in exactly one split, held-out speakers are in one split only, the same
seed gives the same split, the written manifests read the same audio, and a split never overwrites its source."""
import json
import os

import pytest

from speechscale.config import ConfigError
from speechscale.data.manifest import read_manifest
from speechscale.data.split import split_manifest
from tests.conftest import main_cli, shared


def _fsdd(tmp_path):
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()]
    rows[5].pop("speaker")  # a line without the field: trains
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({**r, "audio_filepath": str(fsdd / r["audio_filepath"])}) + "\n" for r in rows)
                    + "{broken\n")
    return path, rows


def _read(folder):
    return {s: read_manifest(folder / f"{s}.jsonl")[0] for s in ("train", "dev", "test")}


def test_speakers_are_held_out_whole_and_every_line_lands_once(tmp_path):
    path, rows = _fsdd(tmp_path)
    summary = split_manifest(path, tmp_path / "a", by="speaker", dev=0.25, test=0.25, seed=3)
    splits = _read(tmp_path / "a")
    speakers = {s: {u.extra.get("speaker") for u in utts} - {None} for s, utts in splits.items()}
    assert not (speakers["train"] & speakers["dev"] or speakers["train"] & speakers["test"]
                or speakers["dev"] & speakers["test"])
    assert speakers["dev"] and speakers["test"] and summary["skipped"] == {"malformed JSON": 1}
    assert any("speaker" not in u.extra for u in splits["train"])  # the line without one trains
    seen = sorted(os.path.realpath(u.audio_path) for utts in splits.values() for u in utts)
    assert seen == sorted(os.path.realpath(json.loads(x)["audio_filepath"]) for x in path.read_text().splitlines()[:-1])
    total = sum(r["duration"] for r in rows) / 3600
    for s in ("dev", "test"):  # one speaker's hours of four: the nearest to the quarter asked for
        assert summary[s]["groups"] == 1 and summary[s]["hours"] == pytest.approx(
            sum(u.duration for u in splits[s]) / 3600, abs=1e-4) and 0.1 < summary[s]["hours"] / total < 0.4
    split_manifest(path, tmp_path / "b", by="speaker", dev=0.25, test=0.25, seed=3)
    assert all((tmp_path / "a" / f"{s}.jsonl").read_text() == (tmp_path / "b" / f"{s}.jsonl").read_text()
               for s in ("train", "dev", "test"))


def test_a_held_out_split_left_empty_is_said(tmp_path, caplog):
    """With four speakers a 1 % share draws none: dev.jsonl and test.jsonl were written empty without a word, and a
    run that validated on them failed later."""
    path, rows = _fsdd(tmp_path)
    hours = {}
    for r in rows:
        if "speaker" in r:
            hours[r["speaker"]] = hours.get(r["speaker"], 0.0) + r["duration"]
    smallest = min(hours.values()) / sum(r["duration"] for r in rows)
    with caplog.at_level("WARNING", logger="speechscale.data.split"):
        summary = split_manifest(path, tmp_path / "a", by="speaker", dev=0.01, test=0.25, seed=3)
    assert summary["dev"]["utterances"] == 0 and summary["test"]["utterances"] > 0
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{tmp_path / 'a' / 'dev.jsonl'} is empty: no speaker holds close to 0.01 of the hours (the "
                    f"smallest: {smallest:.3g}); give a larger --dev or another --by"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="speechscale.data.split"):
        split_manifest(path, tmp_path / "b", by="speaker", dev=0.25, test=0.0, seed=3)  # a share of 0 asks for none
    assert not caplog.records


def test_utterances_drawn_one_by_one_and_bad_requests_are_one_line(tmp_path, capsys):
    path, rows = _fsdd(tmp_path)
    code, out, err = main_cli(capsys, "data", "split", str(path), "--out", str(tmp_path / "o"), "--dev", "0.1",
                              "--test", "0.1")
    assert code == 0, err
    summary = json.loads(out)
    assert sum(summary[s]["utterances"] for s in ("train", "dev", "test")) == len(rows)
    for s in ("dev", "test"):
        assert 0.05 * len(rows) < summary[s]["utterances"] < 0.15 * len(rows)
    with pytest.raises(ConfigError, match="no line has the field 'room'"):
        split_manifest(path, tmp_path / "x", by="room")
    with pytest.raises(ConfigError, match="must be shares in"):
        split_manifest(path, tmp_path / "x", dev=0.6, test=0.5)
    from speechscale.data.shards import write_shards

    write_shards(str(path), tmp_path / "sh", shard_size=1000)
    with pytest.raises(ConfigError, match="data split takes a JSONL manifest"):
        split_manifest(tmp_path / "sh", tmp_path / "x")
    (tmp_path / "train.jsonl").write_text(path.read_text())
    with pytest.raises(ConfigError, match="would write train.jsonl over the manifest being split"):
        split_manifest(tmp_path / "train.jsonl", tmp_path)
    assert len((tmp_path / "train.jsonl").read_text().splitlines()) == len(rows) + 1  # untouched
