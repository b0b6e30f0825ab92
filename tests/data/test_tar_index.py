"""Tar shards other tools wrote (webdataset's ShardWriter, GNU tar) are indexed, then stream as `data shard`'s do;
damaged or ill-formed ones are named, one line before work or skipped and counted."""
import gzip
import io
import json
import shutil
import subprocess
import zlib

import numpy as np
import pytest
import soundfile as sf
import torch

from speechscale.data.audio import load_audio
from speechscale.data.manifest import read_manifest
from speechscale.data.shards import ShardError, ShardIndex, write_shards
from speechscale.data.tar_index import index_tars
from tests.conftest import main_cli, shared
from tests.data.test_shards import RATE, _items, _manifest, _source


def _rows(n):
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:n]]
    return [(fsdd / r["audio_filepath"], r["text"]) for r in rows]


def _webdataset_shards(folder, rows, maxcount=3):
    """Shards by webdataset's own writer: FLAC bytes and a JSON member whose transcript field is `sentence`."""
    import webdataset

    folder.mkdir(parents=True, exist_ok=True)
    with webdataset.ShardWriter(str(folder / "train-%03d.tar"), maxcount=maxcount, verbose=0) as sink:
        for i, (path, text) in enumerate(rows):
            data, rate = sf.read(path, dtype="int16")
            buf = io.BytesIO()
            sf.write(buf, data, rate, format="FLAC")
            sink.write({"__key__": f"spk/utt{i:03d}", "flac": buf.getvalue(),
                        "json": {"sentence": text.upper() + ".", "client_id": "x" * 40}})


def test_webdataset_shards_are_indexed_and_stream_their_audio_and_text(tmp_path):
    rows = _rows(7)
    _webdataset_shards(tmp_path / "wd", rows)
    head = index_tars(tmp_path / "wd")
    assert head["shards"] == 3 and head["utterances"] == 7 and head["text_field"] == "sentence"
    assert not head["skipped"] and head["hours"] == pytest.approx(sum(sf.info(p).duration for p, _ in rows) / 3600,
                                                                  abs=1e-4)
    _, dataset, report = _source(tmp_path / "wd")
    assert report.kept == 7
    for i, (path, text) in enumerate(rows):
        wav, got, name, duration = dataset._load(i)
        assert got == text and name.endswith(f"member spk/utt{i:03d}.flac")  # "ZERO." normalized as training does
        np.testing.assert_array_equal(wav, load_audio(path, RATE))  # 16-bit FLAC of 16-bit wav: lossless
        assert duration == pytest.approx(sf.info(path).duration, abs=1e-4)
    assert all("feats" in it for it in _items(dataset).values())
    assert list(ShardIndex(str(tmp_path / "wd")).texts()) == [text.upper() + "." for _, text in rows]  # as written


@pytest.mark.parametrize("fmt", ["gnu", "pax"])
def test_gnu_tar_shards_with_long_and_non_ascii_names_and_txt_transcripts(tmp_path, fmt):
    """GNU tar writes long names as extra header blocks (GNU long links, pax records): a member's byte span
    starts at its first header block, and the reader parses them."""
    src = tmp_path / "src" / ("sprecher-ä" + "x" * 90)  # > 100 bytes of path: ustar cannot hold it
    src.mkdir(parents=True)
    rows = _rows(4)
    for i, (path, text) in enumerate(rows):
        shutil.copy(path, src / f"ä{i}.wav")
        (src / f"ä{i}.txt").write_text(text + "\n")
    (tmp_path / "shards").mkdir()
    subprocess.run(["tar", f"--format={fmt}", "--sort=name", "-cf", str(tmp_path / "shards" / "a.tar"), "-C",
                    str(tmp_path / "src"), "."], check=True)
    head = index_tars(tmp_path / "shards", checksums=True)
    assert head["utterances"] == 4 and not head["skipped"]
    raw = (tmp_path / "shards" / "a.tar").read_bytes()
    line = json.loads((tmp_path / "shards" / "index.jsonl").read_text().splitlines()[1])
    assert line["members"][0][2] > 512  # folder members come first: the checksums read past them
    assert line["crc32"] == [zlib.crc32(raw[start:end]) for _, _, start, end in line["members"]]
    _, dataset, _ = _source(tmp_path / "shards")
    for i, (path, text) in enumerate(rows):
        wav, got, name, _ = dataset._load(i)
        assert got == text and name.endswith(f"/ä{i}.wav")
        np.testing.assert_array_equal(wav, load_audio(path, RATE))


