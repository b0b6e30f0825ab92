"""`python -m benchmarks.longform`: long recordings cut by align and label, scored against where their sentences
are, and fine-tuning on the segments beside the same sentences cut by hand."""
import json

import numpy as np
import pytest
import soundfile as sf

from benchmarks import longform, tables
from speechscale.data.synth import synthesize_corpus
from speechscale.decoding.metrics import ErrorRate
from speechscale.inference.transcribe import Transcriber
from speechscale.training.trainer import Trainer
from tests.conftest import shared
from tests.training.tiny import ldc_config


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _fsdd(n):
    fsdd = shared("fsdd")
    rows = _rows(fsdd / "manifest.jsonl")[:n]
    return [{**r, "audio_filepath": str(fsdd / r["audio_filepath"])} for r in rows]


def test_joined_recordings_hold_each_sentence_where_its_span_says(tmp_path):
    pool = _fsdd(7)
    recs = longform.join_pool(pool, 3, seed=0, folder=tmp_path)
    assert [len(r["spans"]) for r in recs] == [3, 3, 1]
    for rec, rows in zip(recs, [pool[0:3], pool[3:6], pool[6:7]]):
        wav, rate = sf.read(rec["audio_filepath"], dtype="float32")
        assert rec["duration"] == pytest.approx(len(wav) / rate, abs=1e-4) and rec["text"] == " ".join(
            r["text"] for r in rows)
        for (a, b, text), row in zip(rec["spans"], rows):
            own, _ = sf.read(row["audio_filepath"], dtype="float32")
            assert text == row["text"] and np.array_equal(wav[round(a * rate):round(b * rate)], own)
        for (_, end, _), (start, _, _) in zip(rec["spans"], rec["spans"][1:]):  # silence of 0.25-1 s between two
            assert 0.25 - 1e-3 <= start - end <= 1.0 + 1e-3 and not np.abs(wav[round(end * rate):round(start * rate)]).any()


def test_cut_quality_counts_cuts_inside_sentences_and_scores_text_against_the_sentences_held(tmp_path):
    (rec,) = longform.join_pool(_fsdd(3), 3, seed=0, folder=tmp_path)
    (a0, b0, t0), (a1, b1, t1), (a2, b2, t2) = rec["spans"]
    path = rec["audio_filepath"]
    exact = [{"audio_filepath": path, "offset": 0.0, "duration": (a1 + b0) / 2, "text": t0},
             {"audio_filepath": path, "offset": (a1 + b0) / 2, "duration": rec["duration"] - (a1 + b0) / 2,
              "text": f"{t1} {t2}"}]
    q = longform.cut_quality(exact, [rec])
    assert q["segments"] == 2 and q["cuts"] == 2 and q["cuts_in_pauses"] == 2 and q["wer_vs_truth"] == 0.0
    inside = (a1 + b1) / 2 + 0.01  # past the second sentence's middle: its text belongs before the cut, not after
    bad = [{"audio_filepath": path, "offset": 0.0, "duration": inside, "text": t0},
           {"audio_filepath": path, "offset": inside, "duration": rec["duration"] - inside, "text": f"{t1} {t2}"}]
    q = longform.cut_quality(bad, [rec])
    assert q["cuts_in_pauses"] == 0 and q["share_in_pauses"] == 0.0
    words = len(f"{t0} {t1} {t2}".split())
    assert q["wer_vs_truth"] == pytest.approx(2 * len(t1.split()) / words, abs=1e-4)  # deleted once, inserted once


@pytest.mark.slow
@pytest.mark.protocol  # a measurement protocol end to end: make test-evidence
def test_each_arm_fine_tunes_on_the_cut_segments_and_the_block_renders(tmp_path):
    data = tmp_path / "demo"
    synthesize_corpus(data, minutes=0.3, test_minutes=0.1, seed=0, progress=False)
    teacher_run = tmp_path / "teacher"
    Trainer(ldc_config(teacher_run, "features.sample_rate=16000", "trainer.max_steps=2")).fit()
    out, work = tmp_path / "longform.json", tmp_path / "work"
    argv = ["--teacher", str(teacher_run / "checkpoints" / "last.pt"), "--data", str(data), "--work", str(work),
            "--pool-minutes", "0.3", "--per-recording", "4", "--max-seconds", "4", "--short-seconds", "3", "--steps", "2",
            "--seeds", "1", "--out", str(out)]
    assert longform.main(argv) == 0
    res = json.loads(out.read_text())["results"]
    arms = ("control", "lm", "sentences-true", "long-align", "long-label", "long-align-short")
    assert [(r["arm"], r.get("seed")) for r in res["arms"]] == [("teacher", None)] + [(a, 1) for a in arms]
    pool = _rows(work / "pool.jsonl")
    assert res["recordings"] == -(-len(pool) // 4) and res["pool_utterances"] == len(pool)
    for name, source, longest in (("long-align", "long-align.jsonl", 4), ("long-label", "long-label.jsonl", 4),
                                  ("long-align-short", "long-align-short.jsonl", 3)):
        lines = _rows(work / source)
        assert lines and all(x["duration"] <= longest + 1e-3 for x in lines) and any("segment" in x for x in lines)
        used = _rows(work / f"train-{name}.jsonl")
        assert used[-len(lines):] == lines and next(r for r in res["arms"] if r["arm"] == name)["steps"] == 2
    assert res["cuts"]["align"]["segments"] == len(_rows(work / "long-align.jsonl"))
    assert set(res["ablation"]) == {"align/audio", "align/word_times", "greedy/audio", "greedy/word_times",
                                    "greedy/audio/again"}
    assert res["ablation"]["greedy/audio/again"]["segments"] == res["ablation"]["greedy/audio"]["segments"]
    asr = Transcriber(teacher_run / "checkpoints" / "last.pt")  # each file alone, not in batches
    wer = ErrorRate()
    for row in pool:
        wer.update([row["text"]], [asr.transcribe_file(row["audio_filepath"])["text"]])
    assert res["sentences_greedy_wer"] == pytest.approx(wer.wer, abs=1e-4)
    assert "greedy on each sentence's own file" in tables.render("longform-demo", json.loads(out.read_text()))
    block = tables.render("longform-demo", json.loads(out.read_text()))
    assert "`align --out-manifest` (the true text)" in block and "+ the long recordings' segments, `label`" in block
