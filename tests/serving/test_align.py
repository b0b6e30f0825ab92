"""`speechscale align` (inference.align): a known transcript timed on its recording. Ground truth by construction: the
LDC93S1 sentence twice with 1.5 s of silence between lands the second copy's words 4.425 s after the first's, also
when the audio runs through the model in chunks; long audio is aligned in segments with the times of one search;
the sentence's own recording aligns to greedy's word times;
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


def test_words_are_matched_by_least_edits_also_in_a_text_that_repeats():
    """In a text that repeats, heard with one copy garbled and each "year she" heard as one word, every heard copy is
    paired with its own copy of the text (a longest-block-first matcher such as difflib's pairs a later one);
    missing, extra and changed words are edits; the text's tail past the heard words is free."""
    from difflib import SequenceMatcher

    from speechscale.inference.align import match_words

    copy = "she had your dark suit in greasy wash water all year".split()  # 11 words
    said, mid = copy * 5, copy[1:10]  # "had" ... "all"
    garbled = ["had", "yor", "dsh", "ark", "suet", "in", "grisy", "wash", "woter", "al", "yeae"]
    heard = ["she", *mid, "yeae", *garbled, *mid, "yeae", *mid, "year"]  # "year she" heard as "yeae"
    pairs = match_words(said, heard)
    assert all(said[i] == heard[j] for i, j in pairs) and pairs == sorted(pairs)
    assert [(i, j) for i, j in pairs if j >= 22] == [(i + 1, i) for i in range(22, 31)] + [(i + 2, i) for i in range(32, 42)]
    blocks = SequenceMatcher(None, said, heard, autojunk=False).get_matching_blocks()
    assert (12, 32, 10) in [tuple(m) for m in blocks]  # a longest-block matcher pairs copy 2 of the text with copy 4
    assert match_words(["a", "b", "c", "d"], ["a", "x", "c"]) == [(0, 0), (2, 2)]
    assert match_words(["a", "b", "c", "d"], ["a", "c", "d"]) == [(0, 0), (2, 1), (3, 2)]  # "b" missed
    assert match_words(["a", "b", "c"], ["a", "z", "b", "c"]) == [(0, 0), (1, 2), (2, 3)]  # "z" heard in between
    assert match_words(["a", "b"], []) == [] and match_words([], ["a"]) == []


def test_long_audio_is_aligned_a_segment_at_a_time_with_the_times_of_one_search(ldc_checkpoint, monkeypatch):
    """Eight copies of LDC93S1 between pauses of 0.4-1.8 s (36 s), aligned in segments of about 8 s: the cuts fall
    between words both texts agree on, each copy's words land at its own start, and the words are those of one
    search over the whole file to within a frame, except beside a cut. Without any point to cut at, a segment too
    big to search is one line."""
    from speechscale.inference import align
    from speechscale.inference.transcribe import Transcriber

    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    gaps = [0.4, 1.8, 0.7, 1.2, 0.5, 1.5, 0.9, 0.6]
    audio = np.concatenate([x for g in gaps for x in (wav, np.zeros(int(g * 16000), np.float32))])
    copies = [sum(len(wav) / 16000 + g for g in gaps[:k]) for k in range(len(gaps))]  # each copy's start (s)
    asr = Transcriber(ldc_checkpoint)
    text = " ".join([RAW] * len(gaps))
    one = align.align_waveform(asr, audio, text, segment_seconds=1e9)["words"]
    log_probs, starts, _ = align.frame_log_probs(asr, audio)
    cuts = align.segment_cuts(log_probs, text.lower().replace(".", "").split(), asr.comps.tokenizer,
                              round(len(starts) * 8 / starts[-1]))
    assert len(cuts) >= 5 and [f for f, _ in cuts] == sorted({f for f, _ in cuts}), cuts
    res = align.align_waveform(asr, audio, text, segment_seconds=8)
    words = res["words"]
    import speechscale

    assert speechscale.load(ldc_checkpoint, device="cpu").align(audio, text, 16000, segment_seconds=8).to_dict() == res
    assert [w["word"] for w in words] == [w["word"] for w in one] == (" ".join([LDC] * len(gaps))).split()
    frame = starts[1] - starts[0]
    near_cut = {w for f, w in cuts} | {w - 1 for f, w in cuts}  # the words on either side of a cut
    for k, (a, b) in enumerate(zip(words, one)):
        if k not in near_cut:
            assert abs(a["start"] - b["start"]) <= frame + 1e-6 and abs(a["end"] - b["end"]) <= frame + 1e-6, (k, a, b)
    first = words[:11]
    for c, start in enumerate(copies):  # interior words: the first copy's, moved by the copy's start
        for a, b in list(zip(first, words[11 * c:11 * c + 11]))[1:-1]:
            assert abs(b["start"] - (a["start"] + start)) <= 0.15, (c, a, b)
    monkeypatch.setattr(align, "MAX_SEARCH_CELLS", 10 ** 5)
    with pytest.raises(align.AlignError, match="agrees with the text") as info:
        align.align_waveform(asr, audio, " ".join(["yes no"] * 40), segment_seconds=8)
    assert "\n" not in str(info.value)
    for bad in [0, -1, float("nan"), 4.9]:  # through the API too: a segment of no length would never end
        with pytest.raises(align.AlignError, match="segments must be at least 5 s long"):
            speechscale.load(ldc_checkpoint, device="cpu").align(audio, text, 16000, segment_seconds=bad)
    with pytest.raises(align.AlignError, match="must be a string, got int"):
        align.align_waveform(asr, audio, 123)


def test_the_cli_reads_a_long_transcript_from_a_file_and_aligns_it_in_segments(ldc_checkpoint, tmp_path, capsys):
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    audio = np.concatenate([x for g in (0.6, 1.4, 0.8, 1.1, 0.5, 1.6) for x in (wav, np.zeros(int(g * 16000), np.float32))])
    sf.write(tmp_path / "long.wav", audio, 16000)
    (tmp_path / "long.txt").write_text("\n".join([RAW] * 6) + "\n", encoding="utf-8")
    runs = [_align(capsys, ldc_checkpoint, str(tmp_path / "long.wav"), "--text-file", str(tmp_path / "long.txt"),
                   "--segment-seconds", seconds) for seconds in ("120", "10")]  # one search; segments
    (one,), (cut,) = runs[0][1], runs[1][1]
    assert runs[0][0] == runs[1][0] == 0 and one["text"] == cut["text"] == " ".join([LDC] * 6)
    assert [w["word"] for w in cut["words"]] == [w["word"] for w in one["words"]] == one["text"].split()
    assert max(abs(a[k] - b[k]) for a, b in zip(one["words"], cut["words"]) for k in ("start", "end")) <= 0.15
    for args, words in [(["--text", RAW, "--text-file", str(tmp_path / "long.txt")], "give the transcript once"),
                        (["--text-file", str(tmp_path / "missing.txt")], "missing.txt: No such file"),
                        (["--text-file", str(tmp_path / "long.wav")], "long.wav: not a text file"),
                        (["--text", RAW, "--segment-seconds", "2"], "at least 5 s")]:
        code, _, err = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), str(tmp_path / "long.wav"), *args)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


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
    code, _, err = main_cli(capsys, "align", "--checkpoint", str(onnx), "--backend", "torch", wav, "--text", RAW)
    assert code == 2 and "not a checkpoint: leave --backend out" in err and len(err.strip().splitlines()) == 1, err
    for backend in (["--backend", "onnx"], []):  # said, or found from the file
        code, (exported,), _ = _align(capsys, onnx, *backend, wav, "--text", RAW)
        assert code == 0 and [(w["word"], w["start"]) for w in exported["words"]] == \
            [(w["word"], w["start"]) for w in res["words"]]
    code, out, _ = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), wav, "--text", RAW, "--format", "srt")
    assert code == 0 and " ".join(c.content.replace("\n", " ") for c in srt.parse(out)) == LDC


