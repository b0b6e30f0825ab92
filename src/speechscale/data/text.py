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
from typing import Any

BLANK = 0

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")  # DIGIT_WORDS[d]
DIGIT_MODES = ("spell", "drop", "keep")  # 12 -> twelve | removed | kept (add digits to the alphabet)


class TextNormalizer:
    """Lower-case, fold accents, spell or drop digits, turn punctuation into spaces, squeeze spaces.

    Apostrophes inside words are kept ("don't"); quote marks around words are removed.
    """

    def __init__(self, alphabet: str = "abcdefghijklmnopqrstuvwxyz' ", digits: str = "spell") -> None:
        self.alphabet = alphabet
        self.digits = digits
        self._keep = set(alphabet)

    def _digits(self, text: str) -> str:
        if self.digits == "keep":
            return text
        if self.digits == "drop":
            return _NUMBER.sub(" ", text)

        def spell(m: re.Match[str]) -> str:
            from num2words import num2words  # here, not at the top: importing it (every language) costs
            # 34 ms of CPU, which every process that imports the data package (training workers, the CLI) paid

            raw = m.group(0).replace(",", "")
            try:
                return " " + num2words(float(raw) if "." in raw else int(raw)) + " "
            except (ValueError, OverflowError, NotImplementedError):
                return " "

        return _NUMBER.sub(spell, text)

    def __call__(self, text: str) -> str:
        text = unicodedata.normalize("NFKD", text.translate(_APOSTROPHES))
        text = "".join(c for c in text if not unicodedata.combining(c)).lower()
        text = self._digits(text)
        text = text.replace("-", " ")
        out = []
        for c in text:
            if c in self._keep:
                out.append(c)
            elif c.isalnum():
                out.append(c)  # an out-of-alphabet letter stays so that validation can flag it
            else:
                out.append(" ")
        text = "".join(out)
        text = re.sub(r"(?<![a-z0-9])'|'(?![a-z0-9])", " ", text)  # quote marks, not apostrophes
        return re.sub(r"\s+", " ", text).strip()

    def to_dict(self) -> dict[str, Any]:
        return {"alphabet": self.alphabet, "digits": self.digits}


class CharTokenizer:
    """Characters to ids; id 0 is the CTC blank, the alphabet follows from 1."""

    def __init__(self, alphabet: str = "abcdefghijklmnopqrstuvwxyz' ") -> None:
        self.alphabet = alphabet
        self._ids = {c: i + 1 for i, c in enumerate(alphabet)}

    @property
    def vocab_size(self) -> int:
        """Number of output classes including the blank."""
        return len(self.alphabet) + 1

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
