"""Spoken English numbers written in digits, for reading (inverse text normalization): a model spells what was said
("nineteen ninety", "five dollars and fifty cents"); `transcribe --digits` writes it as a reader expects it.

    >>> write_digits("in nineteen ninety it cost five dollars and fifty cents at ten oh five")
    'in 1990 it cost $5.50 at 10:05'
    >>> write_digits("one of the twenty first two point five percent of three million people")
    'one of the 21st 2.5% of 3 million people'

It inverts what data.numerals reads out: cardinals, decimals, years, money, percentages, ordinals and clock
times. A whole number below ten, and an ordinal below tenth, stay words ("one of them", "third place"), as most
style guides write them, unless money or a percentage follows.

German, French, Spanish, Italian, Portuguese and Dutch are written by text2num (`pip install 'speechscale[digits]'`),
with the language's own marks ("neunzehnhundertneunzig" 1990, "drei komma fünf prozent" 3,5 %, "am
einundzwanzigsten" am 21.); a lone number below ten stays a word there too.
"""
from __future__ import annotations

import functools
import re
from typing import Any

from ..data.numerals import SYMBOL_WORDS

ONES = {w: i for i, w in enumerate("zero one two three four five six seven eight nine".split())}
TEENS = {w: 10 + i for i, w in enumerate(
    "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split())}
TENS = {w: 20 + 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
DECADES = {w: 20 + 10 * i for i, w in enumerate(
    "twenties thirties forties fifties sixties seventies eighties nineties".split())}
SCALES = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9, "trillion": 10 ** 12}
ORDINALS = {**{w: i + 1 for i, w in enumerate("first second third fourth fifth sixth seventh eighth ninth".split())},
            **{w: 10 + i for i, w in enumerate(("tenth eleventh twelfth thirteenth fourteenth fifteenth sixteenth "
                                                "seventeenth eighteenth nineteenth").split())},
            **{w: 20 + 10 * i for i, w in enumerate(("twentieth thirtieth fortieth fiftieth sixtieth seventieth "
                                                     "eightieth ninetieth").split())}}
ORDINAL_SCALES = {"hundredth": 100, "thousandth": 10 ** 3, "millionth": 10 ** 6, "billionth": 10 ** 9}
STARTS = {*ONES, *TEENS, *TENS, *ORDINALS, *ORDINAL_SCALES}  # the words a number may begin with
CURRENCIES = {"dollar": "$", "dollars": "$", "pound": "£", "pounds": "£", "euro": "€", "euros": "€", "yen": "¥"}
CENTS = {"cent", "cents", "penny", "pence"}
MERIDIEMS = {("a", "m"): "a.m.", ("p", "m"): "p.m.", ("am",): "a.m.", ("pm",): "p.m."}


class _Reader:
    """One text's words and the spans of them that are numbers."""

    def __init__(self, words: list[str]) -> None:
        self.w = words
        self.n = len(words)

    def at(self, i: int) -> str:
        return self.w[i] if 0 <= i < self.n else ""

    def below_100(self, i: int) -> tuple[int, int] | None:
        """(value, next index) of "twenty one", "twelve", "seven" at i."""
        word = self.at(i)
        if word in TENS:
            return (TENS[word] + ONES[self.at(i + 1)], i + 2) if ONES.get(self.at(i + 1), 0) > 0 else (TENS[word], i + 1)
        if word in TEENS:
            return TEENS[word], i + 1
        if word in ONES:
            return ONES[word], i + 1
        return None

    def below_1000(self, i: int) -> tuple[int, int] | None:
        """ "three hundred and twenty one" and the forms below_100 reads."""
        first = self.below_100(i)
        if first is None:
            return None
        value, j = first
        if 1 <= value <= 9 and self.at(j) == "hundred":
            value, j = value * 100, j + 1
            k = j + 1 if self.at(j) == "and" else j
            rest = self.below_100(k)
            if rest is not None and rest[0] > 0:
                value, j = value + rest[0], rest[1]
        return value, j

    def cardinal(self, i: int) -> tuple[int, int, bool] | None:
        """(value, next index, whether it ended on a scale word of a million or more) of a whole number at i."""
        total, last_scale, j = 0, None, i
        while True:
            chunk = self.below_1000(j)
            if chunk is None:
                break
            value, k = chunk
            scale = SCALES.get(self.at(k))
            if scale is not None and (last_scale is None or scale < last_scale) and value > 0:
                total, last_scale, j = total + value * scale, scale, k + 1
                if self.at(j) == "and" and self.below_100(j + 1) is not None:
                    j += 1  # "two thousand and five"
                    value, j = self.below_100(j)  # type: ignore[misc]
                    return total + value, j, False
                continue
            return total + value, k, False
        if last_scale is None:
            return None
        return total, j, last_scale >= 10 ** 6

    def century(self, i: int) -> tuple[int, int] | None:
        """The first half of a year said in two (eleven to twenty: "nineteen" of "nineteen ninety") at i."""
        first = self.below_100(i)
        return first if first is not None and 11 <= first[0] <= 20 else None

    def year(self, i: int) -> tuple[str, int] | None:
        """ "nineteen ninety", "nineteen oh five", "eighteen hundred", "twenty twenty four": 1100-2099; and decades,
        "nineteen nineties" (1990s), "eighteen hundreds" (1800s)."""
        found = self.century(i)
        if found is None:
            return None
        century, j = found
        word = self.at(j)
        if word in ("hundred", "hundreds"):
            return f"{century}00{'s' * (word == 'hundreds')}", j + 1
        if word in DECADES:
            return f"{century * 100 + DECADES[word]}s", j + 1
        if word == "oh" and ONES.get(self.at(j + 1), 0) > 0:
            return str(century * 100 + ONES[self.at(j + 1)]), j + 2
        rest = self.below_100(j)
        if rest is None or rest[0] < 10:
            return None
        return str(century * 100 + rest[0]), rest[1]

    def decimal(self, i: int, whole: int, j: int) -> tuple[str, int] | None:
        """The digits after "point" at j, joined to `whole`: ("2.5", next index)."""
        if self.at(j) != "point":
            return None
        k = j + 1
        digits = ""
        while self.at(k) in ONES or self.at(k) == "oh":
            digits += str(ONES.get(self.at(k), 0))
            k += 1
        return (f"{whole}.{digits}", k) if digits else None

    def ordinal(self, i: int) -> tuple[int, int] | None:
        """(value, next index) of "twenty first", "one hundred and third", "thousandth" at i."""
        whole = self.cardinal(i)
        for k in range(min(self.n - 1, i + 12), i - 1, -1):  # the longest cardinal before an ordinal word
            word = self.at(k)
            if word not in ORDINALS and word not in ORDINAL_SCALES:
                continue
            prefix = 0
            if k == i and self.at(i - 1) in {*ONES, *TEENS, *TENS, "a", "an"}:
                return None  # a fraction: "one tenth", "a tenth"
            if k > i:
                if whole is None or whole[1] != k - (self.at(k - 1) == "and"):
                    continue
                prefix = whole[0]
            if word in ORDINAL_SCALES:  # the scale multiplies the last group: "one thousand one hundredth" is 1100
                scale = ORDINAL_SCALES[word]
                group = prefix % (1000 if scale < 1000 else scale)
                return prefix - group + (group or 1) * scale, k + 1
            value = ORDINALS[word]
            if prefix and prefix % (10 if value < 10 else 100) != 0:
                continue  # "twenty twentieth" is no number
            return prefix + value, k + 1
        return None

    def clock(self, i: int) -> tuple[str, int] | None:
        """ "ten oh five" -> 10:05, "ten thirty p m" -> 10:30 p.m., "three p m" -> 3 p.m."""
        hour = self.below_100(i)
        if hour is None or not 1 <= hour[0] <= 12:
            return None
        h, j = hour
        said = None
        if self.at(j) == "oh" and ONES.get(self.at(j + 1), 0) > 0:
            said, j = f"{h}:0{ONES[self.at(j + 1)]}", j + 2
        else:
            minutes = self.below_100(j)
            if minutes is not None and 10 <= minutes[0] <= 59 and self.meridiem(minutes[1]) is not None:
                said, j = f"{h}:{minutes[0]:02d}", minutes[1]
        meridiem = self.meridiem(j)
        if meridiem is not None:
            return f"{said or h} {meridiem[0]}", meridiem[1]
        if said is None and self.at(j) == "o'clock":
            return f"{h} o'clock", j + 1
        return (said, j) if said is not None else None

    def meridiem(self, j: int) -> tuple[str, int] | None:
        for words, written in MERIDIEMS.items():
            if tuple(self.w[j:j + len(words)]) == words:
                return written, j + len(words)
        return None

    def money(self, amount: str, j: int, scaled: bool) -> tuple[str, int] | None:
        """ "$5.50" from the amount read before j and "dollars and fifty cents" at j."""
        scale = ""
        if self.at(j) in SCALES and not scaled:  # "two point five million dollars"
            scale, j = f" {self.at(j)}", j + 1
        symbol = CURRENCIES.get(self.at(j))
        if symbol is None:
            return None
        j += 1
        k = j + 1 if self.at(j) == "and" else j
        cents = self.below_100(k)
        if not scale and "." not in amount and cents is not None and self.at(cents[1]) in CENTS:
            return f"{symbol}{amount}.{cents[0]:02d}", cents[1] + 1
        return f"{symbol}{amount}{scale}", j

    def number(self, i: int) -> tuple[str, int] | None:
        """The written form of the number said at i and the index after it, or None when none starts there."""
        if self.at(i) not in STARTS:  # every form begins with a number word or an ordinal
            return None
        found = [f for f in (self.clock(i), self._ordinal(i), self._amount(i)) if f is not None]
        return max(found, key=lambda f: f[1]) if found else None

    def _ordinal(self, i: int) -> tuple[str, int] | None:
        found = self.ordinal(i)
        if found is None or found[0] < 10:
            return None
        value, j = found
        suffix = "th" if value % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(value % 10, "th")
        return f"{_grouped(value)}{suffix}", j

    def _amount(self, i: int) -> tuple[str, int] | None:
        """A year, or a whole or decimal number with what may follow it: money, percent."""
        year, whole = self.year(i), self.cardinal(i)
        if year is not None and (whole is None or year[1] > whole[1]):
            written, j = year
            if written.isdigit():  # "fifteen hundred dollars" is an amount said as a year is
                if self.at(j) == "percent":
                    return f"{written}%", j + 1
                return self.money(written, j, False) or year
            return year
        if whole is None:
            return None
        value, j, scaled = whole
        amount = _scaled(value) if scaled else _grouped(value)
        small = value < 10 and not scaled
        dec = self.decimal(i, value, j)
        if dec is not None:
            amount, j, small = dec[0], dec[1], False
        money = self.money(amount, j, scaled)
        if money is not None:
            return money
        if self.at(j) == "percent":
            return f"{amount}%", j + 1
        return None if small else (amount, j)


def _grouped(value: int) -> str:
    """1234 -> "1234", 12345 -> "12,345": commas from five digits on."""
    return f"{value:,}" if value >= 10_000 else str(value)


def _scaled(value: int) -> str:
    """3000000 -> "3 million": the number before its largest scale word, when it divides it."""
    for word, scale in sorted(SCALES.items(), key=lambda s: -s[1]):
        if scale >= 10 ** 6 and value % scale == 0:
            return f"{_grouped(value // scale)} {word}"
    return _grouped(value)


# text2num's languages: their thousands mark (from five digits on), and whether a space comes before "%"
TEXT2NUM = {"de": (".", True), "fr": ("\u202f", True), "es": (".", True), "it": (".", False), "pt": (".", False),
            "nl": (".", False)}
_PERCENT_MARK = "\u2030pct"  # stands for the percent words while text2num reads (it would read "cent" in "pour cent")
_WRITTEN = re.compile(r"^\d[\d.,]*\.?$")  # a token text2num wrote: digits, marks, an ordinal's point


def _other_spans(words: list[str], language: str) -> list[tuple[str, int, int]]:
    """digit_spans for a language text2num writes: its output aligned with `words` word by word."""
    from text_to_num import alpha2digit

    percent = SYMBOL_WORDS[language]["%"].split()
    mapped, where, i = [], [], 0  # the words text2num reads; each one's span of `words`
    while i < len(words):
        if words[i:i + len(percent)] == percent:
            mapped.append(_PERCENT_MARK)
            where.append((i, i + len(percent)))
            i += len(percent)
            continue
        # German says "eine million" where text2num reads only "ein million"
        nxt = words[i + 1] if i + 1 < len(words) else ""
        mapped.append("ein" if language == "de" and words[i] == "eine" and nxt.startswith("milli") else words[i])
        where.append((i, i + 1))
        i += 1
    group, spaced = TEXT2NUM[language]
    units = _currency_words(language)
    spans, i, took_percent = [], 0, False
    for token in alpha2digit(" ".join(mapped), language, threshold=0).split():
        if took_percent and token == _PERCENT_MARK:  # the percent words the last number took
            took_percent = False
            continue
        took_percent = False
        if i < len(mapped) and token == mapped[i]:
            i += 1
            continue
        if not _WRITTEN.match(token):
            break  # a word text2num changed: what follows cannot be placed
        # the words it stands for: the longest run from here that text2num alone writes as this token (a word
        # such as "y" or "und" may be part of a number or not)
        n = next((n for n in range(min(len(mapped) - i, 40), 0, -1)
                  if alpha2digit(" ".join(mapped[i:i + n]), language, threshold=0) == token), 0)
        if not n:
            break
        x, y, i = i, i + n, i + n
        after = mapped[y] if y < len(mapped) else ""
        whole = token.rstrip(".")  # an ordinal's point off
        if n == 1 and whole.isdigit() and int(whole) < 10 and after != _PERCENT_MARK and after not in units:
            continue  # a lone number below ten stays a word, unless a percentage or money follows
        text, end = _group(token, group), where[y - 1][1]
        if after == _PERCENT_MARK:  # "3,5 %"
            text, end = text + (" %" if spaced else "%"), where[y][1]
            i, took_percent = i + 1, True
        spans.append((text, where[x][0], end))
    return spans


@functools.cache
def _currency_words(language: str) -> frozenset[str]:
    """The words of `language`'s currencies and their cents, as num2words spells them."""
    from num2words import CONVERTER_CLASSES

    forms = getattr(CONVERTER_CLASSES[language], "CURRENCY_FORMS", {})
    return frozenset(w.lower() for unit, cents in forms.values() for w in (*unit, *cents))


def _group(token: str, mark: str) -> str:
    """A whole number text2num wrote, from five digits on, in groups of three (1234567 -> 1.234.567)."""
    if not token.isdigit() or len(token) < 5:
        return token
    head = len(token) % 3 or 3
    return mark.join([token[:head]] + [token[i:i + 3] for i in range(head, len(token), 3)])


def digit_spans(words: list[str], language: str = "en") -> list[tuple[str, int, int]]:
    """The written form of each run of `words` that says a number: [(written, first index, index after)]. A
    number beside a number word left as a word ("nine eleven", "five twenty") stays words too: digits beside
    words would read as two numbers. `language`: English, or one of TEXT2NUM's."""
    if language[:2] != "en":
        return _other_spans(words, language[:2])
    reader, spans, i = _Reader(words), [], 0
    while i < len(words):
        found = reader.number(i)
        if found is None:
            i += 1
            continue
        spans.append((found[0], i, found[1]))
        i = found[1]
    covered = {k for _, a, b in spans for k in range(a, b)}
    said = {*ONES, *TEENS, *TENS}
    return [(text, a, b) for text, a, b in spans
            if not ((a > 0 and a - 1 not in covered and words[a - 1] in said)
                    or (b < len(words) and b not in covered and words[b] in said))]


def write_digits(text: str, language: str = "en") -> str:
    """`text` (lower-case words, as a model spells them) with its numbers written in digits."""
    words = text.split()
    out, last = [], 0
    for written, start, end in digit_spans(words, language):
        out += words[last:start] + [written]
        last = end
    return " ".join(out + words[last:])


def write_word_digits(words: list[dict[str, Any]], language: str = "en") -> list[dict[str, Any]]:
    """Timed words ({"word", "start", "end", "confidence"}) with each number's words made one: its written form,
    from the start of its first word to the end of its last, at the lowest confidence among them."""
    out, last = [], 0
    for written, start, end in digit_spans([w["word"] for w in words], language):
        out += words[last:start]
        span = words[start:end]
        merged = {**span[0], "word": written}
        if "end" in span[-1]:
            merged["end"] = span[-1]["end"]
        if all("confidence" in w for w in span):
            merged["confidence"] = min(w["confidence"] for w in span)
        out.append(merged)
        last = end
    return out + words[last:]


def check_written_digits(language: str) -> None:
    """ValueError, in one line, unless a model whose numbers are spelled in `language` (its normalizer's
    digits_language) can have them written in digits here: English, or TEXT2NUM's languages with text2num."""
    if language[:2] == "en":
        return
    if language[:2] not in TEXT2NUM:
        raise ValueError(f"numbers in digits are written for English, {', '.join(TEXT2NUM)} models; this one spells "
                         f"numbers in {language!r}")
    try:
        import text_to_num  # noqa: F401
    except ImportError:
        raise ValueError(f"numbers in digits for a {language!r} model need text2num: pip install "
                         "'speechscale[digits]'") from None


def written(result: dict[str, Any], language: str = "en") -> dict[str, Any]:
    """A transcript ({"text", "words", ...}) with its numbers written in digits, in the text and in the timed words."""
    return {**result, "text": write_digits(result.get("text", ""), language),
            **({"words": write_word_digits(result["words"], language)} if "words" in result else {})}
