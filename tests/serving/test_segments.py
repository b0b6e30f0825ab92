"""Cutting a long recording's timed words into training segments at its pauses."""
import random

import pytest

from speechscale.inference.segments import EDGE_S, cut_at_pauses


def _words(rng, n, long_pauses=()):
    """`n` words of 0.1-0.6 s with pauses of 0-0.15 s, and the pauses at indexes `long_pauses` 1-3 s long."""
    out, t = [], rng.uniform(0, 2)
    for i in range(n):
        if i and i in long_pauses:
            t += rng.uniform(1, 3)
        length = rng.uniform(0.1, 0.6)
        out.append({"word": f"w{i}", "start": round(t, 3), "end": round(t + length, 3),
                    "confidence": rng.uniform(0.3, 1.0)})
        t += length + rng.uniform(0, 0.15)
    return out, t + rng.uniform(0, 2)


@pytest.mark.parametrize("seed", range(20))
def test_segments_hold_every_word_once_within_the_bound_and_cut_in_pauses(seed):
    rng = random.Random(seed)
    words, duration = _words(rng, rng.randint(1, 400), long_pauses=set(rng.sample(range(1, 400), 30)))
    max_s = rng.uniform(3, 25)
    segs = cut_at_pauses(words, duration, max_s)
    assert [w for s in segs for w in s.words] == words  # every word once, in order
    for s in segs:
        first, last = s.words[0], s.words[-1]
        assert s.duration <= max_s + 1e-3 or len(s.words) == 1  # bounds in ms
        assert first["start"] - EDGE_S - 1e-3 <= s.start <= first["start"] + 1e-9  # in the pause before it
        assert last["end"] - 1e-9 <= s.end <= last["end"] + EDGE_S + 1e-3
        assert 0 <= s.start and s.end <= duration + 1e-9
        assert s.confidence == pytest.approx(sum(w["confidence"] for w in s.words) / len(s.words), abs=1e-4)
        assert s.text == " ".join(w["word"] for w in s.words)
    assert all(a.end <= b.start + 1e-9 for a, b in zip(segs, segs[1:]))  # no audio in two segments
    pauses = [(words[j]["start"] - words[j - 1]["end"], j) for j in range(1, len(words))]
    if len(segs) > 1:  # the longest pause of all is always one of the cuts
        longest = max(pauses)[1]
        assert any(s.words[0] is words[longest] for s in segs)


def test_sentences_apart_by_pauses_stay_whole():
    rng = random.Random(7)
    words, duration = _words(rng, 60, long_pauses={12, 25, 31, 47})  # five "sentences", each under 10 s
    sentences = [0, 12, 25, 31, 47, 60]
    assert all(words[b - 1]["end"] - words[a]["start"] + 2 * EDGE_S < 10 for a, b in zip(sentences, sentences[1:]))
    segs = cut_at_pauses(words, duration, max_seconds=10.0)
    assert len(segs) >= 3 and {words.index(s.words[0]) for s in segs} <= set(sentences)  # cut only between them


def test_a_short_recording_is_one_segment_and_no_words_none():
    words = [{"word": "yes", "start": 0.5, "end": 0.9}]
    assert [(s.start, s.end, s.text, s.confidence) for s in cut_at_pauses(words, 1.0, 30.0)] == [(0.2, 1.0, "yes", 0.0)]
    assert cut_at_pauses([], 100.0, 30.0) == []
    one = cut_at_pauses([{"word": "long", "start": 1.0, "end": 9.0}], 10.0, 5.0)  # one word longer than asked
    assert len(one) == 1 and one[0].duration > 5.0


def test_pauses_come_from_the_audio_where_a_word_is_timed_late_and_none_is_invented_at_the_edges():
    import numpy as np

    from speechscale.inference.segments import audio_pauses

    rate = 16000
    rng = np.random.default_rng(0)
    wav = np.zeros(6 * rate, np.float32)
    for a, b in ((0.5, 1.5), (1.6, 2.0), (3.5, 4.6), (4.7, 6.0)):  # sound; 0.1 s gaps inside "words", 1.5 s between
        wav[int(a * rate):int(b * rate)] = rng.normal(0, 0.1, int(b * rate) - int(a * rate))
    words = [{"word": "one", "start": 0.5, "end": 2.0}, {"word": "two", "start": 3.5, "end": 3.45 + 1.2}]
    words[0]["end"] = 3.4  # its last letter said late, in the pause
    pauses = audio_pauses(words, wav, rate)
    assert pauses[0] == (0.0, 0.5)  # the leading silence
    assert pauses[1] == pytest.approx((2.0, 3.5), abs=0.011)  # the pause the audio has, not the words' gap
    assert pauses[2] == (6.0, 6.0)  # speech up to the end: no pause invented after the last word's inner gap
    segs = cut_at_pauses(words, 6.0, max_seconds=4.0, pauses=pauses)
    assert [(s.start, s.end, s.text) for s in segs] == [(0.2, pytest.approx(2.3, abs=0.011), "one"),
                                                        (pytest.approx(3.2, abs=0.011), 6.0, "two")]


