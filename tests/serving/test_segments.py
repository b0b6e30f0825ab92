"""Cutting a long recording's timed words into training segments at its pauses."""
import random

import pytest

from speechscale.serving.segments import EDGE_S, cut_at_pauses


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

    from speechscale.serving.segments import audio_pauses

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

    from speechscale.serving.segments import audio_pauses

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

    from speechscale.serving.segments import audio_pauses, quiet_runs

    rng = np.random.default_rng(1)
    wav = np.zeros(int(3.0 * rate) + 7, np.float32)  # a few samples past the last whole frame
    wav[int(0.5 * rate):int(2.0 * rate)] = rng.normal(0, 0.1, int(2.0 * rate) - int(0.5 * rate))
    runs = quiet_runs(wav, rate)
    frame = int(0.01 * rate) / rate
    assert runs[-1, 1] == pytest.approx((wav.shape[0] // int(0.01 * rate)) * frame)  # in whole frames of `rate`
    pauses = audio_pauses([{"word": "one", "start": 0.5, "end": 2.0}], wav, rate)
    assert pauses[0] == pytest.approx((0.0, 0.5), abs=frame) and pauses[1][1] == wav.shape[0] / rate
    assert pauses[1][0] == pytest.approx(2.0, abs=frame)  # the silence after the word reaches the recording's end
