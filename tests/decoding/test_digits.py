"""Numbers written in digits (decoding/digits.py): the inverse of what the text normalizer reads out, checked by the
round trip over thousands of written numbers, on timed words, and through a model that learned to say them."""
import json
import random

import pytest

from speechscale.data.text import TextNormalizer
from speechscale.decoding.digits import check_written_digits, write_digits, write_word_digits


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


def test_only_english_models_write_digits():
    check_written_digits("en")
    with pytest.raises(ValueError, match="spells numbers in 'de'"):
        check_written_digits("de")


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
    model.components.normalizer.digits_language = "de"
    with pytest.raises(ValueError, match="English models"):
        model.transcribe(numbers_checkpoint / "s.wav", digits=True)