def test_a_first_letter_timed_early_inside_the_pause_leaves_its_word_after_the_cut():
    """Three words, a long pause between the second and the third, whose first letter the model says early (its
    start lies 0.3 s inside the pause): the pause before the third word is the whole pause, so the cut between
    sentences puts it with the words after it, not before; an inner gap of a word stays no pause."""
    import numpy as np

    from speechscale.inference.segments import audio_pauses

    rate = 16000
    rng = np.random.default_rng(2)
    wav = np.zeros(7 * rate, np.float32)
    for a, b in ((0.3, 1.3), (1.4, 2.4), (3.6, 4.6), (4.7, 6.6)):  # "one two", 1.2 s of pause, "three four"
        wav[int(a * rate):int(b * rate)] = rng.normal(0, 0.1, int(b * rate) - int(a * rate))
    words = [{"word": "one", "start": 0.3, "end": 1.3}, {"word": "two", "start": 1.4, "end": 2.4},
             {"word": "three", "start": 3.3, "end": 4.6}, {"word": "four", "start": 4.7, "end": 6.6}]
    pauses = audio_pauses(words, wav, rate)
    assert pauses[2] == pytest.approx((2.4, 3.6), abs=0.011)  # the whole pause, past "three"'s early start
    assert pauses[3][1] - pauses[3][0] == pytest.approx(0.1, abs=0.011)  # the gap inside "three four" stays short
    segs = cut_at_pauses(words, 7.0, max_seconds=4.0, pauses=pauses)
    assert [s.text for s in segs] == ["one two", "three four"]
    assert segs[1].start == pytest.approx(3.6 - 0.3, abs=0.011)  # EDGE_S before the speech, not before the early start


@pytest.mark.parametrize("rate", [22050, 11025])
def test_a_trailing_pause_is_found_at_rates_whose_frames_are_not_whole_milliseconds(rate):
    import numpy as np

    from speechscale.inference.segments import audio_pauses, quiet_runs

    rng = np.random.default_rng(1)
    wav = np.zeros(int(3.0 * rate) + 7, np.float32)  # a few samples past the last whole frame
    wav[int(0.5 * rate):int(2.0 * rate)] = rng.normal(0, 0.1, int(2.0 * rate) - int(0.5 * rate))
    runs = quiet_runs(wav, rate)
    frame = int(0.01 * rate) / rate
    assert runs[-1, 1] == pytest.approx((wav.shape[0] // int(0.01 * rate)) * frame)  # in whole frames of `rate`
    pauses = audio_pauses([{"word": "one", "start": 0.5, "end": 2.0}], wav, rate)
    assert pauses[0] == pytest.approx((0.0, 0.5), abs=frame) and pauses[1][1] == wav.shape[0] / rate
    assert pauses[1][0] == pytest.approx(2.0, abs=frame)  # the silence after the word reaches the recording's end


def _padded_twice(tmp_path, floor: float):
    """LDC93S1 twice (16 kHz), after 0.6 s and between them 0.8 s of near-silence (white noise of std `floor`), then
    0.5 s of it: (path, samples, rate, where sound starts, the text said). Where sound starts is found from the
    samples alone (the first past 0.3 % of full scale: the silence's noise stays under 0.15 %), not from the code under
    test."""
    import numpy as np
    import soundfile as sf

    from tests.conftest import shared

    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    rng = np.random.default_rng(0)

    def quiet(seconds):
        return (rng.standard_normal(int(seconds * rate)) * floor).astype(np.float32)

    audio = np.concatenate([quiet(0.6), wav, quiet(0.8), wav, quiet(0.5)])
    path = tmp_path / "twice.wav"
    sf.write(path, audio, rate)
    onset = int(np.flatnonzero(np.abs(audio) > LOUD)[0]) / rate
    text = "She had your dark suit in greasy wash water all year."
    return path, audio, rate, onset, [text, text]


LOUD = 0.003  # a sample past this is sound (the inserted silence's noise stays under half of it)


def _loud(audio, rate, start, end) -> bool:
    """Whether [start, end] s of `audio` holds speech: a sample past a third of the recording's peak (LDC93S1's words
    reach it; its breaths and the silences stay far under)."""
    import numpy as np

    return bool(np.abs(audio[int(start * rate):int(end * rate)]).max(initial=0.0) > np.abs(audio).max() / 3)


@pytest.mark.parametrize("floor", [1e-5, 3e-4])
def test_align_and_label_cut_no_silent_segment_and_each_word_lies_in_the_segment_that_holds_it(ldc_checkpoint,
                                                                                              tmp_path, cli, floor):
    """A real recording with leading, inner and trailing silence (digital, then a noise floor): align --out-manifest
    cut a silent first segment (0.0-0.3 s) and labelled it with the file's first word, which the segment holding the
    spoken word lost; label added a word there. Now every segment holds sound, the first begins at most EDGE_S before
    the speech, align's segments spell the transcript's words once each in order, and label's lines too hold
    sound."""
    import json

    path, audio, rate, onset, said = _padded_twice(tmp_path, floor)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": path.name, "duration": len(audio) / rate,
                                    "text": " ".join(said)}) + "\n")
    aligned = tmp_path / "aligned.jsonl"
    cli("-q", "align", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest), "--out-manifest",
        str(aligned), "--max-seconds", "3")
    labelled = tmp_path / "labelled.jsonl"
    cli("-q", "label", "--checkpoint", str(ldc_checkpoint), str(path), "--out", str(labelled), "--max-seconds", "3")
    for out in (aligned, labelled):
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        rejected = out.with_name(out.stem + ".rejected.jsonl")
        every = lines + [json.loads(x) for x in rejected.read_text().splitlines()]
        assert len(every) >= 2, out
        for line in every:
            assert _loud(audio, rate, line["offset"], line["offset"] + line["duration"]), (out.name, line)
        first = min(every, key=lambda x: x["offset"])
        assert first["offset"] >= onset - EDGE_S - 0.02, (out.name, first, onset)
    words = " ".join(x["text"] for x in sorted((json.loads(x) for x in aligned.read_text().splitlines()),
                                                key=lambda x: x["offset"]))
    assert words == " ".join(said).lower().replace(".", "")


