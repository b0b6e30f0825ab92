import json

import numpy as np
import pytest
import soundfile as sf

from speechscale.data.manifest import ManifestError, read_manifest
from speechscale.data.text import CharTokenizer, TextNormalizer


@pytest.fixture
def corpus(tmp_path):
    sf.write(tmp_path / "a.wav", np.zeros(1600, np.float32), 16000)
    (tmp_path / "sub").mkdir()
    sf.write(tmp_path / "sub" / "b.wav", np.zeros(3200, np.float32), 16000)
    return tmp_path


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_valid_lines_resolve_relative_paths_and_keep_extra_keys(corpus):
    m = _write(corpus / "m.jsonl", [
        json.dumps({"audio_filepath": "a.wav", "duration": 0.1, "text": "Hello!", "speaker": "x"}),
        json.dumps({"audio_filepath": str(corpus / "sub" / "b.wav"), "duration": 0.2, "text": "world"}),
    ])
    utts, rep = read_manifest(m, normalize=TextNormalizer())
    assert [u.text for u in utts] == ["hello", "world"]
    assert utts[0].audio_path == str(corpus / "a.wav") and utts[0].extra == {"speaker": "x"}
    assert rep.skipped == 0 and rep.kept == 2


@pytest.mark.parametrize("line, reason", [
    ('{"audio_filepath": "a.wav", "duration": 0.1, "text": "ok"', "malformed JSON"),
    ('[1, 2]', "malformed JSON"),
    ('{"audio_filepath": "a.wav", "text": "ok"}', "missing key"),
    ('{"audio_filepath": "a.wav", "duration": "long", "text": "ok"}', "bad duration"),
    ('{"audio_filepath": "a.wav", "duration": 0.1, "text": ""}', "empty text"),
    ('{"audio_filepath": "a.wav", "duration": 0.1, "text": "   "}', "empty text"),
    ('{"audio_filepath": "a.wav", "duration": 0.1, "text": "?!"}', "empty text"),
    ('{"audio_filepath": "a.wav", "duration": 0.1, "text": "日本"}', "characters outside the vocabulary"),
    ('{"audio_filepath": "nope.wav", "duration": 0.1, "text": "ok"}', "missing audio"),
    ('{"audio_filepath": "a.wav", "duration": 99, "text": "ok"}', "duration out of range"),
])
def test_each_bad_line_is_skipped_counted_and_located(corpus, line, reason):
    good = json.dumps({"audio_filepath": "a.wav", "duration": 0.1, "text": "fine"})
    m = _write(corpus / "m.jsonl", [good, line, good])
    utts, rep = read_manifest(m, normalize=TextNormalizer(), oov=CharTokenizer().oov, max_duration=30)
    assert len(utts) == 2 and rep.skipped == 1 and rep.reasons[reason] == 1
    summary = rep.summary()
    assert "\n" not in summary and "line 2" in summary and reason in summary and "m.jsonl" in summary


def test_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(ManifestError, match="manifest not found"):
        read_manifest(tmp_path / "none.jsonl")
    (tmp_path / "corpus").mkdir()  # a folder was "not found", though it is there
    with pytest.raises(ManifestError, match=r"corpus: a folder, not a JSONL manifest$"):
        read_manifest(tmp_path / "corpus")
    (tmp_path / "corpus" / "train.jsonl").write_text("")
    with pytest.raises(ManifestError, match=r"corpus: a folder, not a JSONL manifest \(one of its files\? train.jsonl\)"):
        read_manifest(tmp_path / "corpus")


def test_filter_and_slices(corpus):
    lines = [json.dumps({"audio_filepath": "a.wav", "duration": 0.1, "text": f"w{i}".replace(str(i), "x" * (i + 1)),
                         "spk": "ab"[i % 2]}) for i in range(6)]
    m = _write(corpus / "m.jsonl", lines)
    assert [u.line for u in read_manifest(m, lines=[0, 2])[0]] == [1, 2]
    assert [u.line for u in read_manifest(m, lines=[4])[0]] == [5, 6]
    assert [u.line for u in read_manifest(m, filt={"spk": "b"})[0]] == [2, 4, 6]
    assert [u.line for u in read_manifest(m, filt={"spk": ["a", "b"]})[0]] == [1, 2, 3, 4, 5, 6]
    none, report = read_manifest(m, filt={"spk": "c"})  # a filter that keeps nothing says so, apart from skips
    assert none == [] and report.filtered == 6 and report.skipped == 0
    assert report.summary().endswith("0 utterances kept, 0 skipped, 6 left out by the filter")


