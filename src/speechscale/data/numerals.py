"""Numbers and symbols read out as a speaker says them, in a language num2words spells: amounts of money, clock times,
years and decades, ordinals (English; French, Spanish, Italian and Portuguese with their suffixes; German dates), cardinals and
decimals written with the language's own decimal mark, and `&` and `%`.

    >>> read = NumberReader("en")
    >>> " ".join(read("In 1990 it cost $5.50 at 10:05 on the 21st").split())
    'In nineteen ninety it cost five dollars and fifty cents at ten oh five on the twenty-first'
    >>> " ".join(NumberReader("de")("1.000,5 kg für 3 €").split())
    'eintausend komma fünf kg für drei euro'

The words come in lower case with num2words' hyphens and commas, and with spaces around them, which the text
normalizer squeezes.
"""
from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation
from typing import Any

# languages whose decimal mark is a comma and whose thousands are grouped with a point (1.000,5)
_COMMA_DECIMAL = {"de", "fr", "es", "it", "nl", "pt", "pl", "ru", "uk", "cs", "sk", "sl", "hr", "sr", "ro", "hu",
                  "da", "no", "nb", "sv", "fi", "tr", "id", "lt", "lv", "et", "bg", "el", "az", "kz", "be", "ca",
                  "is", "ky", "tg", "tk", "uz", "vi"}
# symbols read out as words, by the language (its num2words code's first two letters)
SYMBOL_WORDS = {"en": {"&": "and", "%": "percent"}, "de": {"&": "und", "%": "prozent"},
                "fr": {"&": "et", "%": "pour cent"}, "es": {"&": "y", "%": "por ciento"},
                "it": {"&": "e", "%": "per cento"}, "nl": {"&": "en", "%": "procent"},
                "pt": {"&": "e", "%": "por cento"}}
_AMOUNT = r"(\d+(?:[.,]\d+)*)"  # digits with group and decimal marks, as a language writes them
NUMBER = re.compile(_AMOUNT)
_CURRENCIES = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "₽": "RUB", "zł": "PLN",
               # ISO codes, as the lower-cased text holds them, beside an amount ("USD 5", "5 EUR")
               **{c.lower(): c for c in "USD EUR GBP JPY CHF CAD AUD CNY INR PLN SEK NOK DKK CZK HUF BRL MXN".split()}}
_SYMBOL = r"([$€£¥₹₽]|(?<![^\W\d_])(?:zł|" + "|".join(c for c in _CURRENCIES if c.isalpha() and c.isascii()) + r")(?![^\W\d_]))"
_SCALES = "thousand|million|billion|trillion"  # English scale words an amount of money may carry
_MONEY_BEFORE = re.compile(_SYMBOL + r"\s?" + _AMOUNT + "()")
_MONEY_BEFORE_SCALED = re.compile(_SYMBOL + r"\s?" + _AMOUNT + r"(?:\s+(" + _SCALES + r")\b)?", re.IGNORECASE)
_MONEY_AFTER = re.compile(r"(?<![\d.,])" + _AMOUNT + r"\s?" + _SYMBOL)
# English currency words num2words lacks or says otherwise than a speaker
_EXTRA_FORMS = {"en": {"JPY": (("yen", "yen"), ("sen", "sen")), "GBP": (("pound", "pounds"), ("penny", "pence"))}}
_TIME = re.compile(r"(?<![\d.,:])([01]?\d|2[0-4]):([0-5]\d)(?![\d:])(\s*[ap]\.?m\b\.?)?", re.IGNORECASE)
_DECADE = re.compile(r"(?<![\d.,])'?((?:1[1-9]|20)?\d0)'?s\b")  # 1990s, 1990's, 90s, '90s
_YEAR = re.compile(r"(?<![\d.,:])(1[1-9]\d\d|20\d\d)(?![\d:]|[.,]\d)")  # a bare 1100-2099
_ORDINAL = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th)\b")  # English: 21st
# ordinals written with a suffix in other languages, as the lower-cased text holds them: French 1er, 1re, 2e, 3ème,
# 2nd(e); Spanish, Italian and Portuguese 1º, 2ª, 1.º (folded to 1o, 2a when the alphabet lacks º and ª)
_ORDINALS = {
    "fr": re.compile(r"(?<![\d.,])(\d+)(er|re|ère|ere|nde|nd|ième|ieme|ème|eme|e)(?![^\W\d_])"),
    **dict.fromkeys(("es", "it", "pt"), re.compile(r"(?<![\d.,])(\d+)\.?(º|ª|o|a)(?![^\W\d_])")),
}
# German writes an ordinal with a point ("am 3. Mai"): read as one before a month (or "bis 5. Mai"), where the point
# is no sentence's end; the word before it decides the ending (am dritten, der dritte, 3. Mai: dritter)
_DE_MONTHS = "januar|jänner|februar|märz|marz|maerz|april|mai|juni|juli|august|september|oktober|november|dezember"
_DE_DATE = re.compile(r"(?:(?<![^\W\d_])([^\W\d_]+)\s+)?(?<![\d.,])(\d{1,2})\.(?=\s+(?:(?:bis|und|oder)\s+\d{1,2}\.\s+)?"
                      r"(?:" + _DE_MONTHS + r")(?![^\W\d_]))")
