"""Word pieces: learned by sentencepiece, spelled and read back by our own tokenizer, as sentencepiece spells."""
import random

import pytest
import torch

from speechscale.data.pieces import WORD_START, PieceTokenizer, learn_model, learn_pieces, model_pieces
from speechscale.data.synth import sentence
from speechscale.data.text import CharTokenizer, TextNormalizer, build_tokenizer

ALPHABET = "abcdefghijklmnopqrstuvwxyz' "


def corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


@pytest.fixture(scope="module")
def learned():
    """A 96-piece model of 800 grammar sentences: (sentencepiece's processor, our tokenizer)."""
    import sentencepiece as spm

    model = learn_model(corpus(800, 0), 96, ALPHABET)
    return spm.SentencePieceProcessor(model_proto=model), PieceTokenizer(ALPHABET, *model_pieces(model))


def test_our_spelling_is_sentencepieces_on_unseen_text(learned):
    """Held-out sentences, the jfk reference's words and letters the corpus never spells: the same pieces as
    sentencepiece's own encoder gives, id for id (ours: its id + 0, the blank first and no unknown symbol)."""
    sp, tok = learned
    unk = sp.unk_id()
    ours = {p: i + 1 for i, p in enumerate(tok.pieces)}
    jfk = TextNormalizer()("And so, my fellow Americans: ask not what your country can do for you, ask what you can "
                           "do for your country. Quizzical jazz, wax'd xylophones!")
    texts = corpus(300, 1) + [jfk, "q", "a b", "zz zz zz"]
    for text in texts:
        want = [ours[sp.id_to_piece(i)] for i in sp.encode(text)]
        assert unk not in sp.encode(text)
        assert tok.encode(text) == want, text
        assert tok.decode(tok.encode(text)) == " " + text  # a word's first piece starts with the space


def test_the_pieces_are_the_alphabet_and_longer_units_and_learning_is_repeatable():
    texts = [t.replace("q", "") for t in corpus(800, 0)]  # no "q" anywhere
    pieces, scores = learn_pieces(texts, 96, ALPHABET)
    assert (pieces, scores) == learn_pieces(list(texts), 96, ALPHABET)
    assert len(pieces) == 96 and len(set(pieces)) == 96
    assert set(ALPHABET) - {" "} | {WORD_START} <= set(pieces)  # "q" too, though no transcript holds it
    assert sum(len(p.lstrip(WORD_START)) > 2 for p in pieces) > 20  # pieces of words, not only letters
    tok = PieceTokenizer(ALPHABET, pieces, scores)
    held_out = corpus(200, 5)
    chars = sum(len(t) for t in held_out)
    ids = sum(len(tok.encode(t)) for t in held_out)
    assert ids < 0.7 * chars  # the reason for pieces: CTC targets (and the frames they need) far shorter
    assert tok.encode("quiz") and tok.decode(tok.encode("quiz")) == " quiz"


def test_fewer_pieces_than_asked_when_the_transcripts_hold_fewer():
    pieces, _ = learn_pieces(["she had your dark suit"], 500, ALPHABET)
    assert 28 <= len(pieces) < 100


def test_a_tokenizer_checks_its_pieces():
    with pytest.raises(ValueError, match="outside the alphabet: 'é'"):
        PieceTokenizer("ab ", [WORD_START, "a", "b", "é"], [0.0] * 4)
    with pytest.raises(ValueError, match="lack single characters of the alphabet: 'b'"):
        PieceTokenizer("ab ", [WORD_START, "a", "ab"], [0.0] * 3)
    with pytest.raises(ValueError, match="distinct non-empty strings, one score each"):
        PieceTokenizer("ab ", [WORD_START, "a", "b", "a"], [0.0] * 4)
    with pytest.raises(ValueError, match="one score each"):
        PieceTokenizer("ab ", [WORD_START, "a", "b"], [0.0] * 2)
    with pytest.raises(ValueError, match="at most 64 characters long, each with a finite score"):
        PieceTokenizer("ab ", [WORD_START, "a", "b", "a" * 65], [0.0] * 4)
    with pytest.raises(ValueError, match="at most 64 characters long, each with a finite score"):
        PieceTokenizer("ab ", [WORD_START, "a", "b"], [0.0, float("nan"), 0.0])
    tok = PieceTokenizer("ab ", [WORD_START, "a", "b", WORD_START + "ab"], [-1.0, -2.0, -2.0, -1.5])
    assert tok.oov("abc a") == {"c"}
    with pytest.raises(KeyError):
        tok.encode("abc")
    assert tok.encode("") == [] and tok.encode(" ") == []


def test_build_tokenizer_picks_pieces_when_given_and_both_describe_their_units():
    chars = build_tokenizer("ab ")
    assert isinstance(chars, CharTokenizer) and chars.units == ["a", "b", " "] and chars.space_id == 3
    pieces = build_tokenizer("ab ", [WORD_START, "a", "b", WORD_START + "ab"], [-1.0, -2.0, -2.0, -1.5])
    assert isinstance(pieces, PieceTokenizer) and pieces.vocab_size == 5
    assert pieces.units == [" ", "a", "b", " ab"] and pieces.space_id == 1
    again = build_tokenizer(**pieces.to_dict())
    assert again.encode("ab ba") == pieces.encode("ab ba") == [4, 1, 3, 2]


def test_greedy_and_word_times_read_pieces(learned):
    """A CTC path of pieces (each held over frames, blanks between) decodes to its text, and its words are timed
    from their first piece's first frame (a word start said alone, as a character model's space, included) to their
    last piece's last frame."""
    from speechscale.decoding.alignment import path_words
    from speechscale.decoding.greedy import greedy_decode

    _, tok = learned
    text = "the quick fox was lazy"
    path, spans, frame = [], {}, 0
    for i in tok.encode(text):
        path += [i, i, 0]
    logits = torch.full((len(path), tok.vocab_size), -5.0)
    logits[torch.arange(len(path)), torch.tensor(path)] = 5.0
    assert greedy_decode(logits[None], torch.tensor([len(path)]), tok) == [text]
    words = path_words(path, [0.5] * len(path), tok, 0.02, 1.0)
    assert [w["word"] for w in words] == text.split()
    for w in text.split():  # independently: the frames of the pieces that spell each word's letters
        ids = tok.encode(w)
        spans[w] = (frame, frame + 3 * len(ids) - 1)
        frame += 3 * len(ids)
    assert any(tok.encode(w)[0] == tok.space_id for w in text.split())  # both kinds of word start are met
    assert any(tok.encode(w)[0] != tok.space_id for w in text.split())
    for w in words:
        start, end = spans[w["word"]]
        assert w["start"] == round(1.0 + start * 0.02, 3) and w["end"] == round(1.0 + end * 0.02, 3)
        assert w["confidence"] == 0.5


def test_a_corpus_over_the_cap_is_sampled_the_same_way_every_time(monkeypatch):
    """More transcripts than pieces.MAX_SENTENCES: learned from a seeded sample (other pieces than from all of them),
    the same on every call, as every rank of a run must learn the same."""
    import speechscale.data.pieces as pieces

    texts = corpus(800, 0) + [t.replace("the ", "thy ") for t in corpus(800, 9)]
    everything = learn_pieces(texts, 80, ALPHABET)
    monkeypatch.setattr(pieces, "MAX_SENTENCES", 200)
    sampled = learn_pieces(texts, 80, ALPHABET)
    assert sampled == learn_pieces(list(texts), 80, ALPHABET)
    assert sampled != everything
