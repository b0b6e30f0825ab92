"""Corpus importers on tiny trees in each corpus's real layout, built from real recordings."""
import csv
import io
import json
import os
import shutil

import numpy as np
import pytest
import soundfile as sf

from speechscale.data.importers import CorpusLayoutError, import_corpus
from speechscale.data.manifest import ManifestError, read_manifest
from tests.conftest import main_cli, shared


def _digit(n, speaker="jackson", index=7):
    """A real FSDD recording: (samples, 8000)."""
    return sf.read(shared("fsdd") / "recordings" / f"{n}_{speaker}_{index}.wav", dtype="float32")


def _rows(out):
    return [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]


def _check_readable(out):
    """The manifest loads with the trainer's reader, and every duration is the file's."""
    utts, report = read_manifest(out / "manifest.jsonl")
    for u in utts:
        assert u.duration == pytest.approx(sf.info(u.audio_path).duration, abs=1e-3)
    return utts


def test_fsdd_import_matches_the_shared_manifest(tmp_path):
    report = import_corpus("fsdd", shared("fsdd"), tmp_path / "out")
    rows = _rows(tmp_path / "out")
    ref = {json.loads(x)["audio_filepath"].split("/")[-1]: json.loads(x)
           for x in (shared("fsdd") / "manifest.jsonl").read_text().splitlines()}
    assert report.kept == len(rows) == len(ref) and report.skipped == 0
    for r in rows[:50]:
        want = ref[r["audio_filepath"].split("/")[-1]]
        assert (r["text"], r["speaker"], r["split"]) == (want["text"], want["speaker"], want["split"])
        assert r["duration"] == pytest.approx(want["duration"], abs=1e-3)


def test_librispeech_layout_with_flac_a_missing_file_and_duration_bounds(tmp_path):
    chapter = tmp_path / "LibriSpeech" / "dev-clean" / "84" / "121123"
    chapter.mkdir(parents=True)
    lines = []
    for i, n in enumerate([3, 5, 8]):
        wav, sr = _digit(n)
        if i < 2:  # the third is listed but missing
            sf.write(chapter / f"84-121123-{i:04d}.flac", wav, sr)
        lines.append(f"84-121123-{i:04d} {['THREE', 'FIVE', 'EIGHT'][i]}")
    (chapter / "84-121123.trans.txt").write_text("\n".join(lines) + "\n")
    report = import_corpus("librispeech", tmp_path / "LibriSpeech" / "dev-clean", tmp_path / "out")
    rows = _rows(tmp_path / "out")
    assert [r["text"] for r in rows] == ["three", "five"] and rows[0]["speaker"] == "84"
    assert report.reasons["audio file missing"] == 1
    _check_readable(tmp_path / "out")
    with pytest.raises(ManifestError, match="no utterance imported .*2 duration out of bounds"):  # no empty manifest
        import_corpus("librispeech", tmp_path / "LibriSpeech" / "dev-clean", tmp_path / "b", max_duration=0.01)
    assert not (tmp_path / "b" / "manifest.jsonl").exists()
    with pytest.raises(CorpusLayoutError, match="nothing in librispeech's layout here"):  # a folder of anything else
        import_corpus("librispeech", tmp_path / "LibriSpeech" / "dev-clean" / "84" / "121123" / "84-121123.trans.txt",
                      tmp_path / "c")


