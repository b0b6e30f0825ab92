"""Numbers written in digits (decoding/digits.py): the inverse of what the text normalizer reads out, checked by the
round trip over thousands of written numbers, on timed words, and through a model that learned to say them."""
import json
import random
import subprocess
import sys

import pytest

from speechscale.data.text import TextNormalizer
from speechscale.decoding.digits import TEXT2NUM, check_written_digits, write_digits, write_word_digits


def _suffix(n):
    return "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _written_numbers():
    """(as written, as written back): numbers in every form the normalizer reads out."""
    rng = random.Random(0)
    cases = []
    for _ in range(2000):
        v = rng.choice([rng.randrange(10, 100), rng.randrange(100, 10 ** 4), rng.randrange(10 ** 4, 10 ** 7),
                        rng.randrange(10 ** 7, 10 ** 10)])
        if v % 10 ** 6:  # a whole number of millions is written "3 million"
            cases.append((f"{v:,}", f"{v:,}" if v >= 10_000 else str(v)))
    # a year from 1100 to 2099 (those said "eleven oh five" read as clock times)
    cases += [(str(y), str(y)) for y in range(1100, 2100) if not (y // 100 in (11, 12) and 1 <= y % 100 <= 9)]
    for _ in range(300):
        dollars, cents = rng.randrange(0, 20_000), rng.randrange(1, 100)
        cases.append((f"${dollars:,}.{cents:02d}", f"${dollars:,}.{cents:02d}" if dollars >= 10_000
                      else f"${dollars}.{cents:02d}"))
        n, dec = rng.randrange(1, 500), f"{rng.randrange(0, 100)}.{rng.randrange(1, 10)}"
        cases += [(f"{n}%", f"{n}%"), (dec, dec), (dec + "%", dec + "%")]
    cases += [(f"{n:,}{_suffix(n)}", f"{n}{_suffix(n)}") for n in range(10, 3000)]
    for h in range(1, 13):
        cases += [(f"{h}:{m:02d} {x}", f"{h}:{m:02d} {x}" if m else f"{h} {x}") for m in range(60) for x in ("a.m.", "p.m.")]
        cases += [(f"{h}:0{m}", f"{h}:0{m}") for m in range(1, 10)]
    return cases


def test_every_number_the_normalizer_reads_out_is_written_back():
    say = TextNormalizer()
    cases = _written_numbers()
    wrong = [(w, say(w), write_digits(say(w)), want) for w, want in cases if write_digits(say(w)) != want]
    assert len(cases) > 8000 and not wrong, wrong[:5]


@pytest.mark.parametrize("said, written", [
    ("in nineteen ninety it cost five dollars and fifty cents at ten oh five",
     "in 1990 it cost $5.50 at 10:05"),
    ("one of them and three pears but twenty one apples", "one of them and three pears but 21 apples"),  # below ten
    ("the third place and the twenty first and one tenth", "the third place and the 21st and one tenth"),
    ("two point five million dollars three billion dollars three million people five percent",
     "$2.5 million $3 billion 3 million people 5%"),
    ("the nineteen nineties and the eighteen hundreds", "the 1990s and the 1800s"),
    ("it is nine eleven at five twenty", "it is nine eleven at five twenty"),  # digits beside words would read as two
    ("two thousand and five and then a hundred people", "2005 and then a hundred people"),
    ("fifteen hundred dollars and nineteen ninety percent", "$1500 and 1990%"),
    ("at three o'clock or three p m or ten thirty a m", "at 3 o'clock or 3 p.m. or 10:30 a.m."),
])
def test_numbers_are_written_as_a_reader_expects(said, written):
    assert write_digits(said) == written


def test_a_numbers_timed_words_become_one_word_from_its_first_start_to_its_last_end():
    said = "it cost five dollars and fifty cents".split()
    words = [{"word": w, "start": i / 10, "end": i / 10 + 0.08, "confidence": 0.9 - i / 100} for i, w in enumerate(said)]
    out = write_word_digits(words)
    assert [w["word"] for w in out] == ["it", "cost", "$5.50"]
    assert out[2] == {"word": "$5.50", "start": words[2]["start"], "end": words[6]["end"],
                      "confidence": words[6]["confidence"]}  # the lowest of its words
    assert out[:2] == words[:2]


def test_english_and_text2nums_languages_write_digits_and_no_other():
    for language in ("en", "en_IN", *TEXT2NUM):
        check_written_digits(language)
    with pytest.raises(ValueError, match="spells numbers in 'ru'"):
        check_written_digits("ru")


def test_without_text2num_another_language_says_which_extra_writes_it():
    code = ("import sys; sys.modules['text_to_num'] = None\n"  # the import fails as where text2num is not installed
            "from speechscale.decoding.digits import check_written_digits\n"
            "check_written_digits('en')\n"
            "try:\n    check_written_digits('de')\nexcept ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "numbers in digits for a 'de' model need text2num: pip install 'speechscale[digits]'"


def _other_cases(language, rng):
    """(as written, as written back) in `language`: whole numbers, grouped from five digits, years, decimals with
    the language's mark, percentages."""
    group, spaced = TEXT2NUM[language]
    point = "," if language != "es" else "."  # num2words says "punto" in Spanish, which is written back "."
    cases = []
    for _ in range(300):
        v = rng.choice([rng.randrange(10, 100), rng.randrange(1100, 2100), rng.randrange(10 ** 4, 10 ** 7)])
        grouped = f"{v:,}".replace(",", group) if v >= 10_000 else str(v)
        cases.append((str(v), grouped))
        n, d = rng.randrange(0, 1000), rng.randrange(1, 10)
        cases.append((f"{n},{d}", f"{n}{point}{d}"))
        p = rng.randrange(10, 1000)
        cases.append((f"{p} %", f"{p} %" if spaced else f"{p}%"))
    return cases


@pytest.mark.parametrize("language, most_wrong", [("de", 0), ("fr", 2), ("es", 0), ("pt", 0), ("nl", 0), ("it", 25)])
def test_other_languages_numbers_are_written_back(language, most_wrong):
    """The round trip through the language's normalizer and text2num. Italian compounds that drop a vowel
    ("ottantotto", "trecentottantuno") text2num leaves as words; French "vingt et un virgule ..." loses its decimal."""
    say = TextNormalizer(None, digits_language=language)
    cases = _other_cases(language, random.Random(0))
    wrong = [(w, say(f"x {w} z"), want) for w, want in cases if write_digits(say(f"x {w} z"), language) != f"x {want} z"]
    assert len(wrong) <= most_wrong, wrong[:5]


@pytest.mark.parametrize("language, said, written", [
    ("de", "im jahr neunzehnhundertneunzig kostete es fünf euro und fünfzig cent am einundzwanzigsten mai",
     "im jahr 1990 kostete es 5 euro und 50 cent am 21. mai"),  # money keeps its words; a lone five before it too
    ("de", "eine million menschen und drei komma fünf prozent und eins zwei drei",
     "1.000.000 menschen und 3,5 % und eins zwei drei"),  # lone numbers below ten stay words
    ("de", "der erste und der zehnte", "der erste und der 10."),
    ("fr", "en mille neuf cent quatre vingt dix deux virgule cinq pour cent", "en 1990 2,5 %"),
    ("es", "sesenta y uno y veintiuno por ciento", "61 y 21 %"),  # "y" inside a number and beside it
    ("it", "tre virgola cinque per cento e duemilaventiquattro", "3,5% e 2024"),
    ("nl", "een miljoen tweehonderd procent", "1.000.200%"),
])
def test_other_languages_write_as_their_readers_expect(language, said, written):
    assert write_digits(said, language) == written
    words = [{"word": w, "start": i, "end": i + 0.5} for i, w in enumerate(said.split())]
    timed = write_word_digits(words, language)  # a number's words become one, from its first start to its last end
    assert " ".join(w["word"] for w in timed) == written
    assert all(w["end"] - w["start"] == 0.5 or w["word"][0].isdigit() for w in timed)
    assert sum(w["end"] - w["start"] - 0.5 for w in timed) == len(words) - len(timed)


def test_transcribe_digits_writes_what_the_model_says_in_digits(numbers_checkpoint, cli):
    ckpt, audio = str(numbers_checkpoint / "run" / "checkpoints" / "best.pt"), str(numbers_checkpoint / "s.wav")
    said = json.loads(cli("transcribe", "--checkpoint", ckpt, "--json", audio).stdout)
    assert said["text"] == "in nineteen ninety it cost five dollars and fifty cents on the twenty first", said["text"]
    written = json.loads(cli("transcribe", "--checkpoint", ckpt, "--json", "--digits", audio).stdout)
    assert written["text"] == "in 1990 it cost $5.50 on the 21st"
    assert [w["word"] for w in written["words"]] == written["text"].split()
    cost = [w for w in said["words"] if w["word"] in ("five", "cents")]
    money = written["words"][written["text"].split().index("$5.50")]
    assert (money["start"], money["end"]) == (cost[0]["start"], cost[1]["end"])
    srt = cli("transcribe", "--checkpoint", ckpt, "--format", "srt", "--digits", audio).stdout
    assert "in 1990 it cost $5.50" in srt
    wer = json.loads(cli("transcribe", "--checkpoint", ckpt, "--json", "--digits", "--manifest",
                         str(numbers_checkpoint / "manifest.jsonl"), audio).stdout)
    assert wer["wer"] == 0.0 and wer["text"] == written["text"]  # scored on the words as spoken


def test_the_api_writes_digits_and_refuses_them_for_another_language(numbers_checkpoint):
    import speechscale

    model = speechscale.load(numbers_checkpoint / "run" / "checkpoints" / "best.pt", device="cpu")
    assert model.transcribe(numbers_checkpoint / "s.wav", digits=True).text == "in 1990 it cost $5.50 on the 21st"
    model.components.normalizer.digits_language = "de"  # English words read as German: no number text2num knows
    said = "in nineteen ninety it cost five dollars and fifty cents on the twenty first"
    assert model.transcribe(numbers_checkpoint / "s.wav", digits=True).text == said
    model.components.normalizer.digits_language = "ru"
    with pytest.raises(ValueError, match="spells numbers in 'ru'"):
        model.transcribe(numbers_checkpoint / "s.wav", digits=True)
