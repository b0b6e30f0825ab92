"""`speechscale data download NAME --out DIR`: a public corpus fetched, checked, unpacked and imported into
DIR/manifest.jsonl, ready for a recipe's `data.root=DIR`.

    speechscale data download yesno --out data/yesno
    speechscale train --config yesno data.root=data/yesno

Staged, then committed: each file is fetched to DIR/downloads/FILE.part (storage/fetch.py: bounded by the catalog's
size for it, continued after a cut, retried where that helps), checked against its published checksum (md5 or
sha256; a corpus without one says so and prints the sha256 to pin with --checksum) and against its kind (a tar, a
zip, audio, text: an HTML error page is refused and removed, so the next run fetches again). Archives are unpacked
into DIR/.staging: only regular files and folders, no absolute or `..` names, none of the tool's own names, their
declared sizes within the catalog's bound before anything is written and the bytes counted while writing. The
corpus's importer writes the manifest there (recordings that do not read, or are named unlike the corpus's
pattern, are skipped and counted); then the files move into DIR, the manifest after them and the done-marker
DIR/.downloaded.json last, holding the corpus's name and each file's checksums. A run that fails leaves no
marker, so no later run takes the corpus as complete; a marker of another corpus, or of files other than the
checksums pinned now, is not "done". `--mirror URL` fetches every file from URL/FILE instead (a local copy, a
proxy, the tests' server).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import urllib.parse
import zipfile
from pathlib import Path
from typing import Any

from ..config import parse_json
from ..storage.fetch import Policy, fetch
from .catalog import CORPORA, MB, NO_URL, Corpus, DownloadError, Source, corpus

__all__ = ["CORPORA", "NO_URL", "Corpus", "DownloadError", "Source", "corpus", "download", "fetch", "unpack",
           "verify"]
CHUNK = 1 << 16
MARGIN = 1.1          # reads and unpacking stop past this times the catalog's size
BLOCK = 4096         # a member costs at least a disk block: many empty files are not free
DONE, STAGE = ".downloaded.json", ".staging"
RESERVED = {DONE, STAGE, "manifest.jsonl", "downloads"}


def digests(path: Path) -> dict[str, str]:
    """md5 and sha256 of a file, hex."""
    hashes = {"md5": hashlib.md5(), "sha256": hashlib.sha256()}
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            for h in hashes.values():
                h.update(block)
    return {k: h.hexdigest() for k, h in hashes.items()}


def _parse(checksum: str) -> tuple[str, str]:
    algo, _, want = checksum.partition(":")
    if algo not in ("md5", "sha256") or not want:
        raise DownloadError(f"checksum {checksum!r}: expected md5:HEX or sha256:HEX")
    return algo, want.lower()


def verify(path: Path, checksum: str) -> dict[str, str]:
    """The file's md5 and sha256; DownloadError (and the file removed) when `checksum` (ALGO:HEX) does not match."""
    got = digests(path)
    if checksum:
        algo, want = _parse(checksum)
        if got[algo] != want:
            path.unlink()
            raise DownloadError(f"{path.name}: {algo} is {got[algo]}, expected {want}: the download is corrupt or not "
                                f"the published file; it was removed (run the command again)")
    return got


def check_kind(path: Path, kind: str) -> None:
    """DownloadError (and the file removed) when the file is not a `kind` (tar, zip, wav, text)."""
    with path.open("rb") as f:
        head = f.read(512)
    ok = {"tar": lambda: tarfile.is_tarfile(path), "zip": lambda: zipfile.is_zipfile(path),
          "wav": lambda: head[:4] == b"RIFF" and head[8:12] == b"WAVE",
          "text": lambda: b"\0" not in head and not head.lstrip().lower().startswith((b"<!doctype", b"<html"))}[kind]()
    if not ok:
        what = "an HTML page" if head.lstrip()[:1] == b"<" else "something else"
        path.unlink()
        raise DownloadError(f"{path.name}: the server sent {what}, not a {kind} file; it was removed (run the "
                            "command again, or check --mirror)")


MAX_NAME = 255     # bytes of one part of a member's path (what file systems take)
MAX_PATH = 1024    # bytes of a member's whole path


def _shown(name: str) -> str:
    """A member's name as an error line shows it: quoted, at most 80 characters."""
    return repr(name if len(name) <= 80 else name[:60] + "..." + name[-17:])


