"""Manifest lines with an `offset`: segments of a longer recording, read as that segment everywhere a manifest is
read (training items, shards, splits, eval), on real recordings joined into one."""
import json
import os

import numpy as np
import pytest
import soundfile as sf
import torch

from speechscale.components import build_components
from speechscale.config import Config, DataConfig, FeatureConfig
from speechscale.data.audio import AudioError, load_audio, read_audio
from speechscale.data.loading import make_loader, shard_source
from speechscale.data.manifest import read_manifest
from speechscale.data.shards import write_shards
from speechscale.data.split import split_manifest
from tests.conftest import shared

RATE = 8000


@pytest.fixture
def joined(tmp_path):
    """Six FSDD recordings (8 kHz) joined with 0.5 s of silence into one stereo wav (the right channel at half the
    left), and a manifest naming each as a segment of it: (manifest, [each recording's samples], rows)."""
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:6]]
    clips = [sf.read(fsdd / r["audio_filepath"], dtype="float32")[0] for r in rows]
    gap = np.zeros(RATE // 2, np.float32)
    mono = np.concatenate([p for c in clips for p in (c, gap)])
    sf.write(tmp_path / "long.wav", np.stack([mono, mono / 2], axis=1), RATE, subtype="FLOAT")
    lines, at = [], 0
    for r, c in zip(rows, clips):
        lines.append({"audio_filepath": "long.wav", "offset": at / RATE, "duration": len(c) / RATE, "text": r["text"],
                      "speaker": r["audio_filepath"].split("_")[1]})
        at += len(c) + len(gap)
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path / "m.jsonl", clips, lines


def test_a_line_with_an_offset_reads_its_segment_of_the_recording(joined):
    manifest, clips, lines = joined
    utts, report = read_manifest(manifest)
    assert report.kept == 6 and [u.offset for u in utts] == [x["offset"] for x in lines]
    assert all("offset" not in u.extra for u in utts)
    for u, clip in zip(utts, clips):
        got = u.load(RATE)
        want = clip * 0.75  # the two channels' mean
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-6
        assert np.array_equal(got, load_audio(u.audio_path, RATE, offset=u.offset, duration=u.duration))
    stored, rate = read_audio(utts[2].audio_path, utts[2].offset, utts[2].duration)  # as stored: both channels
    assert rate == RATE and stored.shape == (len(clips[2]), 2) and np.abs(stored[:, 1] - clips[2] / 2).max() < 1e-6
    rest = load_audio(utts[5].audio_path, RATE, offset=utts[5].offset)  # no duration: to the end
    assert rest.shape[0] == len(clips[5]) + RATE // 2
    at16k = load_audio(utts[1].audio_path, 16000, offset=utts[1].offset, duration=utts[1].duration)
    assert at16k.shape[0] == 2 * len(clips[1])  # resampled after cutting


@pytest.mark.parametrize("offset, duration, said", [
    (40.0, 1.0, "outside the recording"),
    (0.0, 40.0, "ends past the recording's end"),
])
def test_a_segment_outside_its_recording_is_a_clear_audio_error(joined, offset, duration, said):
    with pytest.raises(AudioError, match=said):
        load_audio(joined[0].parent / "long.wav", RATE, offset=offset, duration=duration)


@pytest.mark.parametrize("offset", ['"soon"', "-1", "true", "null", "1e400"])
def test_a_bad_offset_is_skipped_and_counted(tmp_path, offset):
    sf.write(tmp_path / "a.wav", np.zeros(1600, np.float32), 16000)
    (tmp_path / "m.jsonl").write_text(f'{{"audio_filepath": "a.wav", "duration": 0.05, "text": "x", "offset": {offset}}}'
                                      '\n{"audio_filepath": "a.wav", "duration": 0.05, "text": "y", "offset": 0.05}\n')
    utts, report = read_manifest(tmp_path / "m.jsonl")
    assert [u.text for u in utts] == ["y"] and report.reasons == {"bad offset": 1}
    assert "line 1: bad offset" in report.summary()


def test_training_items_are_the_segments_and_a_broken_one_is_skipped_and_counted(joined):
    manifest, clips, lines = joined
    with manifest.open("a") as f:  # past the end: skipped where it is drawn, the run goes on
        f.write(json.dumps({**lines[0], "offset": 100.0}) + "\n")
    cfg = Config(data=DataConfig(batch_seconds=4), features=FeatureConfig(sample_rate=RATE))
    comps = build_components(cfg)
    utts, _ = read_manifest(manifest, normalize=comps.normalizer)
    _, _, dataset = make_loader(utts, comps, cfg.data, None, seed=0)
    for i, clip in enumerate(clips):
        item = dataset[i]
        want = comps.features(torch.from_numpy(clip * 0.75))  # (F, T) of the recording alone
        assert item["feats"].shape == want.shape and float((item["feats"] - want).abs().max()) < 1e-3
    assert dataset[6] == {"skip": "bad_audio"}


def test_shards_hold_each_segment_cut_out(joined, tmp_path):
    manifest, clips, _ = joined
    head = write_shards(str(manifest), tmp_path / "sh", shard_size=4)  # the file's own bytes would be the whole
    assert head["utterances"] == 6 and not head["skipped"]
    cfg = Config(data=DataConfig(batch_seconds=4), features=FeatureConfig(sample_rate=RATE))
    _, dataset, report = shard_source(str(tmp_path / "sh"), build_components(cfg), cfg.data, None, 0)
    assert report.kept == 6
    for i, clip in enumerate(clips):
        wav, _, _, duration = dataset._load(i)
        assert duration == pytest.approx(len(clip) / RATE, abs=1e-3)
        assert wav.shape == clip.shape and np.abs(wav - clip * 0.75).max() <= 2 / 32768  # 16-bit, both channels


def test_split_keeps_a_recordings_segments_in_one_split(joined, tmp_path):
    manifest, _, lines = joined
    import shutil

    shutil.copy(tmp_path / "long.wav", tmp_path / "other.wav")
    plain = [{"audio_filepath": "other.wav", "duration": 20.0, "text": f"line {i}"} for i in range(40)]  # no offset
    both = lines + [{**x, "audio_filepath": "other.wav"} for x in lines]
    (tmp_path / "m2.jsonl").write_text("".join(json.dumps(x) + "\n" for x in both + plain))
    where_by_seed, plain_splits = [], set()
    for seed in range(8):
        summary = split_manifest(tmp_path / "m2.jsonl", tmp_path / f"s{seed}", dev=0.3, test=0.3, seed=seed)
        where: dict[tuple[str, str], set[str]] = {}
        for s in ("train", "dev", "test"):
            for x in (tmp_path / f"s{seed}" / f"{s}.jsonl").read_text().splitlines():
                row = json.loads(x)
                key = (os.path.basename(row["audio_filepath"]), "segment" if "offset" in row else row["text"])
                where.setdefault(key, set()).add(s)
        assert sum(summary[s]["utterances"] for s in ("train", "dev", "test")) == len(both) + len(plain)
        assert all(len(v) == 1 for v in where.values())  # each segment line once
        segs = {rec: {s for (r, k), v in where.items() if r == rec and k == "segment" for s in v}
                for rec in ("long.wav", "other.wav")}
        assert all(len(v) == 1 for v in segs.values()), (seed, segs)  # a recording's segments: one split
        where_by_seed.append(tuple(next(iter(segs[r])) for r in sorted(segs)))
        plain_splits |= {frozenset(s for (r, k), v in where.items() if k != "segment" for s in v)}
    assert len({s for pair in where_by_seed for s in pair}) == 3  # recordings are drawn, not all kept for training
    assert plain_splits == {frozenset({"train", "dev", "test"})}  # plain lines still drawn one by one, each seed
    summary = split_manifest(tmp_path / "m2.jsonl", tmp_path / "by", by="audio_filepath", dev=0.3, test=0.3, seed=0)
    assert sum(summary[s]["groups"] for s in ("train", "dev", "test")) == 2
    moved = tmp_path / "elsewhere" / "corpus"  # the same corpus in another folder: the same split, line for line
    moved.mkdir(parents=True)
    for name in ("m2.jsonl", "long.wav", "other.wav"):
        shutil.copy(tmp_path / name, moved / name)
    for by in (None, "audio_filepath"):
        for seed in range(8):
            split_manifest(tmp_path / "m2.jsonl", tmp_path / "here", by=by, dev=0.3, test=0.3, seed=seed)
            split_manifest(moved / "m2.jsonl", moved / "there", by=by, dev=0.3, test=0.3, seed=seed)
            for s in ("train", "dev", "test"):
                here, there = ((d / f"{s}.jsonl").read_text() for d in (tmp_path / "here", moved / "there"))
                assert here == there, (by, seed, s)
    assert sum(summary[s]["utterances"] for s in ("train", "dev", "test")) == len(both) + len(plain)


def test_split_keeps_the_offsets(joined, tmp_path):
    manifest, _, lines = joined
    split_manifest(manifest, tmp_path / "splits", dev=0.3, test=0.3, seed=0)
    written = [json.loads(x) for s in ("train", "dev", "test")
               for x in (tmp_path / "splits" / f"{s}.jsonl").read_text().splitlines()]
    assert sorted(x["offset"] for x in written) == sorted(x["offset"] for x in lines)
    utts = [u for s in ("train", "dev", "test") for u in read_manifest(tmp_path / "splits" / f"{s}.jsonl")[0]]
    assert {(u.offset, u.duration) for u in utts} == {(x["offset"], x["duration"]) for x in lines}
