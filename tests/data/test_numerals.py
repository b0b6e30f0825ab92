import pickle

import pytest

from speechscale.data.text import CharTokenizer, TextNormalizer

GERMAN = "abcdefghijklmnopqrstuvwxyzäöüß' "
RUSSIAN = "абвгдежзийклмнопрстуфхцчшщъыьэюя' "


@pytest.mark.parametrize("raw, said", [
    ("In 1990 we met", "in nineteen ninety we met"),
    ("born 1905, married 2005, retired 2024", "born nineteen oh five married two thousand and five retired twenty twenty four"),
    ("a 1500 page book", "a fifteen hundred page book"),
    ("room 1101", "room eleven oh one"),
    ("20,000 leagues, 1,990 votes", "twenty thousand leagues one thousand nine hundred and ninety votes"),
    ("the 1990s and the '80s, the 1800s, the 1960's", "the nineteen nineties and the eighties the eighteen hundreds "
                                                       "the nineteen sixties"),
    ("It costs $5.", "it costs five dollars"),
    ("$1 or $5.50 or $0.05", "one dollar or five dollars and fifty cents or five cents"),
    ("$1.5 a share, $2.5 million, $3 Billion",
     "one point five dollars a share two point five million dollars three billion dollars"),
    ("£20 and €1 and ¥500", "twenty pounds and one euro and five hundred yen"),
    ("$1,000", "one thousand dollars"),
    ("at 3:00, at 3:00 pm, at 10:05, 14:00, 10:30 a.m.",
     "at three o'clock at three pm at ten oh five fourteen hundred ten thirty a m"),
    ("pi is 3.14", "pi is three point one four"),
    ("version 1.2.3", "version one point two point three"),
])
def test_english_numbers_are_read_as_a_speaker_says_them(raw, said):
    assert TextNormalizer()(raw) == said


@pytest.mark.parametrize("raw, said", [
    ("1.000 Menschen", "eintausend menschen"),  # a point groups thousands
    ("3,5 Liter", "drei komma fünf liter"),  # a comma is the decimal mark
    ("1,5 Millionen", "eins komma fünf millionen"),
    ("im Jahr 1990", "im jahr neunzehnhundertneunzig"),
    ("5,50 € oder 3 € oder €2", "fünf euro und fünfzig cent oder drei euro oder zwei euro"),
    ("um 12.30 Uhr", "um zwölf dreißig uhr"),
])
def test_german_numbers_use_its_decimal_comma_and_come_in_its_lower_case_letters(raw, said):
    german = TextNormalizer(GERMAN, digits_language="de")
    assert german(raw) == said
    assert CharTokenizer(GERMAN).oov(german(raw)) == set()  # num2words' "Komma", "Million" would be flagged


def test_currency_follows_the_languages_plural_forms():
    russian = TextNormalizer(RUSSIAN, digits_language="ru")
    assert russian("1 ₽, 2 ₽, 5 ₽") == "один рубль два рубля пять рублей"
    assert russian("3,5 кг") == "три целых пять десятых кг"


@pytest.mark.parametrize("language, raw, said", [
    ("en", "it cost USD 5 or 5 EUR", "it cost five dollars or five euro"),  # an ISO code before or after
    ("en", "CAD 20 and 2.50 usd", "twenty dollars and two dollars and fifty cents"),
    ("en", "3 CHF", "three chf"),  # no English words for it in num2words: the amount, and the code kept
    ("en", "a usdx 5 and 5 usdollars", "a usdx five and five usdollars"),  # a code only as a word of its own
    ("de", "5 USD und 3,50 EUR", "fünf dollar und drei euro und fünfzig cent"),
    ("pl", "5 zł i 2 zł", "pięć złotych i dwa złote"),  # a currency's own sign, in the language's plural forms
])
def test_currency_codes_and_signs_are_read_with_their_amount(language, raw, said):
    assert TextNormalizer(None, digits_language=language)(raw) == said


@pytest.mark.parametrize("language, raw, said", [
    ("it", "3,5 litri", "tre virgola cinque litri"),  # num2words drops an Italian Decimal's fraction
    ("it", "682,6", "seicentottantadue virgola sei"),
    ("cy", "3.5", "tri pwynt pump"),  # ... and a Welsh one's
    ("it", "12", "dodici"),
])
def test_a_decimal_keeps_its_fraction_in_every_language(language, raw, said):
    assert TextNormalizer(None, digits_language=language)(raw) == said


@pytest.mark.parametrize("language, raw, said", [
    ("fr", "le 1er mai", "le premier mai"),  # these were read "un er", "deux e": a training target no one says
    ("fr", "la 1re fois, la 1ère classe", "la première fois la première classe"),
    ("fr", "la 2e place, le 3ème jour, le 4ieme", "la deuxième place le troisième jour le quatrième"),
    ("fr", "le 21e siècle, la 2nde guerre, le 2nd", "le vingt et unième siècle la seconde guerre le second"),
    ("fr", "3 euros", "trois euros"),
    ("es", "el 1º de mayo, la 2ª vez", "el primero de mayo la segunda vez"),
    ("es", "el 3.º piso, la 21.ª edición", "el tercero piso la vigésima primera edición"),
    ("es", "el 1o y la 2a", "el primero y la segunda"),  # º and ª as an alphabet without them folds them
    ("it", "il 1º posto, la 2ª volta", "il primo posto la seconda volta"),
    ("pt", "o 1º lugar, a 21ª vez", "o primeiro lugar a vigésima primeira vez"),
    ("es", "de 3 a 5", "de tres a cinco"),  # a spaced letter is no suffix
    ("de", "Am 3. Mai 2020", "am dritten mai zweitausendzwanzig"),  # German dates: the article picks the ending
    ("de", "vom 21. bis 23. Juni, der 1. Januar", "vom einundzwanzigsten bis dreiundzwanzigsten juni der erste januar"),
    ("de", "Montag, 3. März", "montag dritter märz"),
    ("de", "Seite 3. Dann 12. Juni.", "seite drei dann zwölfter juni"),  # a point before no month ends a sentence
    ("de", "Der 2. Weltkrieg, im 3. Stock, zum 5. Mal, die 1. Klasse, ins 21. Jahrhundert",
     "der zweite weltkrieg im dritten stock zum fünften mal die erste klasse ins einundzwanzigste jahrhundert"),
    ("de", "Er kam als 2. ins Ziel, Platz 3. Dann", "er kam als zwei ins ziel platz drei dann"),  # no article: a number
])
def test_ordinals_with_their_suffixes_are_read_in_french_spanish_italian_and_portuguese(language, raw, said):
    assert TextNormalizer(None, digits_language=language)(raw) == said


def test_the_reader_travels_to_loader_workers_and_drop_mode_drops_money_too():
    norm = pickle.loads(pickle.dumps(TextNormalizer(GERMAN, digits_language="de")))
    assert norm("1.000,50 €") == "eintausend euro und fünfzig cent"
    assert TextNormalizer(digits="drop")("it cost $5.50 in 1990") == "it cost in"
