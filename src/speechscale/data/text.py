"""Text: ONE normalizer used for training targets and for scoring, and the character tokenizer.

    >>> norm = TextNormalizer()
    >>> norm("And so, my fellow Americans: 2 dogs' café, 'quoted' isn't!")  # quote marks go, apostrophes stay
    "and so my fellow americans two dogs cafe quoted isn't"
    >>> tok = CharTokenizer("ab ")
    >>> tok.encode("ba a"), tok.decode([2, 1, 3, 1])
    ([2, 1, 3, 1], 'ba a')
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any, Callable, Iterable, Protocol

from .numerals import NUMBER, NumberReader
from .pieces import PieceTokenizer

BLANK = 0

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})
_QUOTE_MARK = re.compile(r"(?<![^\W_])'|'(?![^\W_])")  # an apostrophe without a letter or digit on one side


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")  # DIGIT_WORDS[d]
AUTO_ALPHABET = "auto"  # text.alphabet: the training transcripts' characters (training.preflight)
DIGIT_MODES = ("spell", "drop", "keep")  # 12 -> twelve | removed | kept (add digits to the alphabet)


class _CharMap(dict):
    """A str.translate table that computes a character's replacement the first time it is met."""

    def __init__(self, replace: Callable[[str], str]) -> None:
        super().__init__()
        self.replace = replace

    def __missing__(self, code: int) -> str:
        value = self[code] = self.replace(chr(code))
        return value


def digits_language_known(language: str) -> bool:
    """Whether num2words spells numbers in `language` (its code: en, de, fr, ...)."""
    if language == "en":  # the default: every config checks it, and importing num2words costs start-up
        return True
    from num2words import CONVERTER_CLASSES

    return language in CONVERTER_CLASSES


class TextNormalizer:
    """Lower-case (upper-case for an alphabet of capitals only, as deepspeech.pytorch's), fold accents the alphabet
    does not spell, spell or drop digits, turn punctuation into spaces,
    squeeze spaces.

    A letter the alphabet holds is kept as it is ("ä" with a German alphabet); any other loses its accents ("é"
    -> "e" with the English one). Apostrophes inside words are kept ("don't"); quote marks around words are
    removed. `alphabet=None` keeps every letter, mark and digit as written (an importer's cleaning, before any
    model's alphabet is known). Numbers are read out in `digits_language` (num2words' code: en, de, fr, es, ...) as
    a speaker says them: money, times, years, decimals with the language's mark (data.numerals).
    """

    def __init__(self, alphabet: str | None = "abcdefghijklmnopqrstuvwxyz' ", digits: str = "spell",
                 digits_language: str = "en") -> None:
        self.alphabet = alphabet
        self.digits = digits
        self.digits_language = digits_language
        self._keep = None if alphabet is None else set(alphabet)
        # an alphabet of capitals only (deepspeech.pytorch's labels) spells text in capitals
        self._upper = alphabet is not None and any(c.isupper() for c in alphabet) and not any(
            c.islower() for c in alphabet)
        self._folds = _CharMap(self._fold)  # str.translate tables, filled in as characters are met
        self._spaces = _CharMap(self._spaced)
        self._read = NumberReader(digits_language)

    def _fold(self, c: str) -> str:
        """`c` itself when the alphabet spells it (or there is no alphabet), else its letters without accents."""
        if self._keep is None or c in self._keep:
            return c
        folded = "".join(x for x in unicodedata.normalize("NFKD", c) if not unicodedata.combining(x))
        return folded.upper() if self._upper else folded.lower()

    def _digits(self, text: str) -> str:
        if self.digits == "keep":
            return text
        if self.digits == "drop":
            return NUMBER.sub(" ", text)
        return self._read(text)

    def _spaced(self, c: str) -> str:
        return c if self._kept(c) else " "

    def _kept(self, c: str) -> bool:
        if self._keep is None:  # every letter, digit and mark (a vowel sign of an abugida, say)
            return c in "' " or c.isalnum() or unicodedata.category(c).startswith("M")
        return c in self._keep or c.isalnum()  # an out-of-alphabet letter stays so that validation can flag it

    def __call__(self, text: str) -> str:
        text = unicodedata.normalize("NFC", text.translate(_APOSTROPHES))
        text = text.upper() if self._upper else text.lower()
        if not text.isascii():  # an ASCII character never decomposes
            text = text.translate(self._folds)
        text = self._digits(text)
        if self._upper:  # numbers are read out in small letters
            text = text.upper()
        text = text.replace("-", " ").translate(self._spaces)
        text = _QUOTE_MARK.sub(" ", text)  # quote marks, not apostrophes
        return re.sub(r"\s+", " ", text).strip()

    def to_dict(self) -> dict[str, Any]:
        return {"alphabet": self.alphabet, "digits": self.digits, "digits_language": self.digits_language}


def suggest_alphabet(texts: Iterable[str], digits: str = "spell", digits_language: str = "en",
                     min_count: int = 1) -> dict[str, Any]:
    """The characters of `texts` once normalized with every letter kept (digits as `digits` says) -> {"alphabet":
    those seen at least `min_count` times (letters and marks in code point order, then the apostrophe and the
    space, as the default alphabet orders them), "counts": each character's count, "rare": the characters left
    out, with their counts}."""
    normalize = TextNormalizer(alphabet=None, digits=digits, digits_language=digits_language)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(normalize(text))
    kept = {c for c, n in counts.items() if n >= min_count}
    alphabet = "".join(sorted(kept - {"'", " "})) + "".join(c for c in "' " if c in kept)
    return {"alphabet": alphabet, "counts": dict(sorted(counts.items())),
            "rare": {c: n for c, n in sorted(counts.items()) if c not in kept}}


class CharTokenizer:
    """Characters to ids; id 0 is the CTC blank, the alphabet follows from 1."""

    def __init__(self, alphabet: str = "abcdefghijklmnopqrstuvwxyz' ") -> None:
        self.alphabet = alphabet
        self._ids = {c: i + 1 for i, c in enumerate(alphabet)}

    @property
    def vocab_size(self) -> int:
        """Number of output classes including the blank."""
        return len(self.alphabet) + 1

    @property
    def units(self) -> list[str]:
        """Each output class's text after the blank, in id order."""
        return list(self.alphabet)

    @property
    def space_id(self) -> int | None:
        """The id of the space (the word separator), if the alphabet has one."""
        return self._ids.get(" ")

    def oov(self, text: str) -> set[str]:
        """Characters of `text` that are not in the alphabet."""
        return {c for c in text if c not in self._ids}

    def encode(self, text: str) -> list[int]:
        """Ids for `text`; raises KeyError on a character outside the alphabet."""
        return [self._ids[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        """Text for ids (blanks are ignored; no CTC collapsing here)."""
        return "".join(self.alphabet[i - 1] for i in ids if i != BLANK)

    def to_dict(self) -> dict[str, Any]:
        return {"alphabet": self.alphabet}


class Tokenizer(Protocol):
    """Text to a model's output classes and back (id 0 the CTC blank): characters or word pieces."""

    alphabet: str

    @property
    def vocab_size(self) -> int: ...

    @property
    def units(self) -> list[str]: ...

    @property
    def space_id(self) -> int | None: ...

    def oov(self, text: str) -> set[str]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


def build_tokenizer(alphabet: str, pieces: list[str] | None = None, scores: list[float] | None = None) -> Tokenizer:
    """The word pieces' tokenizer when `pieces` are given, else the alphabet's characters'."""
    if pieces:
        return PieceTokenizer(alphabet, pieces, scores or [])
    return CharTokenizer(alphabet)