def test_commonvoice_tsv_and_mls_layouts(tmp_path):
    cv = tmp_path / "cv" / "en"
    (cv / "clips").mkdir(parents=True)
    wav, sr = _digit(1)
    sf.write(cv / "clips" / "common_voice_en_1.ogg", wav, sr, format="OGG", subtype="VORBIS")
    with (cv / "validated.tsv").open("w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["client_id", "path", "sentence", "up_votes"])
        w.writerow(["abc", "common_voice_en_1.ogg", "One, said Ann!", "2"])
    import_corpus("commonvoice", cv, tmp_path / "cvout")
    assert [(r["text"], r["speaker"]) for r in _rows(tmp_path / "cvout")] == [("one said ann", "abc")]
    _check_readable(tmp_path / "cvout")

    mls = tmp_path / "mls" / "train"
    (mls / "audio" / "10" / "20").mkdir(parents=True)
    wav, sr = _digit(2)
    sf.write(mls / "audio" / "10" / "20" / "10_20_000001.flac", wav, sr)
    (mls / "transcripts.txt").write_text("10_20_000001\ttwo\n")
    import_corpus("mls", tmp_path / "mls", tmp_path / "mlsout", split="train")
    assert [(r["text"], r["speaker"]) for r in _rows(tmp_path / "mlsout")] == [("two", "10")]
    # another language's transcript keeps its letters and digits: the model's alphabet decides when it trains
    (mls / "transcripts.txt").write_text("10_20_000001\tÜber 2 Brücken, zażółć!\n")
    import_corpus("mls", tmp_path / "mls", tmp_path / "mls-de", split="train")
    assert [r["text"] for r in _rows(tmp_path / "mls-de")] == ["über 2 brücken zażółć"]
    with pytest.raises(CorpusLayoutError, match="transcripts.txt"):
        import_corpus("mls", tmp_path / "mls", tmp_path / "x")


def test_tedlium_segments_are_lines_with_offsets_into_the_talk(tmp_path):
    """Each STM segment is a manifest line naming the talk and its offset: nothing is copied, and the trainer's
    reader gets the segment's samples; a segment whose end the STM times a little past the talk's is kept to the
    end, one that starts past it is skipped and counted."""
    root = tmp_path / "TEDLIUM" / "test"
    (root / "sph").mkdir(parents=True)
    (root / "stm").mkdir()
    parts = [_digit(n)[0] for n in (4, 6)]
    talk = np.concatenate([parts[0], np.zeros(4000, np.float32), parts[1]])  # 8 kHz: 0.5 s of silence between
    sf.write(root / "sph" / "Talk_2010.sph", talk, 8000, format="NIST", subtype="PCM_16")
    a, b, end = len(parts[0]) / 8000, (len(parts[0]) + 4000) / 8000, len(talk) / 8000
    (root / "stm" / "Talk_2010.stm").write_text(
        f"Talk_2010 1 Talk_2010 0.00 {a:.2f} <o,f0,male> four\n"
        f"Talk_2010 1 inter_segment_gap {a:.2f} {b:.2f} <o,,unknown> ignore_time_segment_in_scoring\n"
        f"Talk_2010 1 Talk_2010 {b:.2f} {end + 0.05:.2f} <o,f0,male> six {{NOISE}}\n"
        f"Talk_2010 1 Talk_2010 {end + 0.5:.2f} {end + 1:.2f} <o,f0,male> seven\n")
    report = import_corpus("tedlium", tmp_path / "TEDLIUM", tmp_path / "out", split="test")
    assert report.kept == 2 and report.reasons == {"segment past the recording's end": 1}
    rows = _rows(tmp_path / "out")
    assert [r["text"] for r in rows] == ["four", "six"] and [r["talk"] for r in rows] == ["Talk_2010"] * 2
    assert [r["offset"] for r in rows] == [0.0, float(f"{b:.2f}")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["manifest.jsonl"]  # no audio copied
    utts, _ = read_manifest(tmp_path / "out" / "manifest.jsonl")
    assert all(os.path.samefile(u.audio_path, root / "sph" / "Talk_2010.sph") for u in utts)
    assert utts[1].duration == pytest.approx(end - float(f"{b:.2f}"), abs=1e-3)  # kept to the talk's end
    for u, first, last in ((utts[0], 0, float(f"{a:.2f}")), (utts[1], float(f"{b:.2f}"), end)):
        got, first = u.load(8000), round(first * 8000)
        assert abs(len(got) - (round(last * 8000) - first)) <= 8000 * 1e-3  # durations are written in ms
        np.testing.assert_allclose(got, talk[first:first + len(got)], atol=1 / 32768)


def test_csv_import_and_the_cli(tmp_path, capsys):
    wav, sr = _digit(9)
    sf.write(tmp_path / "a.wav", wav, sr)
    (tmp_path / "list.csv").write_text("wav_filename,transcript\na.wav,Nine\nmissing.wav,ten\n")
    code, out, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / "list.csv"), "--out",
                              str(tmp_path / "out"))
    assert code == 0 and json.loads(out)["kept"] == 1 and json.loads(out)["skipped"] == {"audio file missing": 1}
    assert "1 utterances kept, 1 skipped" in err
    (tmp_path / "bad.csv").write_text("name,words\na.wav,nine\n")
    code, out, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "o"))
    assert code != 0 and "needs an audio column" in err and len(err.strip().splitlines()) == 1