_DE_WEAK = {"am", "im", "vom", "zum", "zur", "beim", "dem", "den", "des", "bis", "ab", "seit", "nach", "vor", "und",
            "oder"}
# ... and after an article before a word ("der 2. Weltkrieg", "im 3. Stock", "zum 5. Mal"): an article's number
# with a point is an ordinal, whatever follows
_DE_ARTICLE_ORDINAL = re.compile(r"(?<![^\W\d_])(der|die|das|den|dem|des|am|im|vom|zum|zur|beim|ins|ans)\s+"
                                 r"(?<![\d.,])(\d{1,3})\.(?=\s+[^\W\d_])")
_DE_DEFINITE = {"der", "die", "das", "ins", "ans"}  # ins, ans: in das, an das


@functools.cache
def _drops_decimal_fractions(language: str) -> bool:
    """Whether `language`'s num2words converter drops a Decimal's fraction (Italian, Welsh), so that a decimal is
    read from its float."""
    from num2words import num2words

    return num2words(Decimal("3.5"), lang=language) == num2words(3, lang=language)


class NumberReader:
    """Spells the numbers of a text in `language` (num2words' code: en, de, fr, ...), in the order a reader meets
    their forms: money, then (English) clock times, decades and ordinals, then years, then any other number.

    Money is a currency symbol (or an ISO code, or a sign such as zł) before or after an amount: whole units, and
    the cents when there are two decimals ("$5.50": five dollars and fifty cents, joined by the language's word for
    `&`); an English scale word after it is read before the unit ("$2.5 million": two point five million dollars). A
    bare number from 1100 to 2099 is read as a year ("1990": nineteen ninety, "1500": fifteen hundred) in the
    language's way. A number num2words cannot read as one (a version, 1.2.3) is read a digit group at a time, with
    the decimal word for a decimal mark between."""

    def __init__(self, language: str = "en") -> None:
        self.language = language
        self.english = language[:2] == "en"
        comma = language.split("_")[0] in _COMMA_DECIMAL
        self.group, self.point = (".", ",") if comma else (",", ".")
        self.symbols = SYMBOL_WORDS.get(language[:2], {})

    def _converter(self) -> Any:
        from num2words import CONVERTER_CLASSES  # here, not at the top: importing it costs start-up

        return CONVERTER_CLASSES[self.language]

    def _words(self, value: Any, to: str = "cardinal") -> str:
        from num2words import num2words

        fraction = isinstance(value, Decimal) and value != int(value)
        if fraction and _drops_decimal_fractions(self.language):
            value = float(value)
        out = num2words(value, to=to, lang=self.language).lower()
        if not out.strip() and fraction:  # Turkish reads some Decimals as nothing: their float it reads
            out = num2words(float(value), to=to, lang=self.language).lower()
        if not out.strip():
            raise ValueError(f"num2words read {value} as nothing in {self.language}")
        return out

    def _value(self, raw: str) -> Decimal | None:
        """`raw` (digits with the language's group and decimal marks) as a number, or None when its marks do not
        make one (1.2.3, or groups not of three digits)."""
        head, frac = raw.rsplit(self.point, 1) if self.point in raw else (raw, "")
        parts = head.split(self.group)
        if len(parts) > 1 and not (len(parts[0]) <= 3 and all(len(p) == 3 for p in parts[1:])):
            return None
        if self.group in frac:
            return None
        try:
            return Decimal("".join(parts) + ("." + frac if frac else ""))
        except InvalidOperation:
            return None

    def _number(self, raw: str) -> str:
        value = self._value(raw)
        try:
            if value is None:  # each run of digits, the decimal word for a decimal mark
                point = getattr(self._converter(), "pointword", "")
                point = f" {point.lower()} " if isinstance(point, str) else " "
                runs = re.split(r"([.,])", raw)  # digits, mark, digits, ...
                return " " + "".join(self._words(int(r)) if i % 2 == 0 else point if r == self.point else " "
                                     for i, r in enumerate(runs)) + " "
            return " " + self._words(int(value) if value.as_tuple().exponent >= 0 else value) + " "
        except (ValueError, OverflowError, NotImplementedError):
            return " "

    def _money(self, symbol: str, raw: str, scale: str | None) -> str | None:
        """An amount of money in words, or None when the language has no words for the currency."""
        conv, code, value = self._converter(), _CURRENCIES[symbol], self._value(raw)
        forms = _EXTRA_FORMS.get(self.language[:2], {}).get(code) or getattr(conv, "CURRENCY_FORMS", {}).get(code)
        if forms is None or value is None:
            return None
        whole, decimals = int(value), max(0, -value.as_tuple().exponent)
        try:
            if scale or decimals not in (0, 2):  # "2.5 million dollars", "1.5 dollars"
                amount = self._words(whole if value == whole else value) + (f" {scale.lower()}" if scale else "")
                return f" {amount} {conv.pluralize(2 if scale or value != whole else whole, forms[0]).lower()} "
            cents = int((value - whole) * 100)
            said = [f"{self._words(whole)} {conv.pluralize(whole, forms[0]).lower()}"] if whole or not cents else []
            if cents:
                said.append(f"{self._words(cents)} {conv.pluralize(cents, forms[1]).lower()}")
            join = f" {self.symbols['&']} " if "&" in self.symbols else " "
            return " " + join.join(said) + " "
        except (ValueError, OverflowError, NotImplementedError, TypeError, IndexError):
            return None

    def _time(self, m: re.Match[str]) -> str:
        hour, minute, meridiem = int(m.group(1)), int(m.group(2)), m.group(3)
        said = self._words(hour)
        if minute:
            said += (" oh " if minute < 10 else " ") + self._words(minute)
        elif not meridiem:
            said += " o'clock" if 1 <= hour <= 12 else " hundred"
        return f" {said}{meridiem or ''} "

    def _decade(self, m: re.Match[str]) -> str:
        digits = m.group(1)
        said = self._words(int(digits), "year" if len(digits) == 4 else "cardinal")
        last = said.rsplit(" ", 1)[-1].rsplit("-", 1)[-1]
        plural = last[:-1] + "ies" if last.endswith("y") else last + "s"
        return " " + said[: len(said) - len(last)] + plural + " "

    def _ordinal(self, m: re.Match[str]) -> str:
        """A suffixed ordinal (French 1re, Spanish 2ª) in words, feminine where the suffix says so."""
        n, suffix = int(m.group(1)), m.group(2)
        if self.language[:2] == "fr":
            if n == 1 and suffix in ("re", "ère", "ere"):
                return " première "
            if n == 2 and suffix in ("nd", "nde"):
                return f" {'seconde' if suffix == 'nde' else 'second'} "
            if suffix in ("re", "ère", "ere", "nd", "nde"):  # 3re, 5nd: no such ordinal; the number as it is
                return m.group(0)
        said = self._words(n, "ordinal")
        if suffix in ("ª", "a"):  # the feminine: primera, seconda, vigésima primeira
            said = re.sub(r"o\b", "a", said)
        return f" {said} "

    def _german_date(self, m: re.Match[str]) -> str:
        """A German ordinal (a date's "am 3." before a month, "der 2." after an article) with the ending its article
        asks for."""
        before = m.group(1) or ""
        said = self._words(int(m.group(2)), "ordinal")
        ending = "n" if before in _DE_WEAK else "" if before in _DE_DEFINITE else "r"
        return f"{before} {said}{ending} "

    def __call__(self, text: str) -> str:
        """`text` with each number and symbol in words."""
        for symbol, word in self.symbols.items():
            text = text.replace(symbol, f" {word} ")
        if not any(c.isdigit() for c in text):
            return text

        def money(symbol: str, raw: str, scale: str | None) -> str:
            said = self._money(symbol, raw, scale or None)
            if said is None:  # no words for the currency: the amount alone, and a code's letters
                return self._number(raw) + (f"{scale} " if scale else "") + (f"{symbol} " if symbol.isalpha() else "")
            return said

        before = _MONEY_BEFORE_SCALED if self.english else _MONEY_BEFORE
        text = before.sub(lambda m: money(m.group(1), m.group(2), m.group(3)), text)
        text = _MONEY_AFTER.sub(lambda m: money(m.group(2), m.group(1), None), text)
        if self.english:
            text = _TIME.sub(self._time, text)
            text = _DECADE.sub(self._decade, text)
            text = _ORDINAL.sub(lambda m: " " + self._words(int(m.group(1).replace(",", "")), "ordinal") + " ", text)
        elif self.language[:2] in _ORDINALS:
            text = _ORDINALS[self.language[:2]].sub(self._ordinal, text)
        elif self.language[:2] == "de":
            text = _DE_DATE.sub(self._german_date, text)
            text = _DE_ARTICLE_ORDINAL.sub(self._german_date, text)
        text = _YEAR.sub(lambda m: " " + self._words(int(m.group(1)), "year") + " ", text)
        return NUMBER.sub(lambda m: self._number(m.group(0)), text)
