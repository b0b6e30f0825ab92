"""A stream's phrases over a word-piece model's logits: the same text and word times as the offline greedy path."""
import random

import pytest
import torch

from speechscale.data.pieces import PieceTokenizer, learn_pieces
from speechscale.data.synth import sentence
from speechscale.decoding.alignment import word_times
from speechscale.decoding.decoders import DecoderConfig, build_decoder
from speechscale.decoding.greedy import greedy_decode
from speechscale.streaming.events import Final
from speechscale.streaming.phrases import PhraseDecoder

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


@pytest.mark.parametrize("search", ["greedy", "beam", "lexicon"])
def test_phrases_of_pieces_end_at_pauses_and_say_what_the_offline_decoder_says(tok, search, tmp_path):
    phrases = ["the quick fox was lazy", "please put the red cup on the table", "zebras jump"]
    logits = logits_of(tok, phrases, pause=40)
    (tmp_path / "words.txt").write_text("\n".join(sorted(set(" ".join(phrases).split()))) + "\n")
    beam = None
    if search != "greedy":
        beam = build_decoder(DecoderConfig(search, lexicon=str(tmp_path / "words.txt") if search == "lexicon" else "",
                                           beta=0.0), tok)
        whole = beam(logits.log_softmax(-1)[None], torch.tensor([logits.shape[0]]))[0]
        assert whole == " ".join(phrases)
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


def test_a_word_list_and_an_lm_choose_among_what_the_pieces_could_spell(tok, tmp_path):
    """Frames that spell "the red cup" with "u" and "a" nearly as likely at one frame: greedy says "cup"; a word list
    of "cap" only makes it "cap"; an LM that has seen "the red cap" does too, and one that has seen "cup" keeps it."""
    from speechscale.decoding.lm import build_arpa

    ids = tok.encode("the red cup")
    u, a = tok.encode("cup")[-2], tok.encode("cap")[-2]
    assert tok.units[u - 1] == "u" and tok.units[a - 1] == "a"  # the vowel is its own piece in both
    logits = logits_of(tok, ["the red cup"], pause=0)
    frames = (logits.argmax(-1) == u).nonzero()[:, 0]
    logits[frames, a] = logits[frames, u] - 0.5  # "a" a little less likely wherever "u" is the best
    lp = logits.log_softmax(-1)[None]
    n = torch.tensor([logits.shape[0]])
    assert ids and greedy_decode(lp, n, tok) == ["the red cup"]
    (tmp_path / "cap.txt").write_text("the\nred\ncap\n")
    assert build_decoder(DecoderConfig("lexicon", lexicon=str(tmp_path / "cap.txt"), beta=0.0), tok)(lp, n) == [
        "the red cap"]
    for seen in ("cap", "cup"):
        (tmp_path / f"{seen}-lm.txt").write_text(f"the red {seen}\nthe red {seen} is here\n" * 20 + "the red hat\n")
        build_arpa(tmp_path / f"{seen}-lm.txt", 3, tmp_path / f"{seen}.arpa")
        (tmp_path / "both.txt").write_text("the\nred\ncap\ncup\nhat\n")
        search = build_decoder(DecoderConfig("lexicon", lexicon=str(tmp_path / "both.txt"),
                                             lm=str(tmp_path / f"{seen}.arpa"), alpha=2.0, beta=0.0), tok)
        assert search(lp, n) == [f"the red {seen}"]


def test_a_word_piece_model_streams_the_offline_words_with_their_times(streaming_pieces_checkpoint):
    """A streaming model trained on word pieces, fed LDC93S1 in odd pieces, alone and twice with a pause between: a
    final per phrase, each the offline greedy path's words over its frames with their times; together the offline
    text (LDC93S1's own transcript, for the file alone)."""
    import numpy as np

    from speechscale.components import load_components
    from speechscale.data.audio import load_audio
    from speechscale.streaming.session import StreamingSession
    from tests.conftest import shared

    comps = load_components(streaming_pieces_checkpoint)
    assert isinstance(comps.tokenizer, PieceTokenizer)
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    twice = np.concatenate([np.zeros(8000, np.float32), wav, np.zeros(24000, np.float32), wav])
    for audio, piece in ((wav, 777), (twice, 1600)):
        session = StreamingSession(comps, endpoint_frames=20)
        events = []
        for i in range(0, len(audio), piece):
            events += session.accept(audio[i:i + piece])
        events += session.finish()
        with torch.no_grad():
            feats = comps.features(torch.from_numpy(audio))[None]  # (1, F, T)
            logits, lens = comps.model(feats, torch.tensor([feats.shape[-1]]))
        log_probs = logits[0, :int(lens[0])].log_softmax(-1)
        finals = [e for e in events if isinstance(e, Final)]
        offline = greedy_decode(log_probs[None], torch.tensor([log_probs.shape[0]]), comps.tokenizer)[0]
        assert " ".join(f.text for f in finals) == session.text == offline
        if audio is wav:
            assert offline == "she had your dark suit in greasy wash water all year"
        for final, lo, hi in zip(finals, [0, *session.boundaries], session.boundaries):
            words = word_times(log_probs[lo:hi], hi - lo, comps.tokenizer, session.frame_s, lo * session.frame_s)
            assert [w.word for w in final.words] == [w["word"] for w in words] == final.text.split()
            for s, o in zip(final.words, words):  # no word ends past the audio the stream received
                end = min(o["end"], round(len(audio) / 16000, 3))
                assert (s.start, s.end) == pytest.approx((min(o["start"], end), end), abs=1e-6)


@pytest.mark.parametrize("units", ["pieces", "characters"])
def test_a_search_with_an_lm_keeps_one_utterances_states_not_every_utterances(tok, units, tmp_path):
    """A long-running service decodes utterance after utterance with one search: its LM's state tables hold the
    current utterance's states only, so decoding the same frames four times leaves them about as large as once did
    (the search's own hash order may expand a few states more or less), not four times as large."""
    from speechscale.data.text import CharTokenizer
    from speechscale.decoding.lm import build_arpa

    model = tok if units == "pieces" else CharTokenizer(ALPHABET)
    text = "please put the red cup on the table"
    (tmp_path / "lm.txt").write_text(f"{text}\nthe quick fox was lazy\n")
    build_arpa(tmp_path / "lm.txt", 2, tmp_path / "lm.arpa")
    path = [0] * 3
    for k in model.encode(text):
        path += [k, k, 0]
    logits = torch.full((len(path), model.vocab_size), -4.0)
    logits[torch.arange(len(path)), torch.tensor(path)] = 4.0
    lp, n = logits.log_softmax(-1)[None], torch.tensor([len(path)])
    search = build_decoder(DecoderConfig("beam", lm=str(tmp_path / "lm.arpa")), model)
    assert search(lp, n) == [text]
    once = len(search.lm.states)
    for _ in range(3):
        assert search(lp, n) == [text]
    assert once > 1 and len(search.lm.states) < 1.5 * once
