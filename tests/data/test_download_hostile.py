"""`speechscale data download` against a mirror that misbehaves, deliberately or by accident (tests/data/mirror.py, a
real server on loopback): each case ends in one line and the right exit, leaves nothing a later run could take as
complete and no more on disk than the catalog allows, and the repaired mirror then succeeds."""
from __future__ import annotations

import functools
import io
import json
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from speechscale.data.catalog import CORPORA, MB
from tests.archives import md5
from tests.archives import yesno_archive as _yesno_archive
from tests.conftest import main_cli, shared
from tests.data.mirror import start

yesno_archive = functools.cache(_yesno_archive)  # one archive (gzip and tar stamp the time)
LDC_TEXT = b"0 46797 She had your dark suit in greasy wash water all year.\n"
YESNO = "waves_yesno.tar.gz"
FSDD = "v1.0.10.zip"


@pytest.fixture
def mirror():
    servers = []

    def run(plan):
        server = start(plan)
        servers.append(server)
        return server
    yield run
    for s in servers:
        s.stop.set()
        s.shutdown()
        s.server_close()


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _fsdd_zip(extra: dict[str, bytes] | None = None, symlink: str = "") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for wav in sorted(shared("fsdd", "recordings").glob("[0-9]_nicolas_[0-1].wav")):
            z.write(wav, f"free-spoken-digit-dataset-1.0.10/recordings/{wav.name}")
        for name, data in (extra or {}).items():
            z.writestr(f"free-spoken-digit-dataset-1.0.10/recordings/{name}", data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, "/etc/passwd")
    return buf.getvalue()


def _run(capsys, corpus, out, server, *flags):
    code, stdout, err = main_cli(capsys, "-q", "data", "download", corpus, "--out", str(out), "--mirror", server.url,
                                 *flags)
    return code, stdout, [x for x in err.splitlines() if x.strip()]


def _nothing_complete(out: Path) -> None:
    assert not (out / ".downloaded.json").exists() and not (out / "manifest.jsonl").exists()


def _disk(out: Path) -> int:
    return sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.exists() else 0


def _pin(data: bytes) -> tuple[str, str]:
    return "--checksum", f"{YESNO}=md5:{md5(data)}"


def _repaired(capsys, out, mirror, corpus="yesno"):
    """The same --out with a mirror that behaves: the download completes."""
    good = {"yesno": {YESNO: [("body", yesno_archive())]},
            "fsdd": {FSDD: [("body", _fsdd_zip())]},
            "ldc93s1": {"LDC93S1.wav": [("body", shared("ldc93s1", "LDC93S1.wav").read_bytes())],
                        "LDC93S1.txt": [("body", LDC_TEXT)]}}[corpus]
    server = mirror(good)
    flags = _pin(yesno_archive()) if corpus == "yesno" else ()
    code, stdout, err = _run(capsys, corpus, out, server, *flags)
    assert code == 0, err
    res = json.loads(stdout.strip().splitlines()[-1])
    assert "already" not in res and res["kept"] > 0 and (out / ".downloaded.json").is_file()


@pytest.mark.parametrize("corpus,name,bomb", [
    ("yesno", YESNO, lambda: _tar([_file("waves_yesno/0_0_0_0_1_1_1_1.wav", b"\0" * (40 * MB))])),
    ("fsdd", FSDD, lambda: _fsdd_zip({"9_bomb_0.wav": b"\0" * (60 * MB)})),
    ("yesno", YESNO, lambda: _tar([_file(f"waves_yesno/{i}.wav", b"") for i in range(5000)])),  # files, not bytes
])
def test_an_archive_that_unpacks_past_the_catalog_is_refused_before_it_fills_the_disk(tmp_path, capsys, mirror,
                                                                                      corpus, name, bomb):
    data = bomb()
    assert len(data) < 1 * MB  # a small download
    out = tmp_path / corpus
    flags = ("--checksum", f"{name}=md5:{md5(data)}")
    code, _, err = _run(capsys, corpus, out, mirror({name: [("body", data)]}), *flags)
    assert code == 2 and len(err) == 1 and "the catalog allows" in err[0], err
    _nothing_complete(out)
    assert _disk(out) <= 1.2 * CORPORA[corpus].size_mb * MB
    _repaired(capsys, out, mirror, corpus)