def test_transcribed_words_lie_in_the_audio_and_its_subtitles_start_with_the_speech(ldc_checkpoint, tmp_path, cli):
    """transcribe's words ended up to a frame past the recording and its first word (and first subtitle) started in
    the silence before any speech, from the space said before it: every word now lies within the recording and
    starts where there is sound, and the first cue starts at the speech."""
    import json

    import srt

    path, audio, rate, onset, _ = _padded_twice(tmp_path, 1e-5)
    res = json.loads(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(path)).stdout)
    duration = len(audio) / rate
    assert res["words"] and all(0 <= w["start"] <= w["end"] <= duration for w in res["words"])
    assert res["words"][0]["start"] >= onset - 0.02
    cues = list(srt.parse(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--format", "srt",
                              str(path)).stdout))
    assert cues[0].start.total_seconds() >= onset - 0.02 and cues[-1].end.total_seconds() <= duration + 1e-3


def test_a_word_timed_across_a_pause_from_a_click_keeps_the_loud_sound_after_it():
    """yesno's recordings open with a faint click, then half a second of quiet, then the first word; the model times
    the word from the click, across the quiet, so the cut after it fell in that quiet and the word's segment was the
    click. The word keeps the loud sound, and the pause after it is the one after that sound."""
    import numpy as np

    from speechscale.inference.segments import in_speech

    rate, rng = 16000, np.random.default_rng(3)
    wav = np.zeros(3 * rate, np.float32)
    for a, b, level in ((0.0, 0.19, 0.01), (0.65, 1.0, 0.2), (1.2, 1.55, 0.2), (1.8, 2.1, 0.2)):
        wav[int(a * rate):int(b * rate)] = rng.normal(0, level, int(b * rate) - int(a * rate))
    words = [{"word": "yes", "start": 0.01, "end": 1.01}, {"word": "yes", "start": 1.19, "end": 1.55},
             {"word": "no", "start": 1.78, "end": 2.1}]
    moved, pauses, _ = in_speech(words, wav, rate)
    assert moved[0]["start"] == pytest.approx(0.65, abs=0.011) and moved[0]["end"] == pytest.approx(1.0, abs=0.011)
    assert pauses[1] == pytest.approx((1.0, 1.2), abs=0.011)
    segs = cut_at_pauses(moved, 3.0, max_seconds=1.0, pauses=pauses)
    assert [s.text for s in segs] == ["yes", "yes", "no"] and segs[0].start >= 0.65 - EDGE_S - 0.011