def test_csv_import_reads_tsv_semicolons_other_column_names_and_no_header(tmp_path, capsys):
    """Only comma-separated files with a header of a few exact names imported: a TSV, a semicolon CSV (a European
    spreadsheet's), "audio"/"Transcription" columns, or rows of audio, text without a header were one error line."""
    from speechscale.data.manifest import read_manifest

    wav, sr = _digit(9)
    sf.write(tmp_path / "a.wav", wav, sr)
    sf.write(tmp_path / "b.wav", wav, sr)
    tables = {"tabs.tsv": "audio\tsentence\tclient_id\na.wav\tNine\tu1\nb.wav\tnine\tu2\n",
              "semi.csv": "Path;Transcription;Speaker\na.wav;Nine;u1\nb.wav;nine;u2\n",
              "bars.csv": "file|text|speaker\na.wav|Nine|u1\nb.wav|nine|u2\n",
              "plain.csv": "a.wav,\"Nine, said twice\"\nb.wav,nine\n"}
    for name, table in tables.items():
        (tmp_path / name).write_text(table)
        code, out, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / name), "--out", str(tmp_path / name[:4]))
        assert code == 0 and json.loads(out)["kept"] == 2, (name, err)
        utts, _ = read_manifest(tmp_path / name[:4] / "manifest.jsonl")
        assert [os.path.basename(u.audio_path) for u in utts] == ["a.wav", "b.wav"], name
        assert utts[1].text == "nine" and utts[0].text == ("nine said twice" if name == "plain.csv" else "nine")
        speakers = [u.extra.get("client_id", u.extra.get("speaker")) for u in utts]
        assert speakers == ([None, None] if name == "plain.csv" else ["u1", "u2"]), name
    (tmp_path / "words.csv").write_text("recording,words\na.wav,nine\n")  # neither a known header nor a file first
    code, _, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / "words.csv"), "--out", str(tmp_path / "w"))
    assert code != 0 and "or no header and audio, text in each row; it has recording, words" in err


