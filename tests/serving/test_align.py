"""`speechscale align` (serving.align): a known transcript timed on its recording. Ground truth by construction: the
LDC93S1 sentence twice with 1.5 s of silence between lands the second copy's words 4.425 s after the first's, also
when the audio runs through the model in chunks; the sentence's own recording aligns to greedy's word times;
a wrong transcript is aligned with far less confidence; what cannot be aligned is one line, per file or per run."""
import json

import numpy as np
import pytest
import soundfile as sf
import srt

from speechscale.data.audio import load_audio
from tests.conftest import main_cli, shared

LDC = "she had your dark suit in greasy wash water all year"
RAW = "She had your dark suit in greasy wash water all year."


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """LDC93S1, 1.5 s of silence, LDC93S1 again (16 kHz): the second copy starts 4.425 s in."""
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    path = tmp_path_factory.mktemp("align") / "twice.wav"
    sf.write(path, np.concatenate([wav, np.zeros(24000, np.float32), wav]), 16000)
    return path, (len(wav) + 24000) / 16000


def _align(capsys, checkpoint, *args):
    code, out, err = main_cli(capsys, "align", "--checkpoint", str(checkpoint), *args)
    return code, [json.loads(x) for x in out.splitlines() if x.startswith("{")], err


def test_the_second_copys_words_land_where_the_copy_starts_also_through_chunks(ldc_checkpoint, twice, capsys):
    path, shift = twice
    for chunk in ("20", "3"):  # one piece, or pieces cut in the silence (each frame at its own piece's time)
        code, (res,), err = _align(capsys, ldc_checkpoint, str(path), "--text", f"{RAW} {RAW}", "--chunk-seconds",
                                   chunk)
        words = res["words"]
        assert code == 0 and res["text"] == f"{LDC} {LDC}" and [w["word"] for w in words] == (LDC + " " + LDC).split()
        first, second = words[:11], words[11:]
        # the words beside the silence may stretch into it (this model learned one utterance, never a pause);
        # every other edge moves by the shift (pieces cut inside speech see less context: a frame or few)
        for k, (a, b) in enumerate(zip(first, second)):
            assert k == 0 or abs(b["start"] - (a["start"] + shift)) <= 0.15, (chunk, a, b)
            assert k == 10 or abs(b["end"] - (a["end"] + shift)) <= 0.15, (chunk, a, b)
        assert first[-1]["start"] < 2.925 and second[0]["end"] > shift and words[-1]["end"] <= res["duration"]


def test_a_recording_aligns_to_greedys_word_times_and_a_wrong_text_with_little_confidence(ldc_checkpoint, capsys,
                                                                                          tmp_path):
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    code, (res,), _ = _align(capsys, ldc_checkpoint, wav, "--text", RAW)
    _, out, _ = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--json", wav)
    greedy = json.loads(out)["words"]
    assert code == 0 and [(w["word"], w["start"]) for w in res["words"]] == [(w["word"], w["start"]) for w in greedy]
    assert [w["end"] for w in res["words"]] == [min(w["end"], res["duration"]) for w in greedy]
    _, (wrong,), _ = _align(capsys, ldc_checkpoint, wav, "--text", "yes no yes no yes no yes no")
    mean = [sum(w["confidence"] for w in r["words"]) / len(r["words"]) for r in (res, wrong)]
    assert mean[1] < 0.5 * mean[0], mean
    import speechscale

    model = speechscale.load(ldc_checkpoint, device="cpu")
    assert model.align(wav, RAW).to_dict()["words"] == res["words"]  # the Python API
    with pytest.raises(ValueError, match="nothing to align"):
        model.align(wav, "?!")
    onnx = tmp_path / "model.onnx"  # the exported model aligns as the checkpoint does
    assert main_cli(capsys, "-q", "export", "--checkpoint", str(ldc_checkpoint), "--format", "onnx", "--out",
                    str(onnx))[0] == 0
    code, _, err = main_cli(capsys, "align", "--checkpoint", str(onnx), wav, "--text", RAW)
    assert code == 2 and "add --backend onnx" in err and len(err.strip().splitlines()) == 1, err
    code, (exported,), _ = _align(capsys, onnx, "--backend", "onnx", wav, "--text", RAW)
    assert code == 0 and [(w["word"], w["start"]) for w in exported["words"]] == \
        [(w["word"], w["start"]) for w in res["words"]]
    code, out, _ = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), wav, "--text", RAW, "--format", "srt")
    assert code == 0 and " ".join(c.content.replace("\n", " ") for c in srt.parse(out)) == LDC


def test_a_manifest_aligns_each_utterance_and_a_file_that_cannot_be_aligned_fails_alone(ldc_checkpoint, tmp_path,
                                                                                         capsys):
    rows = [{"audio_filepath": str(shared("ldc93s1", name)), "duration": 2.925, "text": text} for name, text in
            [("LDC93S1.wav", RAW), ("LDC93S1_pcms16le_1_8000.wav", RAW), ("LDC93S1.wav", " ".join([RAW] * 20)),
             ("LDC93S1.wav", "?! ...")]]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, results, _ = _align(capsys, ldc_checkpoint, "--manifest", str(manifest))
    assert code == 1 and len(results) == 4
    assert [w["word"] for w in results[0]["words"]] == [w["word"] for w in results[1]["words"]] == LDC.split()
    assert "longer than the audio lets the model spell" in results[2]["error"]
    assert "nothing to align" in results[3]["error"]


def test_align_says_in_one_line_what_it_needs(ldc_checkpoint, capsys, tmp_path):
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    for args, expected in [([wav], "align one FILE to its --text"),
                           ([wav, wav, "--text", RAW], "align one FILE to its --text"),
                           (["--manifest", str(tmp_path / "m.jsonl"), wav], "give no FILE or --text"),
                           ([wav, "--text", RAW, "--chunk-seconds", "0.5"], "at least 1 s")]:
        code, _, err = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), *args)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, (args, err)