def _member_name(name: str, archive: str) -> str:
    parts = Path(name).parts
    if not name or name.startswith(("/", "\\")) or (parts and ":" in parts[0]) or ".." in parts:
        raise DownloadError(f"{archive}: member {_shown(name)} would be written outside the corpus's folder; refused")
    if parts and parts[0] in RESERVED:
        raise DownloadError(f"{archive}: member {_shown(name)} has a name the tool keeps for itself; refused")
    if len(name.encode(errors="replace")) > MAX_PATH or any(len(p.encode(errors="replace")) > MAX_NAME for p in parts):
        raise DownloadError(f"{archive}: member {_shown(name)} has a name of {len(name)} characters, longer than a "
                            f"file system takes ({MAX_NAME} bytes a part); refused")
    return name


def _copy(src: Any, dest: Path, written: int, bound: int, archive: str) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as f:
        while block := src.read(CHUNK):
            written += len(block)
            if written > bound:
                raise DownloadError(f"{archive}: unpacks to more than the {bound // MB} MB the catalog allows; "
                                    "refused")
            f.write(block)
    return written


def unpack(archive: Path, kind: str, stage: Path, bound: int, written: int = 0) -> int:
    """Unpack a `kind` ("tar", .tar or .tar.gz, or "zip") archive into `stage` (module docstring) after `written`
    bytes of other archives, all of them within `bound`; the bytes written in all."""
    name = archive.name
    try:
        if kind == "tar":
            with tarfile.open(archive) as tar:
                declared = written
                for m in tar:  # every header first: names, kinds and declared sizes, before any write
                    _member_name(m.name, name)
                    if not (m.isfile() or m.isdir()):
                        raise DownloadError(f"{name}: member {_shown(m.name)} is not a regular file or folder; refused")
                    declared += max(m.size, BLOCK)
                    if declared > bound:
                        raise DownloadError(f"{name}: declares more than the {bound // MB} MB the catalog allows; "
                                            "refused")
                for m in tar.getmembers():
                    if m.isfile():
                        with tar.extractfile(m) as src:  # type: ignore[union-attr]
                            written = _copy(src, stage / m.name, written, bound, name)
                    else:
                        (stage / m.name).mkdir(parents=True, exist_ok=True)
        elif kind == "zip":
            with zipfile.ZipFile(archive) as z:
                infos = z.infolist()
                for i in infos:
                    _member_name(i.filename, name)
                    mode = (i.external_attr >> 16) & 0o170000
                    if mode not in (0, 0o100000, 0o040000):
                        raise DownloadError(f"{name}: member {_shown(i.filename)} is not a regular file or folder; refused")
                if written + sum(max(i.file_size, BLOCK) for i in infos) > bound:
                    raise DownloadError(f"{name}: declares more than the {bound // MB} MB the catalog allows; refused")
                for i in infos:
                    if i.is_dir():
                        (stage / i.filename).mkdir(parents=True, exist_ok=True)
                    else:
                        with z.open(i) as src:
                            written = _copy(src, stage / i.filename, written, bound, name)
        else:
            raise DownloadError(f"{name}: not a tar or zip archive")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, ValueError) as e:
        if isinstance(e, DownloadError):
            raise
        raise DownloadError(f"{name}: a corrupt archive ({type(e).__name__}: {str(e)[:160]})") from None
    except OSError as e:  # a name or size the file system refuses, a full disk
        raise DownloadError(f"{name}: could not be unpacked ({e.strerror or type(e).__name__}"
                            f"{': ' + _shown(str(e.filename)) if e.filename else ''})") from None
    return written


def _done(out: Path, name: str, names: list[str], pinned: dict[str, str]) -> dict[str, Any] | None:
    """The marker of a complete download of `name` holding each of its files, with the checksums `pinned` now
    (--checksum), or None."""
    marker = out / DONE
    try:
        done = parse_json(marker.read_text())
    except (OSError, ValueError):
        return None
    other = done.get("corpus") if isinstance(done, dict) else None
    if other != name:
        if other in CORPORA:
            raise DownloadError(f"{out} holds the corpus {other}; download {name} into a folder of its own")
        return None
    files = {f.get("file"): f for f in done.get("files", []) if isinstance(f, dict)}
    if set(names) - set(files):
        return None
    for file, checksum in pinned.items():
        algo, want = _parse(checksum)
        if files[file].get(algo) != want:
            return None
    return done if (out / "manifest.jsonl").is_file() else None


