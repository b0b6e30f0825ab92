"""Transcription and evaluation through the real CLI with a model overfit on LDC93S1.

The first test runs the `speechscale` console script in a process of its own; the others call the same
`main()` in this process (the `cli` fixture of tests/conftest.py), which spares a torch import (about 2 s) per command."""
import json

import numpy as np
import pytest
import soundfile as sf

from speechscale.config import ConfigError
from speechscale.decoding.metrics import edit_distance
from speechscale.inference.transcribe import EDGE_S, Transcriber, pause_chunks, split_points
from tests.conftest import shared

LDC = "she had your dark suit in greasy wash water all year"


def test_overfit_ldc93s1_to_its_exact_transcript(ldc_checkpoint, cli):
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(shared("ldc93s1", "LDC93S1.wav")))
    assert json.loads(proc.stdout.strip())["text"] == LDC


def test_eval_json_and_table(ldc_checkpoint, cli):
    m = str(shared("ldc93s1", "manifest.jsonl"))
    res = json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", m, "--json").stdout)
    assert set(res) >= {"wer", "cer", "utterances", "skipped"} and res["utterances"] == 3 and res["skipped"] == 0
    assert 0.0 <= res["wer"] <= 1.0
    table = cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", m).stdout
    assert "WER" in table and "CER" in table


def test_eval_reads_a_shard_index_as_it_reads_the_manifest(ldc_checkpoint, tmp_path, cli):
    from speechscale.data.shards import write_shards

    m = str(shared("ldc93s1", "manifest.jsonl"))
    write_shards(m, tmp_path / "sh", shard_size=2)
    plain = json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", m, "--json").stdout)
    sharded = json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(tmp_path / "sh"),
                             "--json").stdout)
    assert sharded["utterances"] == plain["utterances"] == 3
    assert sharded["wer"] == pytest.approx(plain["wer"]) and sharded["cer"] == pytest.approx(plain["cer"])


def test_transcribe_any_format_rate_and_channels(ldc_checkpoint, tmp_path, cli):
    jfk = shared("jfk", "jfk.flac")  # 44.1 kHz stereo 24-bit flac
    stereo = shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(jfk), str(stereo))
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert len(rows) == 2 and rows[0]["file"] == str(jfk) and abs(rows[0]["duration"] - 11.0) < 0.01
    assert isinstance(rows[0]["text"], str)
    # The same utterance, resampled from 44.1 kHz and down-mixed: an overfit model still reads it (CER <= 10 %).
    assert edit_distance(LDC, rows[1]["text"]) <= 0.1 * len(LDC), rows[1]["text"]
    plain = cli("transcribe", "--checkpoint", str(ldc_checkpoint), str(stereo)).stdout
    assert plain.startswith(str(stereo) + "\t") and plain.strip().split("\t")[1] == rows[1]["text"]


def test_transcribe_reads_compressed_containers_as_it_reads_wav(ldc_checkpoint, tmp_path, cli):
    from tests.media import encode

    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    files = [str(encode(wav, rate, tmp_path / f"ldc.{suffix}")) for suffix in ("m4a", "webm")]
    rows = [json.loads(x) for x in cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", *files)
            .stdout.strip().splitlines()]
    assert [r["file"] for r in rows] == files
    assert all(edit_distance(LDC, r["text"]) <= 0.1 * len(LDC) for r in rows), rows


