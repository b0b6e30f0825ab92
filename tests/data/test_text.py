import pytest

from speechscale.data.text import BLANK, CharTokenizer, TextNormalizer


@pytest.mark.parametrize("raw, norm", [
    ("She had your dark suit in greasy wash water all year.", "she had your dark suit in greasy wash water all year"),
    ("And so, my fellow Americans: ask not!", "and so my fellow americans ask not"),
    ("I've got 21 apples", "i've got twenty one apples"),
    ("'quoted' don't", "quoted don't"),
    ("Café  NAÏVE\tre-entry", "cafe naive re entry"),
    ("It\u2019s", "it's"),
])
def test_normalizer(raw, norm):
    assert TextNormalizer()(raw) == norm


def test_digit_policies():
    assert TextNormalizer(digits="drop")("room 101 now") == "room now"
    assert TextNormalizer(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 ", digits="keep")("room 101") == "room 101"


def test_normalizer_keeps_out_of_alphabet_letters_for_validation():
    text = TextNormalizer()("Straße ß")
    assert CharTokenizer().oov(text) == {"ß"}


def test_tokenizer_round_trip_and_blank():
    tok = CharTokenizer()
    assert tok.vocab_size == 29 and BLANK == 0
    ids = tok.encode("hello world's")
    assert 0 not in ids and tok.decode(ids) == "hello world's"
    with pytest.raises(KeyError):
        tok.encode("é")