def test_an_endless_body_stops_at_the_catalogs_size_and_is_removed(tmp_path, capsys, mirror):
    out = tmp_path / "yesno"
    code, _, err = _run(capsys, "yesno", out, mirror({YESNO: [("endless",)]}))
    assert code == 2 and len(err) == 1 and "more than" in err[0], err
    assert not (out / "downloads" / (YESNO + ".part")).exists() and _disk(out) == 0
    _nothing_complete(out)
    _repaired(capsys, out, mirror)


@pytest.mark.parametrize("long_name", ["waves_yesno/" + "n" * 5025 + ".wav", "waves_yesno/" + "d/" * 600 + "x.wav"])
def test_a_member_with_a_name_no_file_system_takes_is_one_short_line_and_leaves_nothing(tmp_path, capsys, mirror,
                                                                                      long_name):
    """A 5,037-byte member name (after three good files) gave a 5,124-character line and left the three unpacked in
    the folder: now one line of at most 300 characters, and no file of the archive stays."""
    good = [_file(f"waves_yesno/0_0_0_0_1_1_1_{i}.wav", b"RIFF") for i in range(3)]
    data = _tar([*good, _file(long_name, b"x")])
    out = tmp_path / "yesno"
    code, _, err = _run(capsys, "yesno", out, mirror({YESNO: [("body", data)]}), *_pin(data))
    assert code == 2 and len(err) == 1 and len(err[0]) <= 300 and "longer than a file system takes" in err[0], err
    _nothing_complete(out)
    assert not [f for f in out.rglob("*") if f.is_file()], list(out.rglob("*"))
    _repaired(capsys, out, mirror)


def test_markers_planted_in_an_archive_are_refused_and_the_next_run_is_not_fooled(tmp_path, capsys, mirror):
    planted = _tar([_file(".downloaded.json", b'{"corpus": "yesno", "files": []}'),
                    _file("manifest.jsonl", b'{"audio_filepath": "x.wav", "duration": 1, "text": "yes"}\n'),
                    _file("../escape.txt", b"x")])
    out = tmp_path / "yesno"
    code, _, err = _run(capsys, "yesno", out, mirror({YESNO: [("body", planted)]}), *_pin(planted))
    assert code == 2 and len(err) == 1 and "keeps for itself" in err[0], err
    _nothing_complete(out)
    assert not (tmp_path / "escape.txt").exists()
    _repaired(capsys, out, mirror)


def test_a_folder_holding_another_corpus_is_not_taken_as_done(tmp_path, capsys, mirror):
    out = tmp_path / "data"
    _repaired(capsys, out, mirror, "yesno")
    code, _, err = _run(capsys, "fsdd", out, mirror({FSDD: [("body", _fsdd_zip())]}))
    assert code == 2 and len(err) == 1 and "holds the corpus yesno" in err[0], err


def test_a_marker_for_other_checksums_is_not_done(tmp_path, capsys, mirror):
    out = tmp_path / "yesno"
    _repaired(capsys, out, mirror)
    other = yesno_archive()[:-1] + bytes([yesno_archive()[-1] ^ 1])
    code, _, err = _run(capsys, "yesno", out, mirror({YESNO: [("body", yesno_archive())]}),
                        "--checksum", f"{YESNO}=md5:{md5(other)}")
    assert code == 2 and "md5 is" in err[0]  # fetched again and checked, not "already"
    _nothing_complete(out)


@pytest.mark.parametrize("corpus,name,page", [("ldc93s1", "LDC93S1.wav", b"<!DOCTYPE html><html>Not here</html>"),
                                              ("fsdd", FSDD, b"<html><body>rate limited</body></html>")])
def test_an_html_page_with_200_is_refused_removed_and_fetched_again_next_time(tmp_path, capsys, mirror, corpus, name,
                                                                             page):
    out = tmp_path / corpus
    plan = {name: [("body", page)], "LDC93S1.txt": [("body", LDC_TEXT)]}
    code, _, err = _run(capsys, corpus, out, mirror(plan))
    assert code == 2 and "HTML page" in err[-1] and not (out / "downloads" / name).exists(), err
    assert len([x for x in err if "note:" not in x]) == 1
    _nothing_complete(out)
    _repaired(capsys, out, mirror, corpus)


