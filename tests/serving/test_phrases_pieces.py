"""A stream's phrases over a word-piece model's logits: the same text and word times as the offline greedy path."""
import random

import pytest
import torch

from speechscale.data.pieces import PieceTokenizer, learn_pieces
from speechscale.data.synth import sentence
from speechscale.decoding.alignment import word_times
from speechscale.decoding.decoders import build_decoder
from speechscale.decoding.greedy import greedy_decode
from speechscale.serving.events import Final
from speechscale.serving.phrases import PhraseDecoder

ALPHABET = "abcdefghijklmnopqrstuvwxyz' "


@pytest.fixture(scope="module")
def tok():
    rng = random.Random(0)
    return PieceTokenizer(ALPHABET, *learn_pieces([sentence(rng) for _ in range(600)], 80, ALPHABET))


def logits_of(tok: PieceTokenizer, phrases: list[str], pause: int, seed: int = 0) -> torch.Tensor:
    """(T, V) logits whose best class spells `phrases` (each piece held 2-4 frames, a blank after it), `pause` blank
    frames between phrases; random values elsewhere."""
    rng = random.Random(seed)
    path: list[int] = [0] * 5
    for i, text in enumerate(phrases):
        for k in tok.encode(text):
            path += [k] * rng.randint(2, 4) + [0]
        path += [0] * (pause if i < len(phrases) - 1 else 5)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(path), tok.vocab_size, generator=g)
    logits[torch.arange(len(path)), torch.tensor(path)] += 8.0
    return logits


@pytest.mark.parametrize("search", [False, True])
def test_phrases_of_pieces_end_at_pauses_and_say_what_the_offline_decoder_says(tok, search):
    phrases = ["the quick fox was lazy", "please put the red cup on the table", "zebras jump"]
    logits = logits_of(tok, phrases, pause=40)
    beam = build_decoder("beam", tok) if search else None
    dec = PhraseDecoder(tok, 0.04, endpoint_frames=30, search=beam)
    events = []
    for lo in range(0, logits.shape[0], 7):  # fed in pieces, as a stream's steps come
        events += dec.feed(logits[lo:lo + 7])
    events += dec.end()
    finals = [e for e in events if isinstance(e, Final)]
    assert [f.text for f in finals] == phrases
    offline = greedy_decode(logits[None], torch.tensor([logits.shape[0]]), tok)[0]
    assert dec.text == offline == " ".join(phrases)
    timed = word_times(logits.log_softmax(-1), logits.shape[0], tok, 0.04)
    streamed = [w for f in finals for w in f.words]
    assert [w.word for w in streamed] == [w["word"] for w in timed] == " ".join(phrases).split()
    for got, want in zip(streamed, timed):
        assert (got.start, got.end) == pytest.approx((want["start"], want["end"]), abs=1e-3)
