"""`speechscale data download NAME --out DIR`: a public corpus fetched, checked, unpacked and imported into
DIR/manifest.jsonl, ready for a recipe's `data.root=DIR`.

    speechscale data download yesno --out data/yesno
    speechscale train --config yesno data.root=data/yesno

Each file is downloaded to DIR/downloads/FILE.part; an interrupted download continues from where it stopped
(an HTTP Range request; a server that ignores it sends the whole file again). The finished file is checked
against the checksum published for it (md5 or sha256) before anything is unpacked; a mismatch removes it. A
corpus without a published checksum says so and prints the sha256 it computed (pin it with --checksum).
Archives are unpacked with tarfile's `data` filter (no links out of DIR, no absolute paths, no devices) or a
zip whose every member stays inside DIR. `--mirror URL` fetches every file from URL/FILE instead (a local
copy, a proxy, the tests' server).
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .manifest import ManifestError

CHUNK = 1 << 16


class DownloadError(ManifestError):
    """A download, checksum or archive that failed (one line; what to do is in it)."""


@dataclass
class Source:
    """One file of a corpus: where it is published and the checksum published with it ('' = none)."""

    url: str
    checksum: str = ""         # "md5:HEX" or "sha256:HEX"

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass
class Corpus:
    """A downloadable corpus: its files, the licence, and how the unpacked files become a manifest."""

    about: str
    licence: str
    files: list[Source]
    make_manifest: Callable[[Path], Any]  # DIR -> writes DIR/manifest.jsonl, returns a SkipReport
    size_mb: float = 0.0
    notes: list[str] = field(default_factory=list)


def _yesno(out: Path) -> Any:
    """waves_yesno/*.wav, named by their 8 words (0 = no, 1 = yes), sorted: Kaldi's split is the first 31."""
    from .audio import audio_info
    from .manifest import SkipReport, write_manifest

    report, records = SkipReport(str(out / "waves_yesno")), []
    for n, wav in enumerate(sorted((out / "waves_yesno").glob("*.wav")), 1):
        words = wav.stem.split("_")
        if len(words) != 8 or set(words) - {"0", "1"}:
            report.skip(n, "not a yesno file name", wav.name)
            continue
        records.append({"audio_filepath": os.path.relpath(wav, out), "duration": round(audio_info(wav)[0], 3),
                        "text": " ".join("yes" if w == "1" else "no" for w in words)})
    if not records:
        raise DownloadError(f"{out / 'waves_yesno'}: no yesno recordings in the archive")
    report.kept = len(records)
    write_manifest(out / "manifest.jsonl", records)
    return report


def _ldc93s1(out: Path) -> Any:
    """LDC93S1.wav and its transcript LDC93S1.txt ('START END TEXT')."""
    from .audio import audio_info
    from .manifest import SkipReport, write_manifest

    text = (out / "downloads" / "LDC93S1.txt").read_text(encoding="utf-8").split(maxsplit=2)
    if len(text) != 3:
        raise DownloadError(f"{out / 'downloads' / 'LDC93S1.txt'}: expected 'START END TEXT'")
    wav = out / "LDC93S1.wav"
    shutil.copyfile(out / "downloads" / "LDC93S1.wav", wav)
    write_manifest(out / "manifest.jsonl", [{"audio_filepath": wav.name, "duration": round(audio_info(wav)[0], 4),
                                            "text": text[2].strip()}])
    report = SkipReport(str(out))
    report.kept = 1
    return report


def _imported(kind: str, folder: str) -> Callable[[Path], Any]:
    """The `speechscale data import KIND` importer over the unpacked FOLDER (a glob under DIR)."""
    def make(out: Path) -> Any:
        from .importers import import_corpus

        found = sorted(out.glob(folder))
        if not found:
            raise DownloadError(f"{out}: the archive did not hold {folder}")
        return import_corpus(kind, found[0], out)
    return make


OPENSLR = "https://www.openslr.org/resources"
# sha256 of the LibriSpeech archives as torchaudio's LIBRISPEECH dataset pins them
LIBRISPEECH = {"dev-clean": "76f87d090650617fca0cac8f88b9416e0ebf80350acb97b343a85fa903728ab3",
               "dev-other": "12661c48e8c3fe1de2c1caa4c3e135193bfb1811584f11f569dd12645aa84365",
               "test-clean": "39fde525e59672dc6d1551919b1478f724438a95aa55f874b576be21967e6c23",
               "test-other": "d09c181bba5cf717b3dee7d4d592af11a3ee3a09e08ae025c5506f6ebe961c29",
               "train-clean-100": "d4ddd1d5a6ab303066f14971d768ee43278a5f2a0aa43dc716b0e64ecbbbf6e2"}
LIBRISPEECH_MB = {"dev-clean": 337, "dev-other": 314, "test-clean": 346, "test-other": 328, "train-clean-100": 6387}

CORPORA: dict[str, Corpus] = {
    "yesno": Corpus("Kaldi yesno: 60 files of 8 Hebrew yes/no words, one speaker, 8 kHz", "CC BY 4.0 (OpenSLR 1)",
                    [Source(f"{OPENSLR}/1/waves_yesno.tar.gz", "md5:962ff6e904d2df1126132ecec6978786")], _yesno, 4.5),
    "fsdd": Corpus("Free Spoken Digit Dataset v1.0.10: 3,000 digit words, 6 speakers, 8 kHz", "CC BY-SA 4.0",
                   [Source("https://github.com/Jakobovski/free-spoken-digit-dataset/archive/refs/tags/v1.0.10.zip")],
                   _imported("fsdd", "free-spoken-digit-dataset-*"), 17,
                   ["GitHub builds this archive on request and publishes no checksum"]),
    "ldc93s1": Corpus("LDC93S1: the free TIMIT sample, one 16 kHz utterance", "LDC free sample",
                      [Source("https://catalog.ldc.upenn.edu/desc/addenda/LDC93S1.wav"),
                       Source("https://catalog.ldc.upenn.edu/desc/addenda/LDC93S1.txt")], _ldc93s1, 0.1,
                      ["the LDC publishes no checksum for it"]),
    **{f"librispeech-{s}": Corpus(f"LibriSpeech {s} (read English audiobooks, 16 kHz flac)", "CC BY 4.0 (OpenSLR 12)",
                                  [Source(f"{OPENSLR}/12/{s}.tar.gz", f"sha256:{h}")],
                                  _imported("librispeech", f"LibriSpeech/{s}"), LIBRISPEECH_MB[s])
       for s, h in LIBRISPEECH.items()},
}
# corpora whose licence gives no plain download URL: what to do instead
NO_URL = {"commonvoice": "Common Voice is downloaded from commonvoice.mozilla.org after accepting its terms (no "
                         "direct URL); download it there, then `speechscale data import commonvoice DIR --out OUT`"}


def corpus(name: str) -> Corpus:
    """The catalog entry `name`; DownloadError naming the known ones otherwise."""
    if name in NO_URL:
        raise DownloadError(NO_URL[name])
    if name not in CORPORA:
        raise DownloadError(f"unknown corpus {name!r}; choose one of {', '.join(CORPORA)}")
    return CORPORA[name]


def file_digest(path: Path, algo: str) -> str:
    """The hex digest of a file with hashlib's `algo`."""
    h = hashlib.new(algo)
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def fetch(url: str, dest: Path, progress: bool = True, attempts: int = 4, timeout: float = 30.0) -> int:
    """Download `url` to `dest`, continuing DEST.part where an earlier try stopped; returns the bytes fetched
    by this call. A cut connection is retried (from where it stopped) up to `attempts` times."""
    from tqdm import tqdm

    part = dest.with_name(dest.name + ".part")
    fetched, last_error = 0, None
    for _ in range(attempts):
        have = part.stat().st_size if part.exists() else 0
        req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                if have and resp.status != 206:  # the server sent the whole file: start over
                    have = 0
                total = resp.headers.get("Content-Length")
                total = int(total) + have if total is not None else None
                with part.open("ab" if have else "wb") as f, \
                        tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=dest.name,
                             disable=not (progress and sys.stderr.isatty()), leave=False) as bar:
                    while block := resp.read(CHUNK):
                        f.write(block)
                        fetched += len(block)
                        bar.update(len(block))
                if total is not None and part.stat().st_size < total:
                    raise ConnectionError(f"connection closed at {part.stat().st_size} of {total} bytes")
            os.replace(part, dest)
            return fetched
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:  # asked past the end: the part file is complete or stale
                part.unlink()
                continue
            raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
        except (OSError, http.client.HTTPException) as e:  # URLError, a reset or cut connection, a timeout
            last_error = e
    raise DownloadError(f"{url}: download failed after {attempts} tries ({last_error}); run the command again "
                        f"to continue from {part.stat().st_size if part.exists() else 0} bytes")


def verify(path: Path, checksum: str) -> str:
    """The file's sha256; DownloadError (and the file removed) when `checksum` (ALGO:HEX) does not match."""
    if checksum:
        algo, _, want = checksum.partition(":")
        if algo not in ("md5", "sha256") or not want:
            raise DownloadError(f"checksum {checksum!r}: expected md5:HEX or sha256:HEX")
        got = file_digest(path, algo)
        if got != want.lower():
            path.unlink()
            raise DownloadError(f"{path.name}: {algo} is {got}, expected {want}: the download is corrupt or not "
                                f"the published file; it was removed (run the command again)")
    return file_digest(path, "sha256")


def unpack(archive: Path, out: Path) -> None:
    """Unpack a .tar(.gz) or .zip archive into `out`, refusing members that would land outside it."""
    try:
        if tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tar:
                tar.extractall(out, filter="data")
        elif zipfile.is_zipfile(archive):
            root = out.resolve()
            with zipfile.ZipFile(archive) as z:
                for member in z.namelist():
                    if not (root / member).resolve().is_relative_to(root):
                        raise DownloadError(f"{archive.name}: member {member!r} would be written outside {out}")
                z.extractall(out)
        else:
            raise DownloadError(f"{archive.name}: not a tar or zip archive")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise DownloadError(f"{archive.name}: a corrupt archive ({type(e).__name__}: {e})") from None


def download(name: str, out: str | Path, mirror: str = "", checksums: dict[str, str] | None = None,
             progress: bool = True, keep_archives: bool = False) -> dict[str, Any]:
    """Download corpus `name` into `out`, check, unpack and import it; returns what was done (JSON-able)."""
    spec = corpus(name)
    out = Path(out)
    downloads = out / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    done = out / ".downloaded.json"
    if done.is_file() and (out / "manifest.jsonl").is_file():
        return {**json.loads(done.read_text()), "already": True}
    files = []
    for src in spec.files:
        url = f"{mirror.rstrip('/')}/{src.name}" if mirror else src.url
        dest = downloads / src.name
        fetched = fetch(url, dest, progress) if not dest.is_file() else 0
        checksum = (checksums or {}).get(src.name, src.checksum)
        sha256 = verify(dest, checksum)
        files.append({"file": src.name, "url": url, "bytes": dest.stat().st_size, "fetched": fetched,
                      "sha256": sha256, "checked": checksum.split(":")[0] if checksum else "no published checksum"})
        if tarfile.is_tarfile(dest) or zipfile.is_zipfile(dest):
            unpack(dest, out)
    report = spec.make_manifest(out)
    result = {"corpus": name, "out": str(out), "manifest": str(out / "manifest.jsonl"), "kept": report.kept,
              "skipped": dict(report.reasons), "files": files}
    if not keep_archives:
        for f in files:
            if f["file"].endswith((".tar.gz", ".tgz", ".tar", ".zip")):
                (downloads / f["file"]).unlink(missing_ok=True)
    done.write_text(json.dumps(result) + "\n")
    return result