def _commit(stage: Path, out: Path) -> None:
    """Move the staged files into `out`, the manifest after them."""
    for entry in sorted(stage.iterdir()):
        if entry.name == "manifest.jsonl":
            continue
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(entry, target)
    os.replace(stage / "manifest.jsonl", out / "manifest.jsonl")
    stage.rmdir()


def download(name: str, out: str | Path, mirror: str = "", checksums: dict[str, str] | None = None,
             progress: bool = True, keep_archives: bool = False, timeout: float = 10.0,
             confine_hosts: bool = False) -> dict[str, Any]:
    """Download corpus `name` into `out`, check, unpack and import it; returns what was done (JSON-able)."""
    spec, out, checksums = corpus(name), Path(out), dict(checksums or {})
    unknown = sorted(set(checksums) - {s.name for s in spec.files})
    if unknown:
        raise DownloadError(f"--checksum {unknown[0]}: {name} has no such file (its files: "
                            f"{', '.join(s.name for s in spec.files)})")
    for value in checksums.values():
        _parse(value)
    if mirror:
        where = urllib.parse.urlsplit(mirror)
        if where.scheme not in ("http", "https", "file") or (where.scheme != "file" and not where.hostname):
            raise DownloadError(f"--mirror {mirror!r}: expected an http(s)://HOST/... or file:///... URL")
    pinned = {s.name: checksums.get(s.name, s.checksum) for s in spec.files}
    try:
        if out.exists() and not out.is_dir():
            raise DownloadError(f"{out}: not a folder; give --out a folder (new or this corpus's)")
        done = _done(out, name, [s.name for s in spec.files], checksums)
        if done is not None:
            return {**done, "already": True}
        return _run(spec, name, out, mirror, pinned, progress, keep_archives, timeout, confine_hosts)
    except OSError as e:
        raise DownloadError(f"{getattr(e, 'filename', None) or out}: {e.strerror or e}") from None


def _run(spec: Corpus, name: str, out: Path, mirror: str, pinned: dict[str, str], progress: bool,
         keep_archives: bool, timeout: float, confine_hosts: bool) -> dict[str, Any]:
    downloads, stage = out / "downloads", out / STAGE
    downloads.mkdir(parents=True, exist_ok=True)
    for marker in (DONE, "manifest.jsonl"):  # from here until the end nothing here is complete
        (out / marker).unlink(missing_ok=True)
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    hosts = tuple(spec.hosts) + ((str(urllib.parse.urlsplit(mirror).hostname),) if mirror else ())
    bound = int(MARGIN * spec.unpacked_mb * MB) + CHUNK
    files, written = [], 0
    for src in spec.files:
        url = f"{mirror.rstrip('/')}/{src.name}" if mirror else src.url
        dest = downloads / src.name
        policy = Policy(max_bytes=int(MARGIN * src.mb * MB) + CHUNK, timeout=timeout,
                        hosts=hosts if confine_hosts else ())
        if dest.is_file() and dest.stat().st_size > policy.max_bytes:
            dest.unlink()
        fetched = fetch(url, dest, policy, progress) if not dest.is_file() else 0
        sums = verify(dest, pinned[src.name])
        check_kind(dest, src.kind)
        files.append({"file": src.name, "url": url, "bytes": dest.stat().st_size, "fetched": fetched, **sums,
                      "checked": pinned[src.name].split(":")[0] if pinned[src.name] else "no published checksum"})
        if src.kind in ("tar", "zip"):
            try:
                written = unpack(dest, src.kind, stage, bound, written)
            except DownloadError:
                dest.unlink()  # refused: the next run fetches it again
                shutil.rmtree(stage, ignore_errors=True)  # and nothing of it stays in the folder
                raise
    report = spec.make_manifest(stage, downloads)
    _commit(stage, out)
    result = {"corpus": name, "out": str(out), "manifest": str(out / "manifest.jsonl"), "kept": report.kept,
              "skipped": dict(report.reasons), "unpacked_bytes": written, "files": files}
    if not keep_archives:
        for src in spec.files:
            if src.kind in ("tar", "zip"):
                (downloads / src.name).unlink(missing_ok=True)
    tmp = out / (DONE + ".tmp")
    tmp.write_text(json.dumps(result) + "\n")
    os.replace(tmp, out / DONE)  # last: the marker of a complete download
    return result