def test_a_manifest_aligns_each_utterance_and_a_file_that_cannot_be_aligned_fails_alone(ldc_checkpoint, tmp_path,
                                                                                         capsys):
    rows = [{"audio_filepath": str(shared("ldc93s1", name)), "duration": 2.925, "text": text} for name, text in
            [("LDC93S1.wav", RAW), ("LDC93S1_pcms16le_1_8000.wav", RAW), ("LDC93S1.wav", " ".join([RAW] * 20)),
             ("LDC93S1.wav", "?! ..."), ("LDC93S1.wav", "She had your dark suit in Ærøskøbing.")]]
    manifest = tmp_path / "m.jsonl"
    no_duration = {"audio_filepath": str(shared("ldc93s1", "LDC93S1.wav")), "text": RAW}
    manifest.write_text("".join(json.dumps(r) + "\n" for r in [*rows, no_duration]))
    code, results, err = _align(capsys, ldc_checkpoint, "--manifest", str(manifest))
    assert code == 1 and len(results) == 5
    assert "5 utterances kept, 1 skipped (1 missing key) e.g. line 6: missing key: duration" in err  # said, not lost
    manifest.write_text(json.dumps(no_duration) + "\n")
    code, _, err = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest))
    assert code == 2 and "nothing to align" in err and len(err.strip().splitlines()) == 1
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [w["word"] for w in results[0]["words"]] == [w["word"] for w in results[1]["words"]] == LDC.split()
    assert "longer than the audio lets the model spell" in results[2]["error"]
    assert "nothing to align" in results[3]["error"]
    assert "characters the model does not spell: 'æø'" in results[4]["error"]  # named, not a crash


