import pytest

from speechscale.data.text import BLANK, CharTokenizer, TextNormalizer


@pytest.mark.parametrize("raw, norm", [
    ("She had your dark suit in greasy wash water all year.", "she had your dark suit in greasy wash water all year"),
    ("And so, my fellow Americans: ask not!", "and so my fellow americans ask not"),
    ("I've got 21 apples", "i've got twenty one apples"),
    ("'quoted' don't", "quoted don't"),
    ("Café  NAÏVE\tre-entry", "cafe naive re entry"),
    ("It\u2019s", "it's"),
    ("The 21st of May, 3rd place, the 1,000th day", "the twenty first of may third place the one thousandth day"),
    ("AT&T rose 5% & fell", "at and t rose five percent and fell"),
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


GERMAN = "abcdefghijklmnopqrstuvwxyzäöüß' "
RUSSIAN = "абвгдежзийклмнопрстуфхцчшщъыьэюя' "


def test_letters_the_alphabet_spells_keep_their_accents_and_others_fold():
    german = TextNormalizer(GERMAN, digits_language="de")
    assert german("Die STRASSE über 21 Brücken, café-Größe!") == "die strasse über einundzwanzig brücken cafe größe"
    assert german("50 % & mehr") == "fünfzig prozent und mehr"
    assert CharTokenizer(GERMAN).oov(german("Äpfel, Öl und Übermaß")) == set()
    russian = TextNormalizer(RUSSIAN, digits_language="ru")
    assert russian("Йод и ёж: 'привет' 3") == "йод и еж привет три"  # й is spelled; ё is not, so it folds to е
    assert TextNormalizer()("Йод") == "иод"  # the English alphabet spells neither: й folds, and is flagged later
    # composed or decomposed input is the same text
    assert german("u\u0308ber") == german("\u00fcber") == "über"


def test_an_importers_normalizer_keeps_every_letter_mark_and_digit():
    keep_all = TextNormalizer(alphabet=None, digits="keep")
    assert keep_all("Straße über Café, 21 zażółć!") == "straße über café 21 zażółć"
    assert keep_all("नमस्ते दुनिया") == "नमस्ते दुनिया"  # the vowel signs and virama are marks, kept
    assert keep_all("'Quoted' don't") == "quoted don't"


def test_the_normalizer_travels_with_its_language():
    norm = TextNormalizer(RUSSIAN, "spell", "ru")
    again = TextNormalizer(**norm.to_dict())
    assert again("12") == norm("12") == "двенадцать" and TextNormalizer()("12") == "twelve"


@pytest.mark.parametrize("override,said", [("text.alphabet=AbC ", "must be lower case"),
                                           ("text.alphabet=abu\u0308 ", "one composed character"),
                                           ("text.digits_language=xx", "not a language num2words spells")])
def test_a_text_config_that_cannot_match_the_normalized_text_is_one_line(capsys, override, said):
    from tests.conftest import main_cli

    code, _, err = main_cli(capsys, "train", "--config", "demo", "--print-config", "data.root=.", override)
    assert code == 2 and said in err and err.count("\n") == 1, err


def test_data_alphabet_suggests_the_alphabet_that_keeps_every_transcript(tmp_path, capsys):
    import json

    from speechscale.data.manifest import read_manifest
    from tests.conftest import main_cli

    manifest = tmp_path / "de.jsonl"
    texts = ["Über die Straße, 21 Größen!", "Café — naïve Brücke", "Die Straße über die Brücke"]
    manifest.write_text("".join(json.dumps({"audio_filepath": "a.wav", "duration": 1.0, "text": t}) + "\n"
                                for t in texts), encoding="utf-8")
    code, out, err = main_cli(capsys, "data", "alphabet", str(manifest), "--digits-language", "de")
    found = json.loads(out)
    assert code == 0 and found["utterances"] == 3 and found["rare"] == {}
    # recomputed: every character of the transcripts as the German run normalizes them (digits spelled in German)
    spelled = "".join(t.lower() for t in texts).replace("21", "einundzwanzig")
    letters = {c for c in spelled if c.isalpha()}
    assert found["alphabet"] == "".join(sorted(letters)) + " " and found["counts"]["ß"] == 3
    assert found["override"] == f'text.alphabet="{found["alphabet"]}"'
    german = TextNormalizer(found["alphabet"], "spell", "de")
    kept, report = read_manifest(manifest, normalize=german, oov=CharTokenizer(found["alphabet"]).oov,
                                 check_files=False)
    assert len(kept) == 3 and kept[0].text == "über die straße einundzwanzig größen"
    _, english = read_manifest(manifest, normalize=TextNormalizer(), oov=CharTokenizer().oov, check_files=False)
    assert english.kept == 1  # the two with ß: the English alphabet cannot spell it (ü only loses its accent)
    code, out, _ = main_cli(capsys, "data", "alphabet", str(manifest), "--min-count", "4", "--digits-language", "de")
    fewer = json.loads(out)
    assert code == 0 and fewer["rare"]["ß"] == 3 and "ß" not in fewer["alphabet"] and "ü" in fewer["alphabet"]
    assert fewer["rare"] == {c: n for c, n in found["counts"].items() if n < 4}
    (tmp_path / "notes.txt").write_text("über die straße\n")  # not a manifest: no alphabet of nothing
    code, _, err = main_cli(capsys, "data", "alphabet", str(tmp_path / "notes.txt"))
    assert code == 2 and "notes.txt: no transcript read" in err and "malformed JSON" in err, err


def test_an_alphabet_that_lost_its_space_says_so(tmp_path, capsys):
    """A shell override's YAML value drops a trailing space; every transcript then fails the alphabet, and the
    one-line error says why."""
    from tests.conftest import main_cli, shared

    code, _, err = main_cli(capsys, "train", "--config", "ldc93s1", f"data.root={shared('ldc93s1')}",
                            f"trainer.out_dir={tmp_path}", "text.alphabet=abcdefghijklmnopqrstuvwxyz' ")
    assert code == 2 and err.count("\n") == 1, err
    assert "no usable utterances" in err and "text.alphabet has no space" in err, err


def test_an_alphabet_of_capitals_spells_text_in_capitals():
    """deepspeech.pytorch's labels are capitals: text (its digits read out too) is normalized into them."""
    from speechscale.data.text import TextNormalizer

    caps = TextNormalizer("'ABCDEFGHIJKLMNOPQRSTUVWXYZ ")
    assert caps("She had 12 cafés, didn't she?") == "SHE HAD TWELVE CAFES DIDN'T SHE"
    assert TextNormalizer()("She had 12 cafés") == "she had twelve cafes"
