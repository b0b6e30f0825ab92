"""CTC alignment (decoding.alignment): the most likely path of a text is the best of every path that spells it
(enumerated here), a text no path can spell in so few frames has none, and the greedy text's path is the greedy
path, so a beam search's words are timed as greedy's are. On the LDC93S1 model the beam's words carry the greedy
words' times, and the noisy output of an LM search gets times in order inside the audio."""
import itertools
import random

import pytest
import torch

from speechscale.data.text import BLANK, CharTokenizer
from speechscale.decoding.alignment import SPACE_LEAD_S, ctc_align, lead_frames, path_words, text_word_times, word_times
from speechscale.decoding.decoders import DecoderConfig, build_decoder
from tests.decoding.test_decoders import LDC, _log_probs, lm  # noqa: F401 - lm: the fixture

TOKENIZER = CharTokenizer("ab ")  # blank 0, a 1, b 2, space 3


def _collapse(path):
    return [k for k, _ in itertools.groupby(path) if k != BLANK]


def _said(path, space):
    """What a path spells, its spaces as a text keeps them: none at the ends, one between two labels."""
    spelled = _collapse(path)
    if space is None:
        return spelled
    squeezed = [k for i, k in enumerate(spelled) if not (k == space and i and spelled[i - 1] == space)]
    while squeezed and squeezed[0] == space:
        squeezed = squeezed[1:]
    while squeezed and squeezed[-1] == space:
        squeezed = squeezed[:-1]
    return squeezed


@pytest.mark.parametrize("labels", [[1], [1, 2], [1, 1], [2, 3, 1], [1, 1, 2, 2], [1, 3, 2, 1]])
@pytest.mark.parametrize("space", [None, 3])
def test_the_aligned_path_is_the_best_of_every_path_that_spells_the_labels(labels, space):
    """Every path of up to 7 frames over 4 tokens enumerated; with `space` a path may also say it before the labels,
    after them, and again (after a blank) where the labels hold it."""
    rng = torch.Generator().manual_seed(len(labels))
    for frames in (len(labels) + 1, 7):
        lp = torch.randn(frames, 4, generator=rng).log_softmax(-1)  # (T, V)
        spelling = [p for p in itertools.product(range(4), repeat=frames) if _said(p, space) == labels]
        path = ctc_align(lp, labels, space)
        if not spelling:
            assert path is None
            continue
        best = max(sum(lp[t, k].item() for t, k in enumerate(p)) for p in spelling)
        assert _said(path, space) == labels and len(path) == frames
        assert sum(lp[t, k].item() for t, k in enumerate(path)) == pytest.approx(best, abs=1e-5)


def test_a_text_too_long_for_its_frames_has_no_path_and_its_words_no_times():
    lp = torch.randn(3, 4).log_softmax(-1)
    assert ctc_align(lp, [1, 1, 1]) is None  # a, a, a needs 5 frames
    assert text_word_times(lp, 3, "aaa", TOKENIZER, 0.04) == [{"word": "aaa"}]
    assert text_word_times(lp, 3, "", TOKENIZER, 0.04) == []


def test_the_greedy_paths_labels_align_to_the_greedy_path_and_its_words_to_the_greedy_words():
    """The greedy path is the best path of all, so it is the best one spelling what it spells, and the best one
    saying its words: their text (single spaces, none at the ends) is timed as the greedy path times them."""
    random.seed(0)
    for trial in range(30):
        frames = random.randint(5, 60)
        lp = (3 * torch.randn(frames, 4)).log_softmax(-1)
        best = lp.argmax(-1).tolist()
        assert ctc_align(lp, _collapse(best)) == best, trial
        greedy = word_times(lp, frames, TOKENIZER, 0.02, 1.5)
        text = " ".join(w["word"] for w in greedy)
        assert text_word_times(lp, frames, text, TOKENIZER, 0.02, 1.5) == greedy, trial


def _onehot(path):
    return torch.nn.functional.one_hot(torch.tensor(path), 4).float().clamp_min(1e-6).log()  # (T, V)


def test_a_word_starts_at_the_space_said_before_it_when_that_space_is_close():
    """Frames of 0.1 s (a lead of 3 frames): "ab" said at 2-3, a space at 5-6 (held), "b" at 8; then a space at 9 and
    "a" 4 frames (past the lead) later. The second word starts where its space began, the third at its letter (its
    space is a pause's), the first at its letter (no space before it); ends stay at the last letter's frame."""
    assert SPACE_LEAD_S == 0.3 and lead_frames(0.1) == 3 and lead_frames(0.04) == 7
    path = [0, 0, 1, 2, 0, 3, 3, 0, 2, 3, 0, 0, 0, 1, 0]
    words = word_times(_onehot(path), len(path), TOKENIZER, 0.1, 1.0)
    assert [(w["word"], w["start"], w["end"]) for w in words] == [("ab", 1.2, 1.4), ("b", 1.5, 1.9), ("a", 2.3, 2.4)]
    assert text_word_times(_onehot(path), len(path), "ab b a", TOKENIZER, 0.1, 1.0) == words
    # a space said again after a blank: the word starts at the later one; a closer bound keeps the letter's frame
    path = [1, 0, 3, 0, 3, 0, 2, 0]
    assert [w["start"] for w in word_times(_onehot(path), len(path), TOKENIZER, 0.1)] == [0.0, 0.4]
    assert [w["start"] for w in path_words(path, [1.0] * len(path), TOKENIZER, 0.1, 0.0, 1)] == [0.0, 0.6]
    # a space held through a pause up to the letter: the word starts no more than the lead before its letter
    path = [1, 0, 3, 3, 3, 3, 3, 3, 2]
    assert [w["start"] for w in word_times(_onehot(path), len(path), TOKENIZER, 0.1)] == [0.0, 0.5]


def test_a_beam_searchs_words_carry_times_on_a_real_model(ldc_checkpoint, lm):  # noqa: F811 - the fixture
    comps, lp, lens = _log_probs(ldc_checkpoint, 0.0)
    frames, frame_s = int(lens[0]), 0.02
    greedy = build_decoder("greedy", comps.tokenizer)
    beam = build_decoder(DecoderConfig("beam", beam_width=8), comps.tokenizer)
    assert greedy(lp, lens) == beam(lp, lens) == [LDC]
    timed = beam.words(lp[0], frames, LDC, frame_s, 0.0)
    assert timed == greedy.words(lp[0], frames, LDC, frame_s, 0.0) and [w["word"] for w in timed] == LDC.split()
    # noisy features: an LM search's text differs from greedy's, and its words are still timed, in order
    comps, lp, lens = _log_probs(ldc_checkpoint, 1.2)
    search = build_decoder(DecoderConfig("beam", lm=str(lm / "lm.arpa"), alpha=1.0, beta=2.0), comps.tokenizer)
    text = search(lp, lens)[0]
    words = search.words(lp[0], int(lens[0]), text, frame_s, 0.0)
    assert [w["word"] for w in words] == text.split() and text != greedy(lp, lens)[0]
    ends = [t for w in words for t in (w["start"], w["end"])]
    assert ends == sorted(ends) and 0 <= ends[0] and ends[-1] <= int(lens[0]) * frame_s
    assert all(0 < w["confidence"] <= 1 for w in words)