def test_a_206_of_another_part_is_not_spliced(tmp_path, capsys, mirror):
    archive = yesno_archive()
    out = tmp_path / "yesno"
    part = out / "downloads" / (YESNO + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(archive[:1000])
    server = mirror({YESNO: [("wrong_range", archive), ("body", archive)]})
    code, stdout, err = _run(capsys, "yesno", out, server, *_pin(archive))
    assert code == 0, err
    assert server.requests == [(YESNO, "bytes=1000-"), (YESNO, None)]  # started over, whole
    assert json.loads(stdout.strip().splitlines()[-1])["files"][0]["bytes"] == len(archive)


def test_corrupt_and_oddly_named_recordings_are_skipped_and_counted(tmp_path, capsys, mirror):
    good = sorted(shared("yesno").glob("*.wav"))[:4]
    archive = _tar([*[_file(f"waves_yesno/{w.name}", w.read_bytes()) for w in good],
                    _file("waves_yesno/1_1_1_1_0_0_0_0.wav", b"RIFF\0\0\0\0WAVEjunk"),
                    _file("waves_yesno/hello.wav", good[0].read_bytes())])
    out = tmp_path / "yesno"
    code, stdout, err = _run(capsys, "yesno", out, mirror({YESNO: [("body", archive)]}), *_pin(archive))
    assert code == 0, err
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res["kept"] == 4 and res["skipped"] == {"unreadable audio": 1, "not a yesno file name": 1}
    assert any("skipped 2 recordings" in x for x in err)
    zipped = _fsdd_zip({"0_george_x.wav": b"RIFF", "readme.wav": b"x", "1_george_0.wav": b"RIFFjunk"})
    code, stdout, err = _run(capsys, "fsdd", tmp_path / "fsdd", mirror({FSDD: [("body", zipped)]}))
    res = json.loads(stdout.strip().splitlines()[-1])
    assert code == 0 and res["kept"] == 20, err
    assert res["skipped"] == {"not named DIGIT_SPEAKER_INDEX.wav": 2, "unreadable audio": 1}


def test_a_corrupt_ldc93s1_recording_is_one_line(tmp_path, capsys, mirror):
    out = tmp_path / "ldc"
    plan = {"LDC93S1.wav": [("body", b"RIFF\0\0\0\0WAVEjunkjunk")], "LDC93S1.txt": [("body", LDC_TEXT)]}
    code, _, err = _run(capsys, "ldc93s1", out, mirror(plan))
    assert code == 2 and "not readable audio" in err[-1]
    _nothing_complete(out)
    _repaired(capsys, out, mirror, "ldc93s1")


def test_bad_headers_and_a_bad_out_are_one_line(tmp_path, capsys, mirror):
    code, _, err = _run(capsys, "yesno", tmp_path / "a", mirror({YESNO: [("bad_length", "12abc")]}))
    assert code == 2 and len(err) == 1 and "not a number" in err[0], err
    file = tmp_path / "file"
    file.write_text("x")
    server = mirror({YESNO: [("body", yesno_archive())]})
    for out in (file, file / "sub"):
        code, _, err = _run(capsys, "yesno", out, server)
        assert code == 2 and len(err) == 1 and str(file) in err[0] and "Traceback" not in err[0], err


def test_redirects_loops_schemes_and_foreign_hosts(tmp_path, capsys, mirror):
    server = mirror({YESNO: [("redirect", f"/{YESNO}")]})
    code, _, err = _run(capsys, "yesno", tmp_path / "a", server)
    assert code == 2 and len(err) == 1 and "redirects (a loop?)" in err[0], err
    server = mirror({YESNO: [("redirect", "file:///etc/passwd")]})
    code, _, err = _run(capsys, "yesno", tmp_path / "b", server)
    assert code == 2 and len(err) == 1 and "only http(s) is followed" in err[0], err
    target = mirror({YESNO: [("body", yesno_archive())]})
    foreign = target.url.replace("127.0.0.1", "localhost") + f"/{YESNO}"
    server = mirror({YESNO: [("redirect", foreign)]})
    code, _, err = _run(capsys, "yesno", tmp_path / "c", server, "--confine-hosts")
    assert code == 2 and len(err) == 1 and "outside the corpus's hosts" in err[0], err
    code, _, err = _run(capsys, "yesno", tmp_path / "d", server, *_pin(yesno_archive()))
    assert code == 0, err  # without --confine-hosts an http(s) redirect is followed


def test_retries_that_fit(tmp_path, capsys, mirror):
    archive = yesno_archive()
    server = mirror({YESNO: [("status", 500), ("status", 429, {"Retry-After": "1"}), ("cut", archive),
                             ("body", archive)]})
    started = time.monotonic()
    code, _, err = _run(capsys, "yesno", tmp_path / "a", server, *_pin(archive))
    assert code == 0, err
    assert server.count(YESNO) == 4 and time.monotonic() - started >= 1.0  # 5xx, 429 (its Retry-After), cut, rest
    server = mirror({YESNO: [("status", 403)]})
    code, _, err = _run(capsys, "yesno", tmp_path / "b", server)
    assert code == 2 and len(err) == 1 and "HTTP 403" in err[0] and server.count(YESNO) == 1


def test_a_stall_after_the_headers_ends_in_one_line_soon(tmp_path, capsys, mirror):
    server = mirror({YESNO: [("stall",)]})
    started = time.monotonic()
    code, _, err = _run(capsys, "yesno", tmp_path / "a", server, "--timeout", "1")
    assert code == 2 and len(err) == 1 and "no data for 1 s" in err[0], err
    assert time.monotonic() - started < 20 and server.count(YESNO) == 2  # two tries of 1 s; 10x margin for a loaded machine


def test_absolute_names_links_and_unknown_checksum_files_are_refused(tmp_path, capsys, mirror):
    link = tarfile.TarInfo("waves_yesno/link.wav")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("waves_yesno/hard.wav")
    hard.type, hard.linkname = tarfile.LNKTYPE, "waves_yesno/x.wav"
    for i, members in enumerate([[_file("/abs/x.wav", b"x")], [(link, None)], [_file("waves_yesno/x.wav", b"x"),
                                                                                (hard, None)]]):
        archive = _tar(members)
        out = tmp_path / f"t{i}"
        code, _, err = _run(capsys, "yesno", out, mirror({YESNO: [("body", archive)]}), *_pin(archive))
        assert code == 2 and len(err) == 1 and "refused" in err[0], err
        _nothing_complete(out)
        assert not Path("/abs/x.wav").exists()
    zipped = _fsdd_zip(symlink="free-spoken-digit-dataset-1.0.10/recordings/link.wav")
    code, _, err = _run(capsys, "fsdd", tmp_path / "z", mirror({FSDD: [("body", zipped)]}))
    assert code == 2 and "not a regular file" in err[-1], err
    code, _, err = _run(capsys, "yesno", tmp_path / "c", mirror({}), "--checksum", "WRONG.tar.gz=md5:00")
    assert code == 2 and len(err) == 1 and "has no such file" in err[0]


def test_the_peak_disk_of_a_download_stays_within_the_catalogs_size(tmp_path, capsys, mirror):
    """The folder's size, polled while yesno downloads, unpacks and imports: at most 1.2 times the catalog's size
    (its archive and what that unpacks to)."""
    import threading

    out, peak, done = tmp_path / "yesno", [0], threading.Event()

    def poll():
        while not done.is_set():
            try:
                peak[0] = max(peak[0], _disk(out))
            except OSError:  # a file moved away while it was listed
                pass
            time.sleep(0.002)

    poller = threading.Thread(target=poll)
    poller.start()
    server = mirror({YESNO: [("body", yesno_archive())]})
    code, _, err = _run(capsys, "yesno", out, server, *_pin(yesno_archive()), "--keep-archives")
    done.set()
    poller.join()
    assert code == 0, err
    held = _disk(out)  # archive kept: the archive and the corpus, the most it holds
    assert held >= len(yesno_archive()) + 5 * MB and peak[0] <= 1.2 * CORPORA["yesno"].size_mb * MB, (peak, held)