def test_a_byte_order_mark_does_not_cost_the_first_line(corpus):
    """A manifest saved by a Windows editor or PowerShell starts with a UTF-8 BOM: its first utterance was skipped
    as malformed JSON."""
    line = json.dumps({"audio_filepath": "a.wav", "duration": 0.1, "text": "hello"})
    (corpus / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (line + "\n" + line + "\n").encode())
    utts, rep = read_manifest(corpus / "bom.jsonl")
    assert len(utts) == 2 and rep.skipped == 0


def test_a_line_that_is_not_utf8_is_skipped_not_read_with_its_accents_replaced(corpus):
    """A Latin-1 line was decoded with its accents as U+FFFD, which normalization then dropped: "café" trained as
    "caf". Such a line is skipped and counted; a UTF-16 file (NUL bytes) is one line before any work."""
    good = json.dumps({"audio_filepath": "a.wav", "duration": 0.1, "text": "fine"}).encode()
    latin = json.dumps({"audio_filepath": "a.wav", "duration": 0.1, "text": "café"}, ensure_ascii=False)
    (corpus / "m.jsonl").write_bytes(b"\n".join([good, latin.encode("latin-1"), latin.encode(), good]) + b"\n")
    utts, rep = read_manifest(corpus / "m.jsonl", normalize=TextNormalizer(alphabet="abcdefghijklmnopqrstuvwxyzé' "))
    assert [u.text for u in utts] == ["fine", "café", "fine"] and [u.line for u in utts] == [1, 3, 4]
    assert rep.reasons == {"not UTF-8": 1} and "line 2: not UTF-8" in rep.summary()
    assert [u.line for u in read_manifest(corpus / "m.jsonl", lines=[2])[0]] == [3, 4]  # the line keeps its place
    (corpus / "u16.jsonl").write_bytes((good.decode() + "\n").encode("utf-16"))
    with pytest.raises(ManifestError, match=r"u16.jsonl: not a UTF-8 JSONL manifest \(UTF-16\?\); convert it"):
        read_manifest(corpus / "u16.jsonl")
    (corpus / "u16le.jsonl").write_bytes((good.decode() + "\n").encode("utf-16-le"))  # no byte-order mark
    with pytest.raises(ManifestError, match=r"u16le.jsonl: not a UTF-8 JSONL manifest \(UTF-16\?\)"):
        read_manifest(corpus / "u16le.jsonl")
    with pytest.raises(ManifestError, match=r"a.wav: not a JSONL manifest: it holds NUL bytes \(an audio or other"):
        read_manifest(corpus / "a.wav")


def test_a_noise_list_that_is_not_utf8_text_is_one_line(tmp_path):
    from speechscale.config import ConfigError
    from speechscale.data.recorded import read_recordings

    (tmp_path / "noise.jsonl").write_bytes(bytes(range(1, 256)) * 4)
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_recordings(str(tmp_path / "noise.jsonl"), "noise_manifest")


def test_a_manifest_url_is_one_line_pointing_to_shards_and_a_file_url_is_read(tmp_path):
    from tests.conftest import shared

    with pytest.raises(ManifestError, match=r"^s3://bucket/m.jsonl: a JSONL manifest is read from a local file; "
                                            r".*data shard MANIFEST --out URL"):
        read_manifest("s3://bucket/m.jsonl")
    manifest = shared("ldc93s1", "manifest.jsonl")
    assert len(read_manifest(f"file://{manifest}")[0]) == len(read_manifest(manifest)[0]) > 0


def test_a_duration_no_recording_has_is_skipped_before_it_overflows_anything(tmp_path):
    """1e308 s passed as finite, then overflowed a histogram's bin (data stats) and would any sum; NaN, an
    infinity, a negative or over a million seconds is out of range."""
    from speechscale.data.stats import corpus_stats

    lines = [{"audio_filepath": "a.wav", "duration": d, "text": "x"} for d in (1e308, -1, 2e6, 3.5)]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"audio_filepath": "a.wav", "duration": NaN, '
                                                                    '"text": "x"}\n')
    utts, report = read_manifest(path, check_files=False)
    assert [u.duration for u in utts] == [3.5] and report.reasons == {"duration out of range": 4}
    stats = corpus_stats([str(path)])
    assert stats["utterances"] == 1 and stats["duration_s"]["max"] == 3.5