def test_long_audio_is_cut_at_its_pauses_to_the_length_the_model_trained_on(ldc_checkpoint, tmp_path, cli):
    """The model trained on one 2.9 s utterance: by default (its card) long audio is cut into chunks of at most 1.5
    times that, each in the middle of a pause and trimmed to EDGE_S of it; every copy of the utterance is heard."""
    wav, sr = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    gaps = [0.4, 1.2, 0.7]  # s between the four copies: the recording's own room tone (its first 0.1 s), repeated
    parts, spans, at = [], [], 0
    for k in range(4):
        if k:
            parts.append(np.resize(wav[:int(0.1 * sr)], int(gaps[k - 1] * sr)))
            at += len(parts[-1])
        parts.append(wav)
        spans.append((at, at + len(wav)))
        at += len(wav)
    long = np.concatenate(parts)  # ~14 s
    sf.write(tmp_path / "long.wav", long, sr)
    trained = json.loads(shared("ldc93s1", "manifest.jsonl").read_text().splitlines()[0])["duration"]
    asr = Transcriber(ldc_checkpoint)
    assert asr.chunk_seconds == pytest.approx(1.5 * trained, abs=0.01)
    loud = np.flatnonzero(np.abs(wav) > 0.1 * np.abs(wav).max())  # the utterance's speech, found apart from the code
    chunks = pause_chunks(long, sr, asr.chunk_seconds)
    assert len(chunks) == 4
    for k, ((a, b), (s0, s1)) in enumerate(zip(chunks, spans)):
        assert a <= s0 + loud[0] and s0 + loud[-1] < b  # the copy's speech whole
        edge = (EDGE_S + 0.01) * sr  # a pause is found in whole 10 ms frames
        assert (k == 0 or a >= s0 - edge) and (k == 3 or b <= s1 + edge)  # at most EDGE_S of a pause
    clicked, clicks = long.copy(), []  # a 15 ms tap in the middle of each pause: no word, and no chunk of its own
    for (_, s1), (p0, _) in zip(spans, spans[1:]):
        at = (s1 + p0) // 2
        clicked[at:at + int(0.015 * sr)] = np.random.default_rng(at).uniform(-0.5, 0.5, int(0.015 * sr)) * \
            np.abs(wav).max()
        clicks.append(at)
    assert pause_chunks(clicked, sr, asr.chunk_seconds) == chunks  # no chunk holds a tap, alone or with speech
    tiled = pause_chunks(long, sr, asr.chunk_seconds, trim=False)
    assert tiled[0][0] == 0 and tiled[-1][1] == len(long) and all(x[1] == y[0] for x, y in zip(tiled, tiled[1:]))
    for (_, b), (s0, _), (p0, _) in zip(tiled, spans, spans[1:]):  # each cut near the middle of the pause between two
        assert abs(b - (s0 + loud[-1] + p0 + loud[0]) / 2) <= 0.1 * sr
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(tmp_path / "long.wav"))
    res = json.loads(proc.stdout)
    said = res["text"].split()  # a model overfit on one file misspells a letter or two of a copy cut from a longer one
    assert said.count("she") == said.count("greasy") == 4 and edit_distance(" ".join([LDC] * 4), res["text"]) <= \
        0.1 * 4 * len(LDC), res["text"]
    greasy = [w for w in res["words"] if w["word"] == "greasy"]
    assert all(s0 / sr < w["start"] < w["end"] < s1 / sr for w, (s0, s1) in zip(greasy, spans))  # times in the file
    noise = np.random.default_rng(0).standard_normal(10 * sr).astype(np.float32) * 0.1  # no pause anywhere
    cuts = pause_chunks(noise, sr, 4.0)
    assert cuts == [(a, b) for a, b in zip(*(lambda c: (c, c[1:]))(split_points(noise, sr, 4.0)))]
    assert len(cuts) == 3 and all(b - a <= 4 * sr for a, b in cuts)
    assert pause_chunks(wav, sr, 4.0) == [(0, len(wav))]  # audio that fits: whole, untrimmed


def test_a_long_files_chunks_run_a_few_at_a_time_with_the_same_words(ldc_checkpoint):
    """Chunks go through the model in batches of at most `max_pieces`: the same text, times and confidences as one
    batch of all of them, and the model never sees more rows than that."""
    wav, sr = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    long = np.concatenate([np.concatenate([wav, np.zeros(int(0.5 * sr), np.float32)])] * 5)  # five utterances
    whole = Transcriber(ldc_checkpoint, chunk_seconds=3.5, max_pieces=64)
    few = Transcriber(ldc_checkpoint, chunk_seconds=3.5, max_pieces=2)
    rows = []
    forward = few.model.forward
    few.model.forward = lambda feats, lens: rows.append(feats.shape[0]) or forward(feats, lens)
    a, b = whole.transcribe_batch([long, wav]), few.transcribe_batch([long, wav])
    assert len(rows) >= 3 and max(rows) == 2 and sum(rows) == len(pause_chunks(long, sr, 3.5)) + 1  # its chunks, wav's one
    for x, y in zip(a, b):
        assert x["text"] == y["text"] and x["text"].count("greasy") == (5 if x is a[0] else 1), x["text"]
        assert [w["word"] for w in x["words"]] == [w["word"] for w in y["words"]]
        assert [w[k] for w in x["words"] for k in ("start", "end")] == \
               pytest.approx([w[k] for w in y["words"] for k in ("start", "end")], abs=1e-6)
        assert [w["confidence"] for w in x["words"]] == pytest.approx([w["confidence"] for w in y["words"]], abs=2e-3)