def test_indexing_our_own_shards_gives_the_index_they_were_written_with(tmp_path):
    write_shards(str(_manifest(tmp_path, 7)), tmp_path / "sh", shard_size=3)
    written = (tmp_path / "sh" / "index.jsonl").read_text().splitlines()
    index_tars(tmp_path / "sh", "shard-*.tar", out=tmp_path / "sh" / "again.jsonl")
    again = (tmp_path / "sh" / "again.jsonl").read_text().splitlines()
    for x, y in zip(again[1:], written[1:], strict=True):
        x, y = json.loads(x), json.loads(y)
        assert x["members"] == y["members"]  # every key, span and duration
        assert (x["shard"], x["bytes"], x["utterances"]) == (y["shard"], y["bytes"], y["utterances"])
        assert x["seconds"] == pytest.approx(y["seconds"], abs=2e-3)  # summed before or after rounding
    assert json.loads(again[0])["text_field"] == "text"
    utts, _ = read_manifest(_manifest(tmp_path, 7))
    assert list(ShardIndex(str(tmp_path / "sh")).texts()) == [u.raw_text for u in utts]
    # --checksums: the CRC-32s `data shard` computed as it wrote each tar, found again from the files
    index_tars(tmp_path / "sh", "shard-*.tar", out=tmp_path / "sh" / "summed.jsonl", jobs=2, checksums=True)
    summed = (tmp_path / "sh" / "summed.jsonl").read_text().splitlines()
    assert [json.loads(x)["crc32"] for x in summed[1:]] == [json.loads(y)["crc32"] for y in written[1:]]
    assert all("crc32" not in json.loads(x) for x in again[1:])  # without the option: none, as before


def test_data_alphabet_reads_a_shard_index_as_its_manifest(tmp_path, capsys):
    rows = [json.loads(x) for x in _manifest(tmp_path, 3).read_text().splitlines()]
    for r, text in zip(rows, ["Über 3 Straßen", "Ça va", "année"]):
        r["text"] = text
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    write_shards(str(tmp_path / "m.jsonl"), tmp_path / "sh", shard_size=2)
    got = [json.loads(main_cli(capsys, "data", "alphabet", path, "--digits-language", "de")[1])
           for path in (str(tmp_path / "m.jsonl"), str(tmp_path / "sh"))]
    assert got[0] == got[1] and "ß" in got[1]["alphabet"] and "ç" in got[1]["alphabet"] and got[1]["utterances"] == 3


def test_bad_shards_are_one_line_before_work_and_bad_utterances_are_skipped_and_counted(tmp_path, capsys):
    rows = _rows(6)
    _webdataset_shards(tmp_path / "wd", rows)
    (tmp_path / "wd" / "index.jsonl").write_text("my notes\n")
    with pytest.raises(ShardError, match="index.jsonl exists and is not a shard index"):
        index_tars(tmp_path / "wd")
    (tmp_path / "wd" / "index.jsonl").unlink()
    gz = tmp_path / "wd" / "train-009.tar"
    gz.write_bytes(gzip.compress((tmp_path / "wd" / "train-000.tar").read_bytes()))
    with pytest.raises(ShardError, match="train-009.tar is gzip-compressed: .*decompress it first"):
        index_tars(tmp_path / "wd")
    gz.write_text("hello")
    with pytest.raises(ShardError, match="train-009.tar: not a tar file"):
        index_tars(tmp_path / "wd")
    gz.unlink()
    with pytest.raises(ShardError, match="no file matches 'shard-\\*.tar'"):
        index_tars(tmp_path / "wd", "shard-*.tar")
    with pytest.raises(ShardError, match="outside it"):
        index_tars(tmp_path / "wd", out=tmp_path / "wd" / "sub" / "index.jsonl")

    # damage inside the shards: the rest is indexed, each skip counted by reason
    first = tmp_path / "wd" / "train-000.tar"
    raw = bytearray(first.read_bytes())
    at = raw.index(b"spk/utt001.flac") + 512
    raw[at:at + 64] = b"\x00" * 64  # its FLAC header gone
    first.write_bytes(bytes(raw))
    last = tmp_path / "wd" / "train-001.tar"
    data = last.read_bytes()
    last.write_bytes(data[:data.index(b"spk/utt005.flac") + 1024])  # cut inside its last utterance's audio
    head = index_tars(tmp_path / "wd")
    assert head["utterances"] == 4 and head["skipped"] == {"unreadable audio": 1, "truncated shard": 1}
    out = capsys.readouterr().out
    assert "skipping train-000.tar member spk/utt001: train-000.tar member spk/utt001.flac: not audio" in out
    index = ShardIndex(str(tmp_path / "wd"))
    assert [m[0] for s in range(index.header["shards"]) for m in index.members(s)] == [
        "spk/utt000", "spk/utt002", "spk/utt003", "spk/utt004"]