def test_align_says_in_one_line_what_it_needs(ldc_checkpoint, capsys, tmp_path):
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    for args, expected in [([wav], "align one FILE to its --text"),
                           ([wav, wav, "--text", RAW], "align one FILE to its --text"),
                           (["--manifest", str(tmp_path / "m.jsonl"), wav], "give no FILE or --text"),
                           ([wav, "--text", RAW, "--chunk-seconds", "0.5"], "at least 1 s"),
                           ([wav, "--text", RAW, "--max-seconds", "9"], "give it too"),
                           ([wav, "--text", RAW, "--resume"], "give it too"),
                           ([wav, "--text", RAW, "--out-manifest", str(tmp_path / "x.txt")], "name it NAME.jsonl"),
                           ([wav, "--text", RAW, "--out-manifest", str(tmp_path / "x.jsonl"), "--format", "srt"],
                            "give one")]:
        code, _, err = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), *args)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, (args, err)


def test_out_manifest_cuts_an_aligned_recording_into_training_lines_at_its_pauses(ldc_checkpoint, tmp_path, capsys):
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    gap = np.zeros(int(1.2 * 16000), np.float32)
    path = tmp_path / "four.wav"
    sf.write(path, np.concatenate([wav, gap, wav, gap, wav, gap, wav]), 16000)
    step, length = (len(wav) + len(gap)) / 16000, len(wav) / 16000
    out = tmp_path / "book.jsonl"
    code, results, _ = _align(capsys, ldc_checkpoint, str(path), "--text", " ".join([RAW] * 3 + ["yes no maybe so"]),
                              "--out-manifest", str(out), "--max-seconds", "6", "--min-confidence", "0.5")
    kept = [json.loads(x) for x in out.read_text().splitlines()]
    dropped = [json.loads(x) for x in (tmp_path / "book.rejected.jsonl").read_text().splitlines()]
    (per_file, summary) = results
    assert code == 0 and per_file["segments"] == 4 and per_file["kept"] == 3
    assert summary["kept"] == 3 and summary["rejected"] == {"low confidence": 1}
    lines = sorted(kept + dropped, key=lambda x: x["offset"])
    assert " ".join(x["text"] for x in lines) == " ".join([LDC] * 3 + ["yes no maybe so"])  # every word once
    assert [x["segment"] for x in lines] == ["1/4", "2/4", "3/4", "4/4"] and dropped == [lines[3]]
    assert lines[3]["text"] == "yes no maybe so" and lines[3]["confidence"] < 0.5 <= min(x["confidence"] for x in kept)
    for k, x in enumerate(lines):  # each holds its copy whole, within the silence around it
        a, b = k * step, k * step + length
        assert max(0, a - 1.2) <= x["offset"] <= a and b - 1e-3 <= x["offset"] + x["duration"] <= b + 1.2
    code, _, err = main_cli(capsys, "align", "--checkpoint", str(ldc_checkpoint), str(path), "--text", RAW,
                            "--out-manifest", str(out))
    assert code == 2 and "holds lines already" in err and len(err.strip().splitlines()) == 1
    segments = tmp_path / "segments.jsonl"  # a manifest of segments: each aligned alone, timed in the recording
    segments.write_text("".join(json.dumps({"audio_filepath": str(path), "offset": round(k * step - 0.3, 3),
                                            "duration": round(length + 0.6, 3), "text": RAW}) + "\n" for k in (1, 2)))
    code, results, _ = _align(capsys, ldc_checkpoint, "--manifest", str(segments))
    assert code == 0 and [r["offset"] for r in results] == [round(k * step - 0.3, 3) for k in (1, 2)]
    for k, r in zip((1, 2), results):
        assert [w["word"] for w in r["words"]] == LDC.split()
        assert r["offset"] <= r["words"][0]["start"] and r["words"][-1]["end"] <= r["offset"] + length + 0.6 + 1e-3
        assert abs(r["words"][3]["start"] - results[0]["words"][3]["start"] - (k - 1) * step) < 0.05  # same place
    cut = tmp_path / "cut.jsonl"  # segments of segments: offsets in the recording
    code, _, _ = _align(capsys, ldc_checkpoint, "--manifest", str(segments), "--out-manifest", str(cut),
                        "--max-seconds", "6")
    lines = [json.loads(x) for x in cut.read_text().splitlines()]
    assert code == 0 and len(lines) == 2 and [x["segment"] for x in lines] == ["1/1", "1/1"]
    for k, x in zip((1, 2), lines):
        assert k * step - 0.3 - 1e-3 <= x["offset"] <= k * step and x["offset"] + x["duration"] >= k * step + length
    code, _, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), str(path), "--manifest",
                            str(segments))
    assert code == 2 and "segments of recordings" in err