def test_unreadable_file_is_reported_not_fatal(ldc_checkpoint, tmp_path, cli):
    (tmp_path / "bad.wav").write_bytes(b"RIFF....")
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(tmp_path / "bad.wav"),
               str(shared("ldc93s1", "LDC93S1.wav")), check=False)
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert proc.returncode == 1 and "error" in rows[0] and rows[1]["text"] == LDC


def test_transcribe_reads_urls_and_reports_one_it_cannot_read(ldc_checkpoint, serve, cli):
    server = serve({"ldc.wav": shared("ldc93s1", "LDC93S1.wav").read_bytes()})
    urls = [f"{server.url}/ldc.wav", f"{server.url}/gone.wav"]
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", *urls, check=False)
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert proc.returncode == 1 and [r["file"] for r in rows] == urls
    assert rows[0]["text"] == LDC and "HTTP 404" in rows[1]["error"]


def test_transcribe_reads_an_audio_file_piped_to_standard_input(ldc_checkpoint, tmp_path, cli):
    import subprocess
    import sys

    from tests.media import encode

    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    m4a = encode(wav, rate, tmp_path / "ldc.m4a")
    run = [sys.executable, "-m", "speechscale.cli", "transcribe", "--checkpoint", str(ldc_checkpoint), "--json", "-"]
    piped = subprocess.run(run, input=m4a.read_bytes(), capture_output=True, timeout=300)
    named = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(m4a))
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert json.loads(piped.stdout)["text"] == json.loads(named.stdout)["text"]
    assert json.loads(piped.stdout)["file"] == "-"
    empty = subprocess.run(run, input=b"", capture_output=True, timeout=300)
    assert empty.returncode == 1 and json.loads(empty.stdout)["error"] == "standard input: no bytes (empty)"
    twice = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "-", "-", check=False)
    assert twice.returncode == 2 and "can be named once" in twice.stderr


@pytest.mark.parametrize("chunk", ["0", "-5", "0.001"])
def test_chunk_lengths_that_would_never_end_are_refused_in_one_line(ldc_checkpoint, chunk, cli):
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), f"--chunk-seconds={chunk}",
               str(shared("ldc93s1", "LDC93S1.wav")), check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == (f"speechscale transcribe: error: argument --chunk-seconds: "
                                                             f"{chunk}: chunks must be at least 1 s long (see speechscale "
                                                             f"transcribe --help)")
    with pytest.raises(ConfigError):
        Transcriber(ldc_checkpoint, chunk_seconds=float(chunk))


def test_a_manifest_puts_the_reference_and_wer_beside_each_transcript(ldc_checkpoint, cli):
    m, wav = shared("ldc93s1", "manifest.jsonl"), shared("ldc93s1", "LDC93S1.wav")
    row = json.loads(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--manifest", str(m), "--json",
                         str(wav)).stdout)
    assert row["reference"].lower().startswith("she had your dark suit") and row["wer"] == 0.0
    lines = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--manifest", str(m), str(wav)).stdout.splitlines()
    assert lines[1].split(":", 1)[1].strip() == LDC and lines[2].startswith("  reference:")
    proc = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--manifest", str(wav), str(wav), check=False)
    assert proc.returncode == 2 and "LDC93S1.wav: not a JSONL manifest: it holds NUL bytes (an audio or other " \
        "binary file?)" in proc.stderr  # a wav given as the manifest: said, not ignored


def test_a_clip_shorter_than_its_manifest_says_is_skipped_and_counted_in_eval(ldc_checkpoint, tmp_path, cli):
    """0.01 s of audio listed as 2.0 s: features cannot be computed (the STFT needs half a window)."""
    sf.write(tmp_path / "tiny.wav", np.zeros(160, np.float32), 16000)
    src = json.loads(shared("ldc93s1", "manifest.jsonl").read_text().splitlines()[0])
    rows = [{"audio_filepath": "tiny.wav", "duration": 2.0, "text": "she had"},
            {**src, "audio_filepath": str(shared("ldc93s1", src["audio_filepath"]))}]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(tmp_path / "m.jsonl"),
                         "--json").stdout)
    assert res["utterances"] == 1 and res["skipped"] == 1 and res["skipped_reasons"] == {"too_short": 1}


def test_json_with_a_subtitle_format_is_refused_in_one_line(ldc_checkpoint, cli):
    """transcribe --json --format vtt printed JSON without a word about the format it dropped."""
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    for fmt in ("vtt", "srt"):
        result = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", "--format", fmt, wav, check=False)
        assert result.returncode == 2 and f"--format {fmt} writes subtitles" in result.stderr and not result.stdout
    assert json.loads(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", "--format", "json",
                          wav).stdout)["text"]
