"""The decoding bench: a training-text LM and lexicon, then each decoder through the real CLI."""
import json

import pytest

from benchmarks.decoding import DECODERS, bench_decoding, split_manifest
from tests.conftest import shared


def test_split_manifest_keeps_matching_rows_with_absolute_audio_paths(tmp_path):
    src = tmp_path / "m.jsonl"
    rows = [{"audio_filepath": f"a/{n}.wav", "duration": 1.0, "text": "x", "speaker": n} for n in ("ann", "bob", "cy")]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = split_manifest(src, {"speaker": ["bob", "cy"]}, tmp_path / "out.jsonl")
    assert [r["speaker"] for r in rows] == ["bob", "cy"]
    written = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert written == rows and written[0]["audio_filepath"] == str(tmp_path / "a" / "bob.wav")


@pytest.mark.slow  # six CLI processes
@pytest.mark.protocol
def test_each_decoder_scores_the_overfit_utterance(tmp_path, ldc_checkpoint):
    manifest = shared("ldc93s1", "manifest.jsonl")
    test = tmp_path / "test.jsonl"
    (row,) = split_manifest(manifest, {"sample_rate": [16000]}, test)
    text = row["text"].lower().rstrip(".")
    rows = bench_decoding(ldc_checkpoint, test, [text], tmp_path / "work")
    assert [r["decoder"] for r in rows] == list(DECODERS)
    # overfit: every decoder (greedy, beam, beam + LM, lexicon, lexicon + LM) reads it exactly
    assert [(r["decoder"], r["utterances"], r["wer"], r["cer"]) for r in rows] == [(n, 1, 0.0, 0.0) for n in DECODERS]
    lexicon = (tmp_path / "work" / "lexicon.txt").read_text().split()
    assert lexicon == sorted(set(text.split())) and (tmp_path / "work" / "lm.arpa").is_file()
    assert [r["lm_order"] for r in rows] == [None, None, 2, None, 2]