def test_members_that_do_not_follow_each_other_or_lack_a_part_are_skipped(tmp_path, capsys):
    import tarfile

    (path, text), = _rows(1)
    (tmp_path / "sh").mkdir()
    with tarfile.open(tmp_path / "sh" / "a.tar", "w") as tar:
        for name, data in [("u1.wav", path.read_bytes()), ("u2.txt", b"one"), ("u1.txt", text.encode()),
                           ("u3.txt", b"two"), ("u4.wav", path.read_bytes()), ("u4.json", b'{"text": 5}'),
                           ("u5.wav", path.read_bytes()), ("u5.txt", text.encode()),
                           ("u6.wav", path.read_bytes()), ("u6.json", b"[" * 100_000 + b"]" * 100_000)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "sh" / "b.tar").write_bytes((tmp_path / "sh" / "a.tar").read_bytes()[:512])  # no member whole
    head = index_tars(tmp_path / "sh")
    assert head["utterances"] == 1 and head["skipped"] == {"members not adjacent": 2, "no audio member": 2,
                                                           "no transcript": 2, "truncated shard": 1}
    out = capsys.readouterr().out
    assert "tar --sort=name" in out and "leaving out b.tar: no utterance in it" in out
    assert head["shards"] == 1 and ShardIndex(str(tmp_path / "sh")).shards[0].url.endswith("/a.tar")
    _, dataset, _ = _source(tmp_path / "sh")
    assert dataset._load(0)[1] == text


def test_cli_indexes_shards_and_trains_from_them(tmp_path, capsys):
    _webdataset_shards(tmp_path / "wd", _rows(8), maxcount=4)
    code, out, err = main_cli(capsys, "data", "index", str(tmp_path / "wd"))
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["utterances"] == 8
    code, out, err = main_cli(capsys, "data", "index", str(tmp_path / "nowhere"))
    assert code == 2 and "nowhere: not a folder" in err and len(err.strip().splitlines()) == 1
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {{train_manifest: {tmp_path / 'wd'}, val_manifest: {tmp_path / 'wd'}, batch_seconds: 4}}\n"
                      "features: {sample_rate: 8000}\n"
                      "model: {name: ds2-tiny, overrides: {rnn_hidden: 32, rnn_layers: 1}}\n"
                      f"trainer: {{out_dir: {tmp_path / 'run'}, progress: false, max_steps: 2}}\n")
    code, out, err = main_cli(capsys, "train", "--config", str(config))
    assert code == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["step"] == 2 and summary["train_utterances"] == 8 and summary["bad_audio"] == 0
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()


