import random

import jiwer
import pytest
import torch

from speechscale.data.text import CharTokenizer
from speechscale.decoding.greedy import greedy_decode
from speechscale.decoding.metrics import ErrorRate, edit_distance


def _random_sentence(rng):
    words = ["a", "cat", "sat", "on", "the", "mat", "dog", "ran", "b"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))


def test_wer_and_cer_match_jiwer_on_random_strings():
    rng = random.Random(0)
    refs = [_random_sentence(rng) for _ in range(200)]
    hyps = [_random_sentence(rng) if rng.random() < 0.7 else r for r in refs]
    hyps[3] = ""  # an empty hypothesis counts as all deletions
    m = ErrorRate()
    m.update(refs, hyps)
    assert m.wer == pytest.approx(jiwer.wer(refs, hyps))
    assert m.cer == pytest.approx(jiwer.cer(refs, hyps))


def test_edit_distance_and_reset():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance([], ["a", "b"]) == 2
    m = ErrorRate()
    m.update(["a b"], ["a c"])
    m.reset()
    m.update(["a b"], ["a b"])
    assert m.wer == 0.0 and m.utterances == 1


def test_nothing_scored_is_nan_not_zero():
    assert ErrorRate().wer != ErrorRate().wer  # NaN


def test_greedy_collapses_repeats_and_drops_blanks():
    tok = CharTokenizer("ab ")
    frames = [1, 1, 0, 1, 2, 2, 3, 3, 0, 2]  # a a _ a b b ' ' ' ' _ b -> "aab b"
    logits = torch.nn.functional.one_hot(torch.tensor(frames), 4).float()[None]
    assert greedy_decode(logits, torch.tensor([10]), tok) == ["aab b"]
    assert greedy_decode(logits, torch.tensor([3]), tok) == ["a"]