def test_csv_import_tells_the_separator_from_many_rows_lowers_column_names_and_keeps_absolute_paths(tmp_path,
                                                                                                    capsys):
    """A headerless TSV whose first transcript holds commas was read as comma-separated (one line sniffed); a
    `Speaker` column stayed `Speaker`, so `data split --by speaker` found no field; an absolute audio path became
    ../../.. relative to the output, which broke when the manifest moved."""
    from speechscale.data.manifest import read_manifest

    wav, sr = _digit(9)
    for name in ("a.wav", "b.wav", "c.wav"):
        sf.write(tmp_path / name, wav, sr)
    (tmp_path / "rows.tsv").write_text("a.wav\tNine, nine, nine, nine\nb.wav\tnine\nc.wav\tnine nine\n")
    (tmp_path / "rows.txt").write_text("a.wav\tNine, nine, nine, nine\nb.wav\tnine\nc.wav\tnine nine\n")
    for name in ("rows.tsv", "rows.txt"):  # by its extension, and by its rows without one
        code, out, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / name), "--out", str(tmp_path / name[-3:]))
        assert code == 0 and json.loads(out)["kept"] == 3, (name, err)
        utts, _ = read_manifest(tmp_path / name[-3:] / "manifest.jsonl")
        assert [u.text for u in utts] == ["nine nine nine nine", "nine", "nine nine"], name
    (tmp_path / "abs.csv").write_text(f"Path,Text,Speaker\n{tmp_path / 'a.wav'},nine,Ann\nb.wav,nine,Bob\n")
    out_dir = tmp_path / "deep" / "er" / "out"
    code, out, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / "abs.csv"), "--out", str(out_dir))
    assert code == 0, err
    lines = [json.loads(x) for x in (out_dir / "manifest.jsonl").read_text().splitlines()]
    assert lines[0]["audio_filepath"] == str(tmp_path / "a.wav") and not os.path.isabs(lines[1]["audio_filepath"])
    assert [x.get("speaker") for x in lines] == ["Ann", "Bob"] and not any("Speaker" in x for x in lines)
    code, out, err = main_cli(capsys, "data", "split", str(out_dir / "manifest.jsonl"), "--out", str(tmp_path / "s"),
                              "--by", "speaker", "--dev", "0.5", "--test", "0")
    assert code == 0, err


def test_a_csv_with_a_byte_order_mark_imports_and_one_not_in_utf8_or_binary_is_one_line(tmp_path, capsys):
    """Excel writes a UTF-8 CSV with a byte-order mark; an old export may be Latin-1; a checkpoint given by
    mistake is binary."""
    wav, sr = _digit(9)
    sf.write(tmp_path / "a.wav", wav, sr)
    (tmp_path / "bom.csv").write_bytes("\ufeffpath,text\na.wav,Neun café\n".encode("utf-8"))
    code, out, _ = main_cli(capsys, "data", "import", "csv", str(tmp_path / "bom.csv"), "--out", str(tmp_path / "o"))
    assert code == 0 and [r["text"] for r in _rows(tmp_path / "o")] == ["neun café"]
    (tmp_path / "latin1.csv").write_bytes("path,text\na.wav,Neun café\n".encode("latin-1"))
    (tmp_path / "binary.csv").write_bytes(b"PK\x03\x04\x00\x00" + bytes(range(256)))
    for name, said in [("latin1.csv", "latin1.csv: not UTF-8 text (line 2); convert it, e.g. iconv -f latin1"),
                       ("binary.csv", "binary.csv: not a text file (it holds NUL bytes)")]:
        code, _, err = main_cli(capsys, "data", "import", "csv", str(tmp_path / name), "--out", str(tmp_path / "x"))
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err


def test_csv_import_reads_the_length_of_compressed_containers(tmp_path, capsys):
    from speechscale.data.audio import load_audio
    from tests.media import encode

    wav, sr = _digit(9)
    for suffix in ("m4a", "webm"):
        encode(wav, sr, tmp_path / f"a.{suffix}")
    (tmp_path / "list.csv").write_text("wav_filename,transcript\na.m4a,Nine\na.webm,nine\n")
    code, out, _ = main_cli(capsys, "data", "import", "csv", str(tmp_path / "list.csv"), "--out", str(tmp_path / "out"))
    assert code == 0 and json.loads(out)["kept"] == 2
    utts, _ = read_manifest(tmp_path / "out" / "manifest.jsonl")
    for u in utts:  # the manifest's duration is what the trainer's reader decodes
        assert u.duration == pytest.approx(len(load_audio(u.audio_path, 8000)) / 8000, abs=2e-3)
        assert abs(u.duration - len(wav) / sr) < 0.1


