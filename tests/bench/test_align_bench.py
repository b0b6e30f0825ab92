"""`speechscale bench align`: espeak-ng's word events say where each word of a synthesized sentence starts, and the
bench scores `align` and greedy word starts against them, the same sentences for every checkpoint it is given."""
import json

from speechscale.data.espeak import Espeak
from speechscale.data.synth import TEST_VOICE
from tests.conftest import main_cli

TEXT = "the quick brown fox jumps over the lazy dog"


def test_espeak_ng_says_where_each_word_starts():
    tts = Espeak()
    wav = tts.synthesize(TEXT, voice=TEST_VOICE, rate=165, pitch=50)
    events = tts.last_words
    positions = [i for i, c in enumerate(TEXT) if c != " " and (i == 0 or TEXT[i - 1] == " ")]
    assert [w for _, w, _ in events][:3] == ["the", "quick", "brown"] and len(events) >= 6
    assert all(i in positions and TEXT[i:].startswith(w) for i, w, _ in events)
    starts = [t for _, _, t in events]
    assert starts == sorted(starts) and starts[0] == 0.0 and starts[-1] < len(wav) / tts.sample_rate
    # the samples just after a word starts are louder than the silence before the first word ends
    rate = tts.sample_rate
    assert all(abs(wav[int(t * rate):int(t * rate) + rate // 10]).max() > 0.01 for t in starts)


def test_the_bench_scores_the_same_sentences_for_each_checkpoint(ldc_checkpoint, capsys, tmp_path):
    out = tmp_path / "align.json"
    code, stdout, err = main_cli(capsys, "bench", "align", "--checkpoint", f"{ldc_checkpoint},{ldc_checkpoint}",
                                 "--sentences", "2", "--long-minutes", "0.2", "--out", str(out))
    rows = [json.loads(x) for x in stdout.splitlines()]
    assert code == 0 and len(rows) == 2, err
    doc = json.loads(out.read_text())
    assert doc["results"] == rows and doc["settings"] == {"sentences": 2, "seed": 1, "long_minutes": 0.2}
    assert doc["provenance"]["commit"]
    a, b = rows
    assert a["align"] == b["align"] and a["align"]["words"] >= 8  # two sentences of 4 or more words
    assert a["frame_ms"] == 20.0 and a["model"] == "ds2-tiny"
    assert a["align"]["within_50_ms"] <= a["align"]["within_100_ms"]  # shares of the same words, nested
    assert a["align_first"]["words"] <= 2 and a["align_first"]["words"] + a["align_later"]["words"] == a["align"]["words"]
    # the same words from their first letters: never earlier than from the space said before them
    assert a["align_letters"]["words"] == a["align"]["words"] and a["align_letters"]["mean_ms"] >= a["align"]["mean_ms"]
    # the sentences again and again as one recording of 12 s or more: every word espeak-ng timed, scored
    assert a["long"]["minutes"] >= 0.2 and a["long"]["words"] > a["align"]["words"] and a["long"] == b["long"] | {
        "seconds": a["long"]["seconds"]}
