"""`python -m benchmarks.chunking`: long recordings transcribed whole, cut into chunks each arm's way, scored against
their sentences; the noise it adds and the block it renders."""
import json

import numpy as np
import pytest

from benchmarks import chunking, longform, tables
from speechscale.data.audio import load_audio
from speechscale.data.synth import synthesize_corpus
from speechscale.decoding.metrics import ErrorRate
from speechscale.inference.transcribe import Transcriber, pause_chunks
from speechscale.training.trainer import Trainer
from tests.conftest import shared
from tests.training.tiny import ldc_config


def _fsdd(n):
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()][:n]
    return [{**r, "audio_filepath": str(fsdd / r["audio_filepath"])} for r in rows]


def test_noise_is_added_at_the_snr_asked_and_each_arm_cuts_its_own_way(tmp_path):
    (rec,) = longform.join_pool(_fsdd(6), 6, seed=0, folder=tmp_path)
    wav = load_audio(rec["audio_filepath"], 8000)
    assert chunking.with_noise(wav, None, 0) is wav
    for snr in (30.0, 15.0):
        noisy = chunking.with_noise(wav, snr, seed=3)
        speech = wav[np.abs(wav) > 1e-4]
        measured = 10 * np.log10(np.mean(speech ** 2) / np.mean((noisy - wav) ** 2))
        assert measured == pytest.approx(snr, abs=0.2)
        assert np.array_equal(noisy, chunking.with_noise(wav, snr, seed=3))  # seeded
    spans = rec["spans"]
    got = chunking.arm_chunks("sentences", wav, 8000, spans, 2.0)
    assert got == [(round(a * 8000), round(b * 8000)) for a, b, _ in spans]
    fixed = chunking.arm_chunks("fixed-auto", wav, 8000, spans, 2.0)
    assert fixed[0][0] == 0 and fixed[-1][1] == len(wav) and all(b - a <= 2 * 8000 for a, b in fixed)
    assert chunking.arm_chunks("pauses-auto-untrimmed", wav, 8000, spans, 2.0) == pause_chunks(wav, 8000, 2.0, trim=False)
    assert chunking.arm_chunks("pauses-20", wav, 8000, spans, 2.0) == pause_chunks(wav, 8000, 20.0)
    assert chunking.arm_chunks("auto", wav, 8000, spans, 2.0) is None
    (joined,) = longform.join_pool(_fsdd(6), 6, seed=0, folder=tmp_path / "as-recorded", gap=(0.0, 0.0))
    files = [load_audio(r["audio_filepath"], 8000) for r in _fsdd(6)]
    np.testing.assert_array_equal(load_audio(joined["audio_filepath"], 8000), np.concatenate(files))  # back to back
    assert [b for _, b, _ in joined["spans"][:-1]] == [a for a, _, _ in joined["spans"][1:]]


@pytest.mark.slow
@pytest.mark.protocol  # a measurement protocol end to end: make test-evidence
def test_every_arm_is_scored_on_every_condition_and_the_block_renders(tmp_path):
    data = tmp_path / "demo"
    synthesize_corpus(data, minutes=0.3, test_minutes=0.1, seed=0, progress=False)
    teacher_run = tmp_path / "teacher"
    Trainer(ldc_config(teacher_run, "features.sample_rate=16000", "trainer.max_steps=2",
                       f"data.train_manifest={data / 'train.jsonl'}", f"data.val_manifest={data / 'test.jsonl'}")).fit()
    teacher = teacher_run / "checkpoints" / "last.pt"
    out, work = tmp_path / "chunking.json", tmp_path / "work"
    argv = ["--teacher", str(teacher), "--data", str(data), "--work", str(work), "--pool-minutes", "0.3",
            "--per-recording", "4", "--snr", "clean,20", "--out", str(out)]
    assert chunking.main(argv) == 0
    res = json.loads(out.read_text())["results"]
    assert set(res["conditions"]) == {"clean", "20"} and all(set(c) == set(chunking.ARMS) for c in res["conditions"].values())
    asr = Transcriber(teacher)
    durations = [json.loads(x)["duration"] for x in (data / "train.jsonl").read_text().splitlines()]
    p90 = np.floor(np.quantile(durations, 0.9, method="inverted_cdf") * 100) / 100  # the card counts 10 ms bins
    assert res["auto_seconds"] == asr.chunk_seconds == pytest.approx(max(1.0, 1.5 * p90), abs=0.02)
    recs = longform.join_pool([json.loads(x) for x in (work / "pool.jsonl").read_text().splitlines()], 4, 1,
                              work / "long")
    wer = ErrorRate()  # the sentences arm recomputed: each span transcribed as a file of its own
    for rec in recs:
        wav = load_audio(rec["audio_filepath"], asr.sample_rate)
        said = [asr.transcribe(wav[round(a * asr.sample_rate):round(b * asr.sample_rate)]) for a, b, _ in rec["spans"]]
        wer.update([rec["text"]], [" ".join(t for t in said if t)])
    clean = res["conditions"]["clean"]
    assert clean["sentences"]["wer"] == pytest.approx(wer.wer, abs=1e-4)
    assert clean["sentences"]["chunks"] == sum(len(r["spans"]) for r in recs)
    assert clean["fixed-20"]["chunks"] == len(recs)  # each recording (under 20 s) one chunk
    block = tables.render("chunking-demo", json.loads(out.read_text()))
    assert "`transcribe`'s default" in block and "WER SNR 20 dB" in block and "Goal, set before this run" in block
    assert "a drawn pause of 0.25-1 s between two" in block
    connected = tmp_path / "connected.json"  # --gap 0,0: the same sentences back to back, in recordings of their own
    assert chunking.main([*argv[:-1], str(connected), "--snr", "clean", "--gap", "0,0"]) == 0
    res = json.loads(connected.read_text())["results"]
    assert res["settings"]["gap_seconds"] == [0.0, 0.0] and (work / "long" / "long-000.wav").is_file()
    joined = longform.join_pool([json.loads(x) for x in (work / "pool.jsonl").read_text().splitlines()], 4, 1,
                                work / "long-0-0", gap=(0.0, 0.0))
    assert all(b == a2 for rec in joined for (_, b, _), (a2, _, _) in zip(rec["spans"], rec["spans"][1:]))
    assert sum(r["duration"] for r in joined) < sum(r["duration"] for r in recs)  # no pause between two
    assert res["conditions"]["clean"]["sentences"]["chunks"] == sum(len(r["spans"]) for r in joined)
    assert "back to back: nothing parts two sentences" in tables.render("chunking-demo-connected",
                                                                        json.loads(connected.read_text()))
    yesno = shared("yesno", "manifest.jsonl")  # real recordings, joined as recorded
    argv = ["--teacher", str(teacher), "--manifest", str(yesno), "--lines", "31:35", "--per-recording", "2", "--snr",
            "clean", "--work", str(tmp_path / "real"), "--out", str(out)]
    assert chunking.main(argv) == 0
    res = json.loads(out.read_text())["results"]
    rows = [json.loads(x) for x in yesno.read_text().splitlines()][31:35]
    assert res["recordings"] == 2 and res["pool_utterances"] == 4 and res["lines"] == "31:35"
    assert res["conditions"]["clean"]["sentences"]["chunks"] == 4
    assert res["recording_minutes"] == pytest.approx(sum(r["duration"] for r in rows) / 60 / 2, abs=0.01)
    block = tables.render("chunking-yesno", json.loads(out.read_text()))
    assert "joined back to back as recorded" in block and "each file alone" in block
