"""`speechscale data download`: archives the test builds from real recordings, served by a real HTTP server on
loopback (Range requests, a connection cut mid-file), checked, unpacked and imported; nothing reaches the internet."""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

from speechscale.data.manifest import read_manifest
from tests.archives import md5, yesno_archive
from tests.conftest import main_cli, shared


def test_yesno_is_downloaded_resumed_after_a_cut_checked_and_imported(tmp_path, serve, capsys):
    archive = yesno_archive()
    server = serve({"waves_yesno.tar.gz": archive}, cut={"waves_yesno.tar.gz"})
    code, out, err = main_cli(capsys, "-q", "data", "download", "yesno", "--out", str(tmp_path / "yesno"),
                              "--mirror", server.url, "--checksum", f"waves_yesno.tar.gz=md5:{md5(archive)}")
    assert code == 0, err
    res = json.loads(out.strip().splitlines()[-1])
    # the first request was cut at half the file; the second asked for the rest only
    assert server.requests == [("waves_yesno.tar.gz", None), ("waves_yesno.tar.gz", f"bytes={len(archive) // 2}-")]
    assert res["files"][0]["bytes"] == len(archive) and res["files"][0]["checked"] == "md5"
    assert res["files"][0]["sha256"] == hashlib.sha256(archive).hexdigest()
    ours, _ = read_manifest(str(tmp_path / "yesno" / "manifest.jsonl"))
    theirs, _ = read_manifest(str(shared("yesno", "manifest.jsonl")))  # made independently, by hand
    assert [(Path(u.audio_path).name, u.raw_text, round(u.duration, 2)) for u in ours] == \
        [(Path(u.audio_path).name, u.raw_text, round(u.duration, 2)) for u in theirs]
    assert not (tmp_path / "yesno" / "downloads" / "waves_yesno.tar.gz").exists()  # unpacked, then removed
    # a second run finds it done and fetches nothing
    code, out, _ = main_cli(capsys, "-q", "data", "download", "yesno", "--out", str(tmp_path / "yesno"),
                            "--mirror", server.url)
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["already"] is True and len(server.requests) == 2


def test_a_partial_file_from_an_earlier_run_is_continued(tmp_path, serve, capsys):
    archive = yesno_archive()
    server = serve({"waves_yesno.tar.gz": archive})
    part = tmp_path / "downloads" / "waves_yesno.tar.gz.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(archive[:1000])
    code, out, err = main_cli(capsys, "-q", "data", "download", "yesno", "--out", str(tmp_path), "--mirror",
                              server.url, "--checksum", f"waves_yesno.tar.gz=md5:{md5(archive)}")
    assert code == 0, err
    assert server.requests == [("waves_yesno.tar.gz", "bytes=1000-")]
    assert json.loads(out.strip().splitlines()[-1])["files"][0]["fetched"] == len(archive) - 1000


def test_the_published_checksum_refuses_another_file(tmp_path, serve, capsys):
    """The test's archive is not OpenSLR's: the catalog's md5 must refuse it, remove it and write no manifest."""
    server = serve({"waves_yesno.tar.gz": yesno_archive()})
    code, _, err = main_cli(capsys, "data", "download", "yesno", "--out", str(tmp_path), "--mirror", server.url)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "md5 is" in lines[0] and "962ff6e904d2df1126132ecec6978786" in lines[0]
    assert not list((tmp_path / "downloads").iterdir()) and not (tmp_path / "manifest.jsonl").exists()


def test_a_corrupt_archive_is_refused_in_one_line(tmp_path, serve, capsys):
    archive = yesno_archive()
    broken = archive[: len(archive) // 3]  # a truncated gzip stream, with a checksum that matches it
    server = serve({"waves_yesno.tar.gz": broken})
    code, _, err = main_cli(capsys, "data", "download", "yesno", "--out", str(tmp_path), "--mirror", server.url,
                            "--checksum", f"waves_yesno.tar.gz=md5:{md5(broken)}")
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "corrupt archive" in lines[0] and not (tmp_path / "manifest.jsonl").exists()


def test_a_zip_member_outside_the_folder_is_refused(tmp_path, serve, capsys):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("free-spoken-digit-dataset-1.0.10/recordings/0_x_0.wav", b"RIFF")
        z.writestr("../escaped.txt", b"outside")
    server = serve({"v1.0.10.zip": buf.getvalue()})
    code, _, err = main_cli(capsys, "data", "download", "fsdd", "--out", str(tmp_path / "fsdd"), "--mirror", server.url)
    assert code == 2 and "outside" in err and not (tmp_path / "escaped.txt").exists()


def test_fsdd_and_ldc93s1_import_what_they_unpack(tmp_path, serve, capsys):
    buf = io.BytesIO()
    fsdd = sorted(shared("fsdd", "recordings").glob("[0-9]_nicolas_[0-2].wav"))
    with zipfile.ZipFile(buf, "w") as z:
        for wav in fsdd:
            z.write(wav, f"free-spoken-digit-dataset-1.0.10/recordings/{wav.name}")
    ldc = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    text = b"0 46797 She had your dark suit in greasy wash water all year.\n"
    server = serve({"v1.0.10.zip": buf.getvalue(), "LDC93S1.wav": ldc, "LDC93S1.txt": text})
    code, out, err = main_cli(capsys, "-q", "data", "download", "fsdd", "--out", str(tmp_path / "fsdd"),
                              "--mirror", server.url)
    assert code == 0 and "no published checksum" in err
    utts, _ = read_manifest(str(tmp_path / "fsdd" / "manifest.jsonl"))
    assert len(utts) == len(fsdd) == 30 and {u.extra["speaker"] for u in utts} == {"nicolas"}
    assert sorted(u.raw_text for u in utts)[:3] == ["eight"] * 3
    code, out, err = main_cli(capsys, "-q", "data", "download", "ldc93s1", "--out", str(tmp_path / "ldc"),
                              "--mirror", server.url)
    assert code == 0, err
    (utt,), _ = read_manifest(str(tmp_path / "ldc" / "manifest.jsonl"))
    assert utt.raw_text == "She had your dark suit in greasy wash water all year." and abs(utt.duration - 2.9248) < 1e-3


def test_common_voice_says_where_to_get_it(capsys, tmp_path):
    code, _, err = main_cli(capsys, "data", "download", "commonvoice", "--out", str(tmp_path))
    assert code == 2 and "commonvoice.mozilla.org" in err and "data import commonvoice" in err
