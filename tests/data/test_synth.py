import hashlib
import json

from speechscale.data.synth import TEST_VOICE, TRAIN_VOICES, synthesize_corpus, vocabulary


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_corpus_is_deterministic_and_the_test_voice_is_unseen(tmp_path):
    a = synthesize_corpus(tmp_path / "a", minutes=0.3, seed=7, test_minutes=0.1, progress=False)
    b = synthesize_corpus(tmp_path / "b", minutes=0.3, seed=7, test_minutes=0.1, progress=False)
    assert a == b and _digest(tmp_path / "a") == _digest(tmp_path / "b")
    train = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    test = [json.loads(line) for line in (tmp_path / "a" / "test.jsonl").read_text().splitlines()]
    assert sum(r["duration"] for r in train) >= 18 and len({r["voice"] for r in train}) > 3
    assert {r["voice"] for r in test} == {TEST_VOICE} and TEST_VOICE not in TRAIN_VOICES
    assert all((tmp_path / "a" / r["audio_filepath"]).is_file() for r in train + test)
    assert all(r["speaker"] == r["voice"] for r in train + test)  # what features.normalize=speaker groups by
    c = synthesize_corpus(tmp_path / "c", minutes=0.3, seed=8, test_minutes=0.1, progress=False)
    assert _digest(tmp_path / "c") != _digest(tmp_path / "a") or c != a


def test_grammar_has_several_hundred_words():
    assert len(vocabulary()) >= 300
