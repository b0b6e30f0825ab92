"""`python -m benchmarks.selftrain`: fine-tuning on a model's own labels of an unseen voice, against the control."""
import json

import pytest

from benchmarks import selftrain, tables
from speechscale.data.synth import TEST_VOICE, synthesize_corpus
from speechscale.training.trainer import Trainer
from tests.training.tiny import ldc_config


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_the_pool_never_holds_a_sentence_of_the_test_set(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    synthesize_corpus(work / "pool", minutes=0.05, test_minutes=0.3, seed=1, progress=False)
    said = _rows(work / "pool" / "test.jsonl")
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"audio_filepath": "x.wav", "duration": 1.0, "text": said[0]["text"]}) + "\n")
    pool, left_out = selftrain.make_pool(work, 0.3, 1, test)
    rows = _rows(pool)
    assert left_out == sum(r["text"] == said[0]["text"] for r in said) >= 1
    assert len(rows) == len(said) - left_out and said[0]["text"] not in {r["text"] for r in rows}
    assert {r["speaker"] for r in rows} == {TEST_VOICE} and all(r["audio_filepath"].startswith("/") for r in rows)


@pytest.mark.slow
@pytest.mark.protocol  # a measurement protocol end to end: make test-evidence
def test_each_arm_fine_tunes_the_teacher_on_the_training_data_and_its_labels(tmp_path):
    data = tmp_path / "demo"
    synthesize_corpus(data, minutes=0.3, test_minutes=0.1, seed=0, progress=False)
    teacher_run = tmp_path / "teacher"
    Trainer(ldc_config(teacher_run, "features.sample_rate=16000", "trainer.max_steps=2")).fit()  # the demo's features
    out, work = tmp_path / "selftrain.json", tmp_path / "work"
    argv = ["--teacher", str(teacher_run / "checkpoints" / "last.pt"), "--data", str(data), "--work", str(work),
            "--pool-minutes", "0.2", "--steps", "2", "--min-confidence", "0.5", "--seeds", "1", "--out", str(out)]
    assert selftrain.main(argv) == 0
    res = json.loads(out.read_text())["results"]
    assert [(r["arm"], r.get("seed"), r.get("reused")) for r in res["arms"]] == \
        [("teacher", None, None)] + [(a, 1, False) for a in ("control", "greedy", "lm", "lm-confident")]
    train = _rows(data / "train.jsonl")
    for name, labels in (("control", []), ("greedy", _rows(work / "labels-greedy.jsonl")),
                         ("lm", _rows(work / "labels-lm.jsonl")),
                         ("lm-confident", [r for r in _rows(work / "labels-lm.jsonl") if r["confidence"] >= 0.5])):
        used = _rows(work / f"train-{name}.jsonl")
        assert len(used) == len(train) + len(labels) and used[len(train):] == labels
        arm = next(r for r in res["arms"] if r["arm"] == name)
        assert arm["steps"] == 2 and arm["utterances"] == len(labels) and set(arm) >= {"greedy", "lm"}
    assert res["pool_utterances"] == len(_rows(work / "pool.jsonl"))
    block = tables.render("selftrain-demo", json.loads(out.read_text()))
    assert "the control" in block and "+ the LM's labels ≥ 0.5" in block
    # a second seed trains; the first seed's finished runs are scored again, not retrained
    stamp = (work / "control-seed1" / "checkpoints" / "last.pt").stat().st_mtime_ns
    assert selftrain.main([*argv[:-4], "--seeds", "1,2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    assert [(r.get("seed"), r.get("reused")) for r in res["arms"][1:]] == [(1, True)] * 4 + [(2, False)] * 4
    assert (work / "control-seed1" / "checkpoints" / "last.pt").stat().st_mtime_ns == stamp
    block = tables.render("selftrain-demo", json.loads(out.read_text()))
    control = next(line for line in block.splitlines() if line.startswith("| training data only"))
    by_seed = [100 * r["greedy"]["wer"] for r in res["arms"] if r["arm"] == "control"]
    assert "once on each seed (1, 2)" in block and " / ".join(f"{x:.1f}" for x in by_seed) + " %" in control