def test_malformed_lines_in_each_layout_are_skipped_and_counted_not_a_traceback(tmp_path):
    """A short CSV or TSV row, an MLS id that is not SPEAKER_BOOK_SEGMENT, an STM line without times (or with
    END before START), a talk soundfile cannot read: each raised mid-import; now each is one counted skip."""
    wav, sr = _digit(3)
    sf.write(tmp_path / "a.wav", wav, sr)
    (tmp_path / "list.csv").write_text("path,text\na.wav,three\nb.wav\n")
    assert import_corpus("csv", tmp_path / "list.csv", tmp_path / "csv").reasons == {"a row without path or text": 1}

    cv = tmp_path / "cv"
    (cv / "clips").mkdir(parents=True)
    sf.write(cv / "clips" / "x.wav", wav, sr)
    (cv / "validated.tsv").write_text("client_id\tpath\tsentence\nabc\tx.wav\tthree\nabc\ty.wav\n")
    assert import_corpus("commonvoice", cv, tmp_path / "cvout").reasons == {"a row without path or sentence": 1}
    (cv / "validated.tsv").write_text("client_id\tsentence\nabc\tthree\n")
    with pytest.raises(CorpusLayoutError, match="needs the columns path and sentence; it has client_id, sentence"):
        import_corpus("commonvoice", cv, tmp_path / "cv2")

    mls = tmp_path / "mls"
    (mls / "audio" / "1" / "2").mkdir(parents=True)
    sf.write(mls / "audio" / "1" / "2" / "1_2_3.wav", wav, sr)
    (mls / "transcripts.txt").write_text("1_2_3\tthree\nbadid\tfour\n")
    report = import_corpus("mls", mls, tmp_path / "mlsout")
    assert report.kept == 1 and report.reasons == {"an id that is not SPEAKER_BOOK_SEGMENT": 1}

    ted = tmp_path / "ted"
    (ted / "sph").mkdir(parents=True)
    (ted / "stm").mkdir()
    sf.write(ted / "sph" / "good.sph", wav, sr, format="NIST", subtype="PCM_16")
    (ted / "sph" / "torn.sph").write_bytes(b"NIST_1A\n   1024\n" + bytes(range(256)))
    (ted / "stm" / "good.stm").write_text(f"good 1 s 0.00 {len(wav) / sr:.2f} <o> three\ngood 1 s x 1.0 <o> four\n"
                                          "good 1 s 0.50 0.20 <o> five\n")
    (ted / "stm" / "torn.stm").write_text("torn 1 s 0.00 0.50 <o> six\n")
    report = import_corpus("tedlium", ted, tmp_path / "tedout")
    assert report.kept == 1 and report.reasons == {"no segment times START < END": 2, "unreadable audio": 1}
    assert [r["text"] for r in _rows(tmp_path / "tedout")] == ["three"]