def test_shards_behind_a_url_are_indexed_in_one_streaming_pass_and_train(s3, tmp_path, capsys):
    """A real S3-compatible server (moto) on loopback: the CLI lists the bucket's tars, reads each as one stream,
    writes the index beside them, and training reads them by range from there."""
    import fsspec

    rows = _rows(6)
    _webdataset_shards(tmp_path / "wd", rows, maxcount=4)
    fs = fsspec.filesystem("s3")
    for p in (tmp_path / "wd").iterdir():
        fs.pipe(f"ckpts/wds/{p.name}", p.read_bytes())
    fs.pipe("ckpts/wds/notes.txt", b"not a shard")
    code, out, err = main_cli(capsys, "data", "index", "s3://ckpts/wds", "--pattern", "train-*.tar", "--checksums")
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["utterances"] == 6
    index_tars(tmp_path / "wd", checksums=True)  # the same tars, local: the same index lines, checksums too
    remote = fs.cat("ckpts/wds/index.jsonl").decode().splitlines()
    assert remote[1:] == (tmp_path / "wd" / "index.jsonl").read_text().splitlines()[1:]
    remote_items = _items(_source("s3://ckpts/wds/index.jsonl")[1])
    local_items = _items(_source(tmp_path / "wd")[1])
    for i in range(6):
        assert remote_items[i]["text"] == local_items[i]["text"]
        assert (remote_items[i]["feats"] == local_items[i]["feats"]).all()
    code, _, err = main_cli(capsys, "data", "index", "s3://ckpts/wds", "--out", str(tmp_path / "index.jsonl"))
    assert code == 2 and "an index names its shards relative to its own folder" in err
    # data shard straight to the bucket, two processes uploading: the same bytes as a local folder's
    manifest = _manifest(tmp_path, 5)
    write_shards(str(manifest), tmp_path / "local", shard_size=2, codec="flac")
    code, _, err = main_cli(capsys, "data", "shard", str(manifest), "--out", "s3://ckpts/sharded", "--shard-size", "2",
                            "--codec", "flac", "--jobs", "2")
    assert code == 0, err
    for p in sorted((tmp_path / "local").iterdir()):
        assert fs.cat(f"ckpts/sharded/{p.name}") == p.read_bytes(), p.name


def test_jobs_write_and_index_the_same_shards_as_one_process(tmp_path, capsys):
    manifest = _manifest(tmp_path, 9)
    write_shards(str(manifest), tmp_path / "one", shard_size=2, codec="flac")
    code, out, err = main_cli(capsys, "data", "shard", str(manifest), "--out", str(tmp_path / "two"), "--shard-size",
                              "2", "--codec", "flac", "--jobs", "2")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "two").iterdir()) and len(names) == 6  # 5 tars + index
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    index_tars(tmp_path / "one", "shard-*.tar", out=tmp_path / "one" / "a.jsonl")
    index_tars(tmp_path / "one", "shard-*.tar", out=tmp_path / "one" / "b.jsonl", jobs=2)
    assert (tmp_path / "one" / "a.jsonl").read_text() == (tmp_path / "one" / "b.jsonl").read_text()


def test_a_tar_gone_since_it_was_listed_is_counted_not_a_crash(tmp_path):
    from speechscale.data.tar_index import _read_tar

    name, size, groups, damage = _read_tar((str(tmp_path), str(tmp_path / "gone.tar"), "gone.tar", True))
    assert (name, size, groups) == ("gone.tar", 0, []) and damage.startswith("FileNotFoundError")


def test_checksums_of_other_tools_tars_catch_bytes_changed_after_indexing(tmp_path, capsys):
    """`data index --checksums` on webdataset's tars: a letter changed in one utterance's transcript afterwards is
    named by `data verify` and skipped in training (counted bad_audio), while an index without checksums reads it."""
    rows = _rows(6)
    _webdataset_shards(tmp_path / "wd", rows)
    code, _, err = main_cli(capsys, "-q", "data", "index", str(tmp_path / "wd"), "--checksums")
    assert code == 0, err
    index_tars(tmp_path / "wd", out=tmp_path / "wd" / "plain.jsonl")
    before = _items(_source(tmp_path / "wd" / "plain.jsonl")[1])
    key = ShardIndex(str(tmp_path / "wd")).members(1)[1][0]  # utterance 4
    path = tmp_path / "wd" / "train-001.tar"
    raw = bytearray(path.read_bytes())
    letter = raw.index(b'"sentence": "', raw.index(f"{key}.json".encode())) + 13
    raw[letter] = ord("Q")
    path.write_bytes(bytes(raw))
    code, out, _ = main_cli(capsys, "-q", "data", "verify", str(tmp_path / "wd"))
    got = json.loads(out)
    assert code == 1 and (got["checked"], got["damaged"]) == (6, 1)
    assert got["first_damaged"][0].endswith(f"train-001.tar member {key}")
    items = _items(_source(tmp_path / "wd")[1])
    assert items[4] == {"skip": "bad_audio"}
    assert all(torch.equal(items[i]["feats"], before[i]["feats"]) for i in (0, 1, 2, 3, 5))
    plain = _items(_source(tmp_path / "wd" / "plain.jsonl")[1])  # unchecked: trained on the changed transcript
    assert plain[4]["text"] != before[4]["text"] and torch.equal(plain[4]["feats"], before[4]["feats"])
