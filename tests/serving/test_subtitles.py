"""Subtitles (inference.subtitles, `transcribe --format srt|vtt`): cues break at pauses, at 7 s and where two lines of
42 characters are full, stay inside the audio and never overlap; what they write parses with the `srt` and
`webvtt-py` libraries to the same cues; the CLI writes them for a real recording from greedy and beam words alike,
to standard output or a folder, and says in one line what it cannot do."""
import io

import pytest
import srt
import webvtt

from speechscale.inference.subtitles import make_cues, render, wrap
from tests.conftest import main_cli, shared

LDC = "she had your dark suit in greasy wash water all year"


def _words(spec):
    """[(word, start, end)] -> the words as a transcript holds them."""
    return [{"word": w, "start": a, "end": b, "confidence": 0.9} for w, a, b in spec]


def test_cues_break_at_pauses_at_the_longest_duration_and_where_two_lines_are_full():
    pause = _words([("one", 0.0, 0.3), ("two", 0.4, 0.7), ("three", 1.6, 2.0)])  # 0.9 s before "three"
    assert [c.lines for c in make_cues(pause)] == [["one two"], ["three"]]
    steady = _words([(f"w{i}", 0.5 * i, 0.5 * i + 0.4) for i in range(20)])  # a word every 0.5 s, no pause
    cues = make_cues(steady)
    assert all(c.end - c.start <= 7.0 for c in cues) and len(cues) == 2
    long = _words([(f"word{i:02d}", 0.2 * i, 0.2 * i + 0.15) for i in range(30)])  # 6 characters each, 6 s
    cues = make_cues(long)
    assert all(len(line) <= 42 for c in cues for line in c.lines) and all(len(c.lines) <= 2 for c in cues)
    assert [w for c in cues for line in c.lines for w in line.split()] == [f"word{i:02d}" for i in range(30)]
    assert len(cues) == 3  # 12 words fill two lines of 6 words (41 characters each)
    for a, b in zip(cues, cues[1:]):
        assert a.end <= b.start
    assert make_cues(_words([("late", 9.0, 9.9)]), duration=9.5)[0].end == 9.5
    with pytest.raises(ValueError, match="has no time"):
        make_cues([{"word": "untimed"}])
    # rules out of range were followed into odd cues (lines=0 wrote one line a cue, max_seconds=-1 a word each)
    for rule, said in [({"lines": 0}, "lines must be a whole number >= 1, got 0"),
                       ({"line_chars": 2.5}, "line_chars must be a whole number >= 1"),
                       ({"max_seconds": -1}, "max_seconds must be a positive number of seconds"),
                       ({"pause_s": float("nan")}, "pause_s must be a positive number of seconds")]:
        with pytest.raises(ValueError, match=said):
            make_cues(pause, **rule)
    assert [c.lines for c in make_cues(pause, pause_s=1.0)] == [["one two three"]]  # a rule in range is followed


def test_wrap_balances_two_lines_and_keeps_a_long_word_whole():
    words = "she had your dark suit in greasy wash water all year".split()
    lines = wrap(words, 42, 2)
    assert " ".join(lines) == " ".join(words) and len(lines) == 2
    # the most even split: no other split between words has a shorter longest line
    best = min(max(len(" ".join(words[:k])), len(" ".join(words[k:]))) for k in range(1, len(words)))
    assert max(map(len, lines)) == best
    assert wrap(["x" * 50], 42, 2) == ["x" * 50] and wrap(["x" * 30, "y" * 30, "z" * 30], 42, 2) is None


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_what_is_written_parses_back_to_the_same_cues(fmt):
    cues = make_cues(_words([("hello", 0.02, 0.4), ("world", 0.5, 0.9), ("again", 3661.25, 3661.9)]))
    text = render(cues, fmt)
    if fmt == "srt":
        parsed = [(s.start.total_seconds(), s.end.total_seconds(), s.content.split("\n")) for s in srt.parse(text)]
    else:
        parsed = [(_seconds(c.start), _seconds(c.end), c.text.split("\n")) for c in webvtt.from_buffer(io.StringIO(text))]
    assert parsed == [(c.start, c.end, c.lines) for c in cues]
    assert parsed[-1][0] == 3661.25  # past an hour: 01:01:01


def _seconds(stamp):
    h, m, s = stamp.split(":")
    return round(int(h) * 3600 + int(m) * 60 + float(s), 3)


def test_transcribe_writes_subtitles_from_greedy_and_beam_words(ldc_checkpoint, capsys, tmp_path):
    wav = shared("ldc93s1", "LDC93S1.wav")
    code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--format", "srt", str(wav))
    cues = list(srt.parse(out))
    assert code == 0 and " ".join(c.content.replace("\n", " ") for c in cues) == LDC, err
    assert all(len(line) <= 42 for c in cues for line in c.content.split("\n"))
    assert 0 <= cues[0].start.total_seconds() < cues[-1].end.total_seconds() <= 2.925  # inside the recording
    code, beam, _ = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--format", "srt",
                             "--decoder", "beam", "--beam-width", "8", str(wav))
    assert code == 0 and beam == out  # the beam's text is greedy's here, and so are its words' times
    import speechscale

    assert speechscale.load(ldc_checkpoint, device="cpu").transcribe(wav).subtitles("srt") == out  # the Python API
    other = shared("ldc93s1", "LDC93S1_pcms16le_1_8000.wav")
    code, out, _ = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--format", "vtt",
                            "--out-dir", str(tmp_path / "subs"), str(wav), str(other))
    written = sorted((tmp_path / "subs").iterdir())
    assert code == 0 and [p.name for p in written] == ["LDC93S1.vtt", "LDC93S1_pcms16le_1_8000.vtt"]
    model = speechscale.load(ldc_checkpoint, device="cpu")
    for path, source in zip(written, (wav, other)):  # each file's cues hold that file's own transcript
        assert path.read_text().startswith("WEBVTT\n\n") and str(path) in out
        assert " ".join(c.text.replace("\n", " ") for c in webvtt.read(str(path))) == model.transcribe(source).text
    assert " ".join(c.text.replace("\n", " ") for c in webvtt.read(str(written[0]))) == LDC


def test_transcribe_says_in_one_line_what_subtitles_cannot_do(ldc_checkpoint, capsys, tmp_path):
    wav, ckpt = str(shared("ldc93s1", "LDC93S1.wav")), str(ldc_checkpoint)
    manifest = shared("ldc93s1", "manifest.jsonl")
    for args, expected in [(["--format", "srt", wav, wav], "give --out-dir"),
                           (["--format", "vtt", "--manifest", str(manifest), wav], "--manifest prints references"),
                           (["--format", "srt", "--stream", wav], "a stream (--stream) prints text"),
                           (["--out-dir", str(tmp_path), "--manifest", str(manifest), wav],
                            "--out-dir writes a file for each input"),
                           (["--format", "srt", "--out-dir", str(tmp_path), wav, wav], "would both write")]:
        code, _, err = main_cli(capsys, "transcribe", "--checkpoint", ckpt, *args)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, (args, err)
