"""Word pieces: output units longer than a character (Conformer-CTC's usual units), learned from the training
transcripts and kept as plain data: each piece and its score.

A text is spelled as the unigram model spells it: words start with the marker "▁" (a space), and of every way to cut
the text into pieces the one with the highest total score is taken. sentencepiece learns the pieces (`learn_pieces`);
the spelling and the reading back need no library, so a trained model decodes anywhere.

    >>> tok = PieceTokenizer("ab ", ["\u2581", "a", "b", "\u2581ab"], [-1.0, -2.0, -2.0, -1.5])
    >>> tok.encode("ab b"), tok.decode(tok.encode("ab b"))
    ([4, 1, 3], ' ab b')
"""
from __future__ import annotations

import io
import math
from typing import Any, Iterable

WORD_START = "\u2581"  # sentencepiece's marker for a space, at the start of a word's first piece
MAX_PIECE_LENGTH = 64  # a longer piece is refused (sentencepiece learns up to 16 characters)
MAX_SENTENCES = 2_000_000  # pieces are learned from at most this many transcripts, a seeded sample of a larger corpus


class PieceTokenizer:
    """Word pieces to ids: id 0 is the CTC blank, the pieces follow from 1. `alphabet` is the characters the
    normalizer keeps (every piece is spelled in them); `pieces` and `scores` are the unigram model's."""

    def __init__(self, alphabet: str, pieces: list[str], scores: list[float]) -> None:
        if len(pieces) != len(scores) or len(set(pieces)) != len(pieces) or "" in pieces:
            raise ValueError("word pieces must be distinct non-empty strings, one score each")
        if max(map(len, pieces), default=0) > MAX_PIECE_LENGTH or not all(map(math.isfinite, scores)):
            raise ValueError(f"word pieces must be at most {MAX_PIECE_LENGTH} characters long, each with a finite "
                             "score")
        allowed = set(alphabet) - {" "} | {WORD_START}
        odd = sorted({c for p in pieces for c in p} - allowed)
        if odd:
            raise ValueError(f"word pieces spell characters outside the alphabet: {''.join(odd)!r}")
        missing = sorted(allowed - set(pieces))
        if missing:
            raise ValueError(f"word pieces lack single characters of the alphabet: {''.join(missing)!r}")
        self.alphabet, self.pieces, self.scores = alphabet, list(pieces), [float(s) for s in scores]
        self._ids = {p: i + 1 for i, p in enumerate(pieces)}
        self._longest = max(len(p) for p in pieces)
        self._chars = set(alphabet)
        self._text = [p.replace(WORD_START, " ") for p in pieces]

    @property
    def vocab_size(self) -> int:
        """Number of output classes including the blank."""
        return len(self.pieces) + 1

    @property
    def units(self) -> list[str]:
        """Each output class's text after the blank, in id order."""
        return self._text

    @property
    def space_id(self) -> int | None:
        """The id of the piece that is a word's start alone (emitted between words as a character model's space)."""
        return self._ids.get(WORD_START)

    def oov(self, text: str) -> set[str]:
        """Characters of `text` that no piece spells."""
        return {c for c in text if c not in self._chars}

    def encode(self, text: str) -> list[int]:
        """Ids for `text` (normalized: single spaces): the cut into pieces with the highest total score. KeyError on
        a character outside the alphabet."""
        text = text.strip()
        if not text:
            return []
        s = WORD_START + text.replace(" ", WORD_START)
        n = len(s)
        best = [0.0] + [-math.inf] * n  # best[i]: the highest score of s[:i] cut into pieces
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # back[i]: (where its last piece starts, that piece's id)
        for end in range(1, n + 1):
            for start in range(max(0, end - self._longest), end):
                if best[start] == -math.inf:
                    continue
                i = self._ids.get(s[start:end])
                if i is not None and best[start] + self.scores[i - 1] > best[end]:
                    best[end], back[end] = best[start] + self.scores[i - 1], (start, i)
        if best[n] == -math.inf:
            raise KeyError(next(c for c in text if c not in self._chars))
        ids, end = [], n
        while end:
            end, i = back[end]
            ids.append(i)
        return ids[::-1]

    def decode(self, ids: list[int]) -> str:
        """Text for ids (blanks are ignored; no CTC collapsing here); a word's first piece brings a space before it."""
        return "".join(self._text[i - 1] for i in ids if i != 0)

    def to_dict(self) -> dict[str, Any]:
        return {"alphabet": self.alphabet, "pieces": self.pieces, "scores": self.scores}


def too_few_pieces(count: int, alphabet: str) -> str | None:
    """Why `count` word pieces cannot spell `alphabet` (each character alone and the start of a word), or None."""
    least = len(set(alphabet) - {" "}) + 1
    if count >= least:
        return None
    return f"text.pieces={count} is fewer than the alphabet's {least - 1} characters and the word start: use at least {least}"


def learn_pieces(texts: Iterable[str], count: int, alphabet: str) -> tuple[list[str], list[float]]:
    """Up to `count` word pieces (and their scores) of a unigram model learned from `texts` (normalized transcripts
    spelled in `alphabet`); every character of the alphabet is a piece. Fewer when the texts hold fewer."""
    return model_pieces(learn_model(texts, count, alphabet))


def learn_model(texts: Iterable[str], count: int, alphabet: str) -> bytes:
    """sentencepiece's unigram model (serialized) of up to `count` pieces learned from `texts`, each character of
    `alphabet` among them. A corpus of more than MAX_SENTENCES transcripts is sampled to that many as it is read
    (memory stays bounded). The same texts give the same model: one thread, the sample's generator seeded."""
    from ..extras import require

    spm = require("sentencepiece", "pieces", "text.pieces")
    spm.set_random_generator_seed(0)  # the sample of a corpus over MAX_SENTENCES
    model = io.BytesIO()
    chars = "".join(c for c in alphabet if c != " ")  # each a piece, in the transcripts or not
    spm.SentencePieceTrainer.train(
        sentence_iterator=(t for t in texts if t.strip()), model_writer=model, vocab_size=count + 1,
        model_type="unigram", character_coverage=1.0, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=True, split_digits=False, byte_fallback=False, bos_id=-1, eos_id=-1, unk_id=0,
        hard_vocab_limit=False, required_chars=chars, num_threads=1, input_sentence_size=MAX_SENTENCES,
        shuffle_input_sentence=True, max_sentence_length=1 << 16, minloglevel=2)
    return model.getvalue()


def model_pieces(model: bytes) -> tuple[list[str], list[float]]:
    """The pieces and scores of a serialized sentencepiece model, its unknown and control symbols left out."""
    from ..extras import require

    sp = require("sentencepiece", "pieces", "text.pieces").SentencePieceProcessor(model_proto=model)
    kept = [i for i in range(sp.get_piece_size()) if not (sp.is_unknown(i) or sp.is_control(i))]
    return [sp.id_to_piece(i) for i in kept], [sp.get_score(i) for i in kept]