def _hf_parquet(path, rows, text_column="sentence"):
    """A parquet file as Hugging Face datasets writes an Audio column: {bytes, path} structs, beside the text and
    other columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    audio = pa.array([{"bytes": b, "path": p} for b, p, _, _ in rows],
                     type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    table = pa.table({"id": [f"u{i}" for i in range(len(rows))], "audio": audio,
                      text_column: [t for _, _, t, _ in rows], "speaker_id": [s for _, _, _, s in rows],
                      "embedding": [[0.5, 1.5]] * len(rows)})
    pq.write_table(table, path, row_group_size=2)


def test_hugging_face_parquet_files_become_audio_files_and_a_manifest(tmp_path, capsys):
    fsdd = shared("fsdd", "recordings")
    wavs = sorted(fsdd.glob("*_nicolas_0.wav"))[:4]
    flac = io.BytesIO()
    data, rate = sf.read(wavs[3], dtype="int16")
    sf.write(flac, data, rate, format="FLAC")
    rows = [(wavs[0].read_bytes(), wavs[0].name, "Zero!", 7), (wavs[1].read_bytes(), None, "one", 7),
            (None, "gone.wav", "two", 8), (wavs[2].read_bytes(), "x.wav", None, 8),
            (b"not audio at all", "bad.wav", "four", 8), (flac.getvalue(), "", "three", 9)]
    _hf_parquet(tmp_path / "hf" / "data" / "train-00000-of-00001.parquet", rows)
    _hf_parquet(tmp_path / "hf" / "data" / "test-00000-of-00001.parquet", rows[:1], text_column="text")
    report = import_corpus("parquet", tmp_path / "hf", tmp_path / "out", split="train")
    assert report.kept == 3 and report.reasons == {"no audio bytes": 1, "no transcript": 1, "unreadable audio": 1}
    utts, _ = read_manifest(tmp_path / "out" / "manifest.jsonl")
    assert [u.raw_text for u in utts] == ["zero", "one", "three"]
    assert [u.extra["speaker_id"] for u in utts] == [7, 7, 9] and utts[0].extra["id"] == "u0"
    assert "embedding" not in utts[0].extra  # a list column is no manifest field
    names = [os.path.basename(u.audio_path) for u in utts]
    assert names == ["000000.wav", "000001.wav", "000005.flac"]  # the format's extension when the path has none
    for u, wav in zip(utts, [wavs[0], wavs[1], wavs[3]]):
        got, _ = sf.read(u.audio_path, dtype="int16")
        np.testing.assert_array_equal(got, sf.read(wav, dtype="int16")[0])
        assert u.duration == pytest.approx(sf.info(wav).duration, abs=1e-3)
    code, out, err = main_cli(capsys, "data", "import", "parquet", str(tmp_path / "hf"), "--out", str(tmp_path / "all"))
    assert code == 0, err
    assert len(read_manifest(tmp_path / "all" / "manifest.jsonl")[0]) == 4  # both splits, test's "text" column


def test_parquet_rows_naming_files_beside_them_use_those_files_inside_the_corpus_only(tmp_path):
    wav = shared("fsdd", "recordings", "0_jackson_0.wav")
    (tmp_path / "hf" / "clips").mkdir(parents=True)
    shutil.copy(wav, tmp_path / "hf" / "clips" / "a.wav")
    shutil.copy(wav, tmp_path / "outside.wav")
    _hf_parquet(tmp_path / "hf" / "t.parquet", [(None, "clips/a.wav", "zero", 1), (None, "../outside.wav", "zero", 2),
                                               (None, "clips/none.wav", "zero", 3)])
    report = import_corpus("parquet", tmp_path / "hf", tmp_path / "out")
    assert report.kept == 1 and report.reasons == {"no audio bytes": 2}
    utts, _ = read_manifest(tmp_path / "out" / "manifest.jsonl")
    assert os.path.samefile(utts[0].audio_path, tmp_path / "hf" / "clips" / "a.wav")
    assert import_corpus("parquet", tmp_path / "hf" / "t.parquet", tmp_path / "one").kept == 1  # one file given


def test_parquet_without_the_columns_or_not_parquet_is_one_line(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"path": ["a.wav"], "sentence": ["hi"]}), tmp_path / "p" / "a.parquet")
    code, _, err = main_cli(capsys, "data", "import", "parquet", str(tmp_path / "p"), "--out", str(tmp_path / "o"))
    assert code == 2 and "needs an audio column of {bytes, path} structs" in err and "it has path, sentence" in err
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "b.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ManifestError, match="no utterance imported .*unreadable parquet"):
        import_corpus("parquet", tmp_path / "q", tmp_path / "o2")
    with pytest.raises(CorpusLayoutError, match=r"nothing in parquet's layout here \(\*.parquet files"):
        import_corpus("parquet", tmp_path / "q", tmp_path / "o3", split="train")


def test_a_kaldi_data_folder_with_paths_commands_channels_and_bad_entries(tmp_path):
    """wav.scp as Kaldi recipes write it: paths relative to the recipe's folder, decoding commands (parsed, never
    run) that may pick a channel of a two-channel telephone file, and entries that cannot be used."""
    recipe = tmp_path / "s5"
    data = recipe / "data" / "train"
    data.mkdir(parents=True)
    fsdd = shared("fsdd", "recordings")
    a, b = fsdd / "0_jackson_0.wav", fsdd / "1_jackson_0.wav"
    shutil.copy(a, recipe / "a.wav")
    left, _ = sf.read(a, dtype="int16")
    right, _ = sf.read(b, dtype="int16")
    n = min(len(left), len(right))
    sf.write(recipe / "call.sph", np.stack([left[:n], right[:n]], axis=1), 8000, format="NIST", subtype="PCM_16")
    sf.write(recipe / "b.flac", right, 8000)
    sf.write(recipe / "mono.sph", left, 8000, format="NIST", subtype="PCM_16")
    (data / "wav.scp").write_text(
        "u1 a.wav\n"
        "u2 flac -c -d -s b.flac |\n"
        "u3-A sph2pipe -f wav -p -c 1 call.sph |\n"
        "u3-B /usr/bin/sph2pipe -f wav -p -c 2 call.sph |\n"
        "u4 sox b.flac -t wav - remix 1 |\n"
        "u5 raw_feats.ark:1234\n"
        "u6 curl -s http://example.com/x.wav |\n"
        "u7 sox b.flac -t wav - trim 0 1 |\n"
        "u9 sph2pipe -f wav -p -c 1 mono.sph |\n")
    (data / "text").write_text("u1 ZERO [noise] <unk>\nu2 one\nu3-A zero\nu3-B one\nu4 one\nu5 x\nu6 y\nu7 z\n"
                               "u8 not in wav.scp\nu9 zero\n")
    (data / "utt2spk").write_text("u1 jackson\nu3-A caller\nu3-B callee\n")
    report = import_corpus("kaldi", recipe / "data", tmp_path / "out", split="train")
    assert report.kept == 6 and report.reasons == {
        "a Kaldi archive offset (ark:), not an audio file": 1, "a command speechscale does not run (curl)": 1,
        "sox trim: an effect that changes the audio's timing": 1, "recording not in wav.scp": 1}
    utts, _ = read_manifest(tmp_path / "out" / "manifest.jsonl")
    by_id = {u.extra["id"]: u for u in utts}
    assert [u.raw_text for u in utts] == ["zero", "one", "zero", "one", "one", "zero"]  # u1's [noise] <unk>: no words
    assert os.path.samefile(by_id["u9"].audio_path, recipe / "mono.sph")  # channel 1 of a mono file: the file
    assert by_id["u1"].extra["speaker"] == "jackson" and "speaker" not in by_id["u2"].extra
    assert os.path.samefile(by_id["u1"].audio_path, recipe / "a.wav")  # found from the recipe's folder
    assert os.path.samefile(by_id["u2"].audio_path, recipe / "b.flac")  # flac -d decodes it: the file itself
    for uid, want in (("u3-A", left[:n]), ("u3-B", right[:n]), ("u4", right)):  # channels cut into OUT/audio
        got, rate = sf.read(by_id[uid].audio_path, dtype="int16")
        assert rate == 8000 and got.ndim == 1
        np.testing.assert_array_equal(got, want)


def test_kaldi_segments_are_offsets_into_their_recordings_and_cut_from_containers(tmp_path, monkeypatch):
    """A segment of a recording soundfile reads is a line with an offset (nothing copied); one of a container read
    only from its start (m4a) is cut into OUT/audio/, so training does not decode the whole recording per segment,
    and the import decodes that recording once for all its segments."""
    import speechscale.data.audio as audio_module
    from speechscale.data.audio import read_audio
    from tests.media import encode

    data = tmp_path / "dev"
    data.mkdir()
    jfk = shared("jfk", "jfk.flac")
    whole, rate = sf.read(jfk, dtype="float32")  # (T, 2)
    mono = whole.mean(axis=1)
    encode(mono[:5 * rate], rate, tmp_path / "talk.m4a")
    (data / "wav.scp").write_text(f"talk {jfk}\nphone {tmp_path / 'talk.m4a'}\n")
    (data / "segments").write_text("s1 talk 0.5 2.25\ns2 talk 3.0 4.0\ns3 talk 4.0 3.0\ns4 other 0 1\n"
                                   "s6 phone 1.0 2.5\ns7 phone 6.0 7.0\ns8 phone 3.0 4.5\n")
    (data / "text").write_text("s1 and so\ns2 my fellow\ns3 backwards\ns4 elsewhere\ns5 unsegmented\n"
                               "s6 and so my\ns7 past its end\ns8 fellow americans\n")
    decodes: list[str] = []  # every whole decode of a file soundfile does not read (the real decoder, counted)
    real_read = audio_module._read
    monkeypatch.setattr(audio_module, "_read", lambda path, *a: decodes.append(path) or real_read(path, *a))
    report = import_corpus("kaldi", data, tmp_path / "out")
    monkeypatch.undo()
    assert decodes == [str(tmp_path / "talk.m4a")]  # s6's and s8's cuts share one decode
    assert report.kept == 4 and report.reasons == {"no segment REC START END": 2, "recording not in wav.scp": 1,
                                                   "segment past the recording's end": 1}
    utts, _ = read_manifest(tmp_path / "out" / "manifest.jsonl")
    for u, (start, end) in zip(utts, [(0.5, 2.25), (3.0, 4.0)]):
        assert os.path.samefile(u.audio_path, jfk) and u.offset == start
        assert u.duration == pytest.approx(end - start, abs=1e-3)
        np.testing.assert_allclose(u.load(rate), mono[int(start * rate):int(end * rate)], atol=1e-6)
    assert sorted(p.name for p in (tmp_path / "out" / "audio").iterdir()) == ["s6.wav", "s8.wav"]
    decoded, m4a_rate = read_audio(tmp_path / "talk.m4a")  # (T, 1): the container's own samples
    for cut, name, start in [(utts[2], "s6.wav", 1.0), (utts[3], "s8.wav", 3.0)]:
        assert cut.offset is None and os.path.samefile(cut.audio_path, tmp_path / "out" / "audio" / name)
        assert cut.duration == pytest.approx(1.5, abs=1e-3)
        got, got_rate = sf.read(cut.audio_path, dtype="float32", always_2d=True)
        assert got_rate == m4a_rate
        first = int(start * m4a_rate)
        np.testing.assert_allclose(got, decoded[first:first + len(got)], atol=1 / 32768)  # its 1.5 s from `start`
    with pytest.raises(CorpusLayoutError, match="no wav.scp .*--split a subfolder"):
        import_corpus("kaldi", tmp_path, tmp_path / "o2")


def test_an_import_writes_its_manifest_as_it_goes_in_flat_memory_and_never_half(tmp_path):
    """Four times the rows, the same peak (tracemalloc): the records are not held. A failure midway leaves the
    manifest that was there, not a part of the new one."""
    import tracemalloc

    sf.write(tmp_path / "a.wav", np.zeros(80, dtype=np.int16), 8000)
    peaks = []
    for n in (1000, 4000):
        rows = "".join(f"a.wav,utterance number {i} of the corpus\n" for i in range(n))
        (tmp_path / f"c{n}.csv").write_text("path,text\n" + rows)
        tracemalloc.start()
        try:
            report = import_corpus("csv", tmp_path / f"c{n}.csv", tmp_path / f"out{n}")
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert report.kept == n and len(read_manifest(tmp_path / f"out{n}" / "manifest.jsonl")[0]) == n
    assert peaks[1] < peaks[0] + 300_000, peaks  # 3,000 more records held would be ~1 MB
    before = (tmp_path / "out1000" / "manifest.jsonl").read_text()
    (tmp_path / "bad.csv").write_text("path,text\nnowhere.wav,x\n")
    with pytest.raises(ManifestError, match="no utterance imported"):
        import_corpus("csv", tmp_path / "bad.csv", tmp_path / "out1000")
    assert (tmp_path / "out1000" / "manifest.jsonl").read_text() == before
    assert sorted(p.name for p in (tmp_path / "out1000").iterdir()) == ["manifest.jsonl"]