def test_out_manifest_resumes_a_killed_run_without_losing_or_repeating_a_line(ldc_checkpoint, tmp_path, capsys):
    """The files as a kill leaves them (each recording's lines are on disk before the next is aligned; the last
    line torn): --resume writes what is missing, and skips the recordings whose lines are all there unaligned."""
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    gap = np.zeros(int(1.2 * 16000), np.float32)
    path = tmp_path / "four.wav"
    sf.write(path, np.concatenate([wav, gap, wav, gap, wav, gap, wav]), 16000)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in [
        {"audio_filepath": str(path), "duration": 14.9, "text": " ".join([RAW] * 3 + ["yes no maybe so"])},
        {"audio_filepath": str(shared("ldc93s1", "LDC93S1.wav")), "duration": 2.925, "text": RAW}]))
    out, rejected = tmp_path / "book.jsonl", tmp_path / "book.rejected.jsonl"
    args = ("--manifest", str(manifest), "--out-manifest", str(out), "--max-seconds", "6", "--min-confidence", "0.5")
    code, results, _ = _align(capsys, ldc_checkpoint, *args)
    full = sorted(out.read_text().splitlines() + rejected.read_text().splitlines())
    assert code == 0 and len(full) == 5 and results[-1]["kept"] == 4
    four = [x for x in out.read_text().splitlines() if json.loads(x)["audio_filepath"] == str(path)]
    out.write_text(four[0] + "\n" + four[2] + "\n" + four[1][:40])  # killed while writing segment 2 of 4
    rejected.write_text("")
    code, results, err = _align(capsys, ldc_checkpoint, *args)
    assert code == 2 and "--resume goes on from them" in err
    code, results, _ = _align(capsys, ldc_checkpoint, *args, "--resume")
    after = out.read_text().splitlines()
    assert code == 0 and after[:2] == [four[0], four[2]]  # the torn line cut off, the whole ones kept
    assert sorted(after + rejected.read_text().splitlines()) == full  # every line once
    assert results[0]["segments"] == 4 and results[0]["kept"] == 1 and results[-1]["this_run"]["kept"] == 2
    code, results, _ = _align(capsys, ldc_checkpoint, *args, "--resume")  # all written: nothing aligned again
    assert code == 0 and [r.get("written") for r in results[:2]] == ["already", "already"]
    assert results[-1]["this_run"]["kept"] == 0 and results[-1]["kept"] == 4
    assert sorted(out.read_text().splitlines() + rejected.read_text().splitlines()) == full


def test_a_partial_transcript_is_flagged_and_its_segments_over_untimed_speech_are_rejected(ldc_checkpoint, tmp_path,
                                                                                         cli):
    """A transcript of a fifth of the recording's words aligned at high confidence without a word: align now says
    how much of the speech its words cover and which stretches no word times (a warning line too), and
    --out-manifest rejects the segments that hold such speech rather than train them as the words it has."""
    words = "she had your dark suit in greasy wash water all year"
    twice = np.concatenate([load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)] * 2)
    sf.write(tmp_path / "twice.wav", twice, 16000)
    whole = json.loads(cli("align", "--checkpoint", str(ldc_checkpoint), str(tmp_path / "twice.wav"), "--text",
                           f"{words} {words}").stdout)
    assert whole["speech_covered"] >= 0.9 and whole["untimed"] == []
    part = cli("align", "--checkpoint", str(ldc_checkpoint), str(tmp_path / "twice.wav"), "--text", "she had your dark")
    res = json.loads(part.stdout)
    assert res["speech_covered"] < 0.6 and res["untimed"], res
    assert "of the speech" in part.stderr and "warning" in part.stderr
    duration = len(twice) / 16000
    assert all(0 <= a < b <= duration + 1e-3 and b - a >= 0.5 for a, b in res["untimed"])
    assert all(not (w["start"] < b and w["end"] > a) for w in res["words"] for a, b in res["untimed"])
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio_filepath": "twice.wav", "duration": duration,
                                                  "text": "she had your dark"}) + "\n")
    cli("-q", "align", "--checkpoint", str(ldc_checkpoint), "--manifest", str(tmp_path / "m.jsonl"),
        "--out-manifest", str(tmp_path / "out.jsonl"), "--max-seconds", "3")
    rejected = [json.loads(x) for x in (tmp_path / "out.rejected.jsonl").read_text().splitlines()]
    kept = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert any(r["rejected"] == "untimed speech" for r in rejected)
    for line in kept:  # no kept line holds untimed speech
        assert all(not (line["offset"] < b and line["offset"] + line["duration"] > a) for a, b in res["untimed"])
