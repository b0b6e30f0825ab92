"""`speechscale label`: pseudo-labels through the real CLI with a model overfit on LDC93S1, on real recordings."""
import json
import shutil
import sys

import numpy as np
import pytest
import soundfile as sf

from speechscale.data.audio import load_audio
from speechscale.data.manifest import read_manifest
from speechscale.decoding.metrics import ErrorRate
from speechscale.inference.transcribe import Transcriber
from speechscale.labelling import gather, part_of, written
from tests.conftest import shared
from tests.distributed.launch import kill_group, start, wait_for


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


@pytest.fixture
def sources(tmp_path):
    """LDC93S1's manifest (3 recordings at 16, 8 and 44.1 kHz), a folder with JFK's flac in a subfolder, a corrupt wav
    and a text file, and one of the manifest's recordings named again."""
    folder = tmp_path / "untranscribed"
    (folder / "deep").mkdir(parents=True)
    shutil.copy(shared("jfk", "jfk.flac"), folder / "deep" / "jfk.flac")
    (folder / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot audio")
    (folder / "notes.txt").write_text("not audio\n")
    return [str(shared("ldc93s1", "manifest.jsonl")), str(folder), str(shared("ldc93s1", "LDC93S1.wav"))]


def test_label_writes_what_training_reads_with_the_models_own_text_and_confidence(ldc_checkpoint, sources, tmp_path,
                                                                                  cli):
    out = tmp_path / "labels.jsonl"
    summary = json.loads(cli("label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(out)).stdout)
    kept, rejected = _lines(out), _lines(tmp_path / "labels.rejected.jsonl")
    ldc = sorted(str(p.resolve()) for p in shared("ldc93s1").glob("*.wav"))
    jfk = str((tmp_path / "untranscribed" / "deep" / "jfk.flac").resolve())
    broken = str((tmp_path / "untranscribed" / "broken.wav").resolve())
    assert sorted(r["audio_filepath"] for r in kept) == sorted([*ldc, jfk])  # LDC93S1.wav once, though named twice
    assert [(r["audio_filepath"], r["rejected"]) for r in rejected] == [(broken, "unreadable")]
    asr = Transcriber(ldc_checkpoint)
    for r in kept:  # each line: what `transcribe` says of the file, its length, and the mean of its words' confidences
        said = asr.transcribe_file(r["audio_filepath"])
        assert r["text"] == said["text"] and r["text"]
        assert r["duration"] == pytest.approx(sf.info(r["audio_filepath"]).duration, abs=1e-3)
        assert r["confidence"] == pytest.approx(sum(w["confidence"] for w in said["words"]) / len(said["words"]),
                                                abs=1e-4)
    by_file = {r["audio_filepath"]: r for r in kept}
    assert by_file[ldc[0]]["reference"].startswith("She had your dark suit") and "reference" not in by_file[jfk]
    assert by_file[ldc[2]]["channels"] == 2  # a source manifest's own keys travel with the line
    assert by_file[ldc[0]]["confidence"] > by_file[jfk]["confidence"]  # heard in training, against an unknown voice
    utts, report = read_manifest(out, normalize=asr.comps.normalizer, oov=asr.comps.tokenizer.oov)
    assert len(utts) == 4 and report.skipped == 0  # every kept line is a training line
    # the summary: counts, hours, and the labels' WER against the references the manifest carried
    refs = [r for r in kept if "reference" in r]
    m = ErrorRate()
    m.update([asr.comps.normalizer(r["reference"]) for r in refs], [r["text"] for r in refs])
    assert summary["kept"] == 4 and summary["rejected"] == {"unreadable": 1}
    assert summary["wer_kept"] == pytest.approx(m.wer, abs=1e-4) and summary["this_run"]["unreadable"] == 1
    assert summary["kept_hours"] == pytest.approx(sum(r["duration"] for r in kept) / 3600, abs=1e-4)
    for row in summary["by_confidence"]:
        share = [r for r in refs if r["confidence"] >= row["min_confidence"]]
        assert row["share"] == pytest.approx(len(share) / len(refs), abs=1e-4)


def test_min_confidence_rejects_the_less_sure_and_max_seconds_the_long(ldc_checkpoint, sources, tmp_path, cli):
    first = tmp_path / "all.jsonl"
    cli("label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(first))
    conf = {r["audio_filepath"]: r["confidence"] for r in _lines(first)}
    bound = sorted(conf.values())[1] + 1e-4  # between the second and third least sure
    out = tmp_path / "sure.jsonl"
    cli("label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(out), "--min-confidence", str(bound))
    low = [r for r in _lines(tmp_path / "sure.rejected.jsonl") if r["rejected"] == "low confidence"]
    assert {r["audio_filepath"] for r in _lines(out)} == {f for f, c in conf.items() if c >= bound}
    assert {r["audio_filepath"] for r in low} == {f for f, c in conf.items() if c < bound} and len(low) == 2
    assert all(r["text"] and r["confidence"] < bound for r in low)  # the rejected transcript is kept to read
    short = tmp_path / "short.jsonl"
    res = json.loads(cli("label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(short),
                         "--max-seconds", "5", "--no-segment").stdout)  # LDC93S1 is 2.9 s, JFK 11 s
    assert res["this_run"]["too_long"] == 1 and res["kept"] == 3
    assert [r["audio_filepath"].endswith("jfk.flac") for r in _lines(tmp_path / "short.rejected.jsonl")
            if r["rejected"] == "too long"] == [True]


def test_parts_split_the_recordings_between_processes_once_each(ldc_checkpoint, sources, tmp_path, cli):
    rows = gather(sources).rows
    parts = [part_of(rows, (k, 3)) for k in (1, 2, 3)]
    names = [r["audio_filepath"] for p in parts for r in p]
    assert sorted(names) == sorted(r["audio_filepath"] for r in rows) and len(set(names)) == len(names)
    done = []
    for k in (1, 2):
        out = tmp_path / f"part{k}.jsonl"
        res = json.loads(cli("label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(out), "--part",
                             f"{k}/2").stdout)
        assert res["part"] == f"{k}/2"
        done += [r["audio_filepath"] for r in _lines(out) + _lines(tmp_path / f"part{k}.rejected.jsonl")]
    assert sorted(done) == sorted(r["audio_filepath"] for r in rows)
    bad = cli("label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(tmp_path / "x.jsonl"), "--part",
              "3/2", check=False)
    assert bad.returncode == 2 and "K must be between 1 and N" in bad.stderr


def test_a_torn_last_line_is_cut_and_resume_goes_on_from_the_whole_ones(tmp_path):
    out = tmp_path / "labels.jsonl"
    out.write_text('{"audio_filepath": "/a.wav", "text": "x"}\n{"audio_filepath": "/b.w')
    assert written(out).done == {("/a.wav", None)}
    assert out.read_text() == '{"audio_filepath": "/a.wav", "text": "x"}\n'


@pytest.mark.slow
def test_label_killed_mid_run_resumes_without_losing_or_repeating_a_recording(ldc_checkpoint, tmp_path, cli):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(48):  # 6 batches of 8
        shutil.copy(shared("ldc93s1", "LDC93S1.wav"), folder / f"u{i:02d}.wav")
    out = tmp_path / "labels.jsonl"
    cmd = [sys.executable, "-m", "speechscale.cli", "-q", "label", str(folder), "--checkpoint", str(ldc_checkpoint),
           "--out", str(out)]
    proc = start(cmd, tmp_path / "label.log")
    try:
        wait_for(lambda: len(_lines_whole(out)) >= 8, timeout=120)
    finally:
        kill_group(proc)
    before = _lines_whole(out)
    assert 8 <= len(before) < 48, "the run ended before it could be killed mid-way"
    again = cli("label", str(folder), "--checkpoint", str(ldc_checkpoint), "--out", str(out), check=False)
    assert again.returncode == 2 and "--resume" in again.stderr  # a second run never appends by accident
    res = json.loads(cli("label", str(folder), "--checkpoint", str(ldc_checkpoint), "--out", str(out),
                         "--resume").stdout)
    after = _lines(out)
    assert sorted(r["audio_filepath"] for r in after) == sorted(str(p.resolve()) for p in folder.glob("*.wav"))
    assert after[:len(before)] == before and res["this_run"]["kept"] == 48 - len(before) and res["kept"] == 48


def _lines_whole(path):
    """The whole lines of a file another process is appending to."""
    if not path.is_file():
        return []
    data = path.read_text()
    return [json.loads(x) for x in data[:data.rfind("\n") + 1].splitlines()]


def test_label_refuses_what_it_cannot_read_in_one_line(ldc_checkpoint, tmp_path, cli):
    for source, said in (("s3://bucket/corpus.jsonl", "label reads local files"),
                         (str(tmp_path / "missing"), "no such file or folder")):
        bad = cli("label", source, "--checkpoint", str(ldc_checkpoint), "--out", str(tmp_path / "o.jsonl"),
                  check=False)
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    from speechscale.data.shards import write_shards

    write_shards(str(shared("ldc93s1", "manifest.jsonl")), tmp_path / "shards", shard_size=2)
    bad = cli("label", str(tmp_path / "shards"), "--checkpoint", str(ldc_checkpoint), "--out",
              str(tmp_path / "o.jsonl"), check=False)
    assert bad.returncode == 2 and "a shard index" in bad.stderr
    bad = cli("label", str(shared("ldc93s1", "manifest.jsonl")), "--checkpoint", str(ldc_checkpoint), "--out",
              str(tmp_path / "o.txt"), check=False)
    assert bad.returncode == 2 and "NAME.jsonl" in bad.stderr
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio_filepath": "' + str(shared("ldc93s1", "LDC93S1.wav")) + '"}\nnot json\n{"text": "x"}\n')
    res = cli("label", str(manifest), "--checkpoint", str(ldc_checkpoint), "--out", str(tmp_path / "ok.jsonl"))
    assert json.loads(res.stdout)["kept"] == 1 and "2 source lines skipped" in res.stderr


def test_labels_labelled_again_keep_their_first_reference(ldc_checkpoint, tmp_path, cli):
    first, second = tmp_path / "round1.jsonl", tmp_path / "round2.jsonl"
    cli("label", str(shared("ldc93s1", "manifest.jsonl")), "--checkpoint", str(ldc_checkpoint), "--out", str(first))
    rows = _lines(first)
    rows[0]["text"] = "a label that was wrong"  # what a weaker first model might have said
    first.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cli("label", str(first), "--checkpoint", str(ldc_checkpoint), "--out", str(second))
    again = {r["audio_filepath"]: r for r in _lines(second)}
    for r in rows:  # the reference is still the source manifest's text, not the earlier label
        assert again[r["audio_filepath"]]["reference"].startswith("She had your dark suit")
        assert "rejected" not in again[r["audio_filepath"]]


@pytest.mark.slow
def test_self_training_fine_tunes_on_the_labels_beside_the_transcribed_data(ldc_checkpoint, sources, tmp_path):
    """docs/training.md's self-training: label, then train from the labelling model on its labels mixed with the
    transcribed manifest."""
    from tests.conftest import data_root, run_cli

    labels = tmp_path / "labels.jsonl"
    run_cli("-q", "label", *sources, "--checkpoint", str(ldc_checkpoint), "--out", str(labels))
    out = tmp_path / "self"
    run_cli("-q", "train", "--config", "configs/ldc93s1.yaml", data_root("ldc93s1"), "data.train_manifest=",
            "data.train_slice=[]", f"data.mix=[manifest.jsonl, {labels}]", f"trainer.init_from={ldc_checkpoint}",
            "trainer.max_epochs=0", "trainer.max_steps=3", "trainer.target_wer=-1", f"trainer.out_dir={out}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    start = next(r for r in rows if r["kind"] == "start")
    val = [r for r in rows if r["kind"] == "val"][-1]
    assert val["samples_labels"] >= 1 and val["samples_manifest"] >= 1  # both domains drawn, by their file's name
    assert val["bad_audio"] == val["bad_text"] == 0
    assert start["step"] == 0 and rows[-1]["kind"] == "stop" and rows[-1]["step"] == 3


@pytest.fixture
def four_copies(tmp_path):
    """LDC93S1 (16 kHz) four times with 1.2 s of silence between: (path, [(start, end) s of each copy])."""
    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    gap = np.zeros(int(1.2 * rate), np.float32)
    path = tmp_path / "four.wav"
    sf.write(path, np.concatenate([wav, gap, wav, gap, wav, gap, wav]), rate)
    step = (len(wav) + len(gap)) / rate
    return path, [(k * step, k * step + len(wav) / rate) for k in range(4)]


def _in_pauses(lines, copies):
    """Each line's segment holds one copy whole and reaches no further than the silence around it."""
    for line, (a, b), before, after in zip(lines, copies, [(0, 0), *copies], [*copies[1:], (1e9, 1e9)]):
        assert before[1] - 1e-3 <= line["offset"] <= a and b - 1e-3 <= line["offset"] + line["duration"] <= after[0]


def test_a_long_recording_is_cut_at_its_pauses_into_segments_training_reads(ldc_checkpoint, four_copies, tmp_path,
                                                                           cli):
    path, copies = four_copies
    out = tmp_path / "labels.jsonl"
    res = json.loads(cli("label", str(path), "--checkpoint", str(ldc_checkpoint), "--out", str(out), "--max-seconds",
                         "6").stdout)  # two copies with their pause: 7 s
    lines = _lines(out)
    assert res["kept"] == 4 and res["this_run"]["segmented"] == 1 and not _lines(tmp_path / "labels.rejected.jsonl")
    assert [x["segment"] for x in lines] == ["1/4", "2/4", "3/4", "4/4"]
    _in_pauses(lines, copies)
    asr = Transcriber(ldc_checkpoint)
    whole = asr.transcribe_file(path)
    said = [asr.transcribe_batch([load_audio(path, 16000, offset=x["offset"], duration=x["duration"])])[0]
            for x in lines]
    assert [x["text"] for x in lines] == [s["text"] for s in said]  # what the model says of the segment alone
    assert " ".join(x["text"] for x in lines) != whole["text"]  # decoded again, not the words of the whole
    for x, s in zip(lines, said):
        assert x["duration"] <= 6
        assert x["confidence"] == pytest.approx(sum(w["confidence"] for w in s["words"]) / len(s["words"]), abs=1e-4)
    utts, report = read_manifest(out, normalize=asr.comps.normalizer, oov=asr.comps.tokenizer.oov)
    assert report.kept == 4 and [u.offset for u in utts] == [x["offset"] for x in lines]
    assert all(u.load(16000).shape[0] == pytest.approx(u.duration * 16000, abs=1) for u in utts)
    again = tmp_path / "again.jsonl"  # its segments labelled again (a second round): each as the segment it names
    cli("label", str(out), "--checkpoint", str(ldc_checkpoint), "--out", str(again), "--max-seconds", "6")
    relabelled = sorted(_lines(again), key=lambda x: x["offset"])
    assert [(x["offset"], x["text"]) for x in relabelled] == [(x["offset"], x["text"]) for x in lines]
    assert not any("segment" in x for x in relabelled)


def test_resume_writes_only_the_segments_a_killed_run_left_unwritten(ldc_checkpoint, four_copies, tmp_path, cli):
    path, _ = four_copies
    out = tmp_path / "labels.jsonl"
    args = ("label", str(path), str(shared("ldc93s1", "LDC93S1.wav")), "--checkpoint", str(ldc_checkpoint), "--out",
            str(out), "--max-seconds", "6")
    cli(*args)
    full = _lines(out)
    assert len(full) == 5
    kept = [full[0], full[2], full[4]]  # as if killed after segments 1 and 3 (and the short file) were written
    out.write_text("".join(json.dumps(x) + "\n" for x in kept))
    res = json.loads(cli(*args, "--resume").stdout)
    after = _lines(out)
    assert after[:3] == kept and sorted(map(json.dumps, after)) == sorted(map(json.dumps, full))
    assert res["this_run"]["kept"] == 2 and res["kept"] == 5
    again = json.loads(cli(*args, "--resume").stdout)  # everything there: nothing new
    assert again["this_run"]["kept"] == 0 and len(_lines(out)) == 5


def test_a_utf16_or_binary_manifest_is_one_line_as_every_reader_says_it(ldc_checkpoint, tmp_path, cli):
    """label skipped every line of a UTF-16 manifest (each "not UTF-8") where eval and train say in one line what
    the file is: now it says so too, before any work."""
    row = json.dumps({"audio_filepath": str(shared("ldc93s1", "LDC93S1.wav")), "text": "she"}) + "\n"
    (tmp_path / "u16.jsonl").write_bytes(row.encode("utf-16"))
    (tmp_path / "wav.jsonl").write_bytes(shared("ldc93s1", "LDC93S1.wav").read_bytes())
    for name, words in (("u16.jsonl", "UTF-16"), ("wav.jsonl", "NUL bytes")):
        for command in (["label", "--checkpoint", str(ldc_checkpoint), str(tmp_path / name), "--out",
                         str(tmp_path / "out.jsonl")],
                        ["eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(tmp_path / name)]):
            result = cli(*command, check=False)
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1 and words in lines[0], (command[0], result.stderr)
    assert not (tmp_path / "out.jsonl").exists()
