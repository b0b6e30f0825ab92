"""The corpora `speechscale data download` knows: each file's URL, published checksum, kind and size, the corpus's
unpacked size (the bounds a download is held to), the hosts it is served from, and how its unpacked files become a
manifest."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..storage.fetch import DownloadError  # noqa: F401 - the catalog's users name it from here

MB = 1 << 20  # the catalog's sizes are MiB


@dataclass
class Source:
    """One file of a corpus: where it is published, the checksum published with it ('' = none), what it is
    (tar, zip, wav or text) and its size in MB (the upper end of what it is published as)."""

    url: str
    checksum: str = ""         # "md5:HEX" or "sha256:HEX"
    kind: str = "tar"
    mb: float = 0.0

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass
class Corpus:
    """A downloadable corpus: its files, the licence, its unpacked size in MB, the hosts that serve it, and how
    the unpacked files become a manifest (`make_manifest(stage, downloads)`: writes STAGE/manifest.jsonl, returns
    a SkipReport)."""

    about: str
    licence: str
    files: list[Source]
    make_manifest: Callable[[Path, Path], Any]
    unpacked_mb: float
    hosts: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def download_mb(self) -> float:
        """What its files weigh."""
        return round(sum(s.mb for s in self.files), 2)

    @property
    def size_mb(self) -> float:
        """Disk the download needs at its peak: the files and what they unpack to."""
        return round(self.download_mb + self.unpacked_mb, 2)


def _yesno(stage: Path, downloads: Path) -> Any:
    """waves_yesno/*.wav, named by their 8 words (0 = no, 1 = yes), sorted: Kaldi's split is the first 31. A file
    named otherwise or that does not read as audio is skipped and counted."""
    from .audio import audio_info
    from .manifest import SkipReport, write_manifest

    report, records = SkipReport(str(stage / "waves_yesno")), []
    for n, wav in enumerate(sorted((stage / "waves_yesno").glob("*.wav")), 1):
        words = wav.stem.split("_")
        if len(words) != 8 or set(words) - {"0", "1"}:
            report.skip(n, "not a yesno file name", wav.name)
            continue
        try:
            duration = audio_info(wav)[0]
        except Exception as e:  # soundfile raises several types for corrupt headers
            report.skip(n, "unreadable audio", f"{wav.name} ({type(e).__name__})")
            continue
        records.append({"audio_filepath": os.path.relpath(wav, stage), "duration": round(duration, 3),
                        "text": " ".join("yes" if w == "1" else "no" for w in words)})
    if not records:
        raise DownloadError(f"{stage.parent}: no readable yesno recordings in the archive")
    report.kept = len(records)
    write_manifest(stage / "manifest.jsonl", records)
    return report


def _ldc93s1(stage: Path, downloads: Path) -> Any:
    """LDC93S1.wav and its transcript LDC93S1.txt ('START END TEXT')."""
    from .audio import audio_info
    from .manifest import SkipReport, write_manifest

    try:
        text = (downloads / "LDC93S1.txt").read_text(encoding="utf-8").split(maxsplit=2)
    except UnicodeDecodeError:
        text = []
    if len(text) != 3 or not (text[0].isdigit() and text[1].isdigit()):
        raise DownloadError(f"{downloads / 'LDC93S1.txt'}: expected 'START END TEXT'; removed, run the command again")
    wav = stage / "LDC93S1.wav"
    shutil.copyfile(downloads / "LDC93S1.wav", wav)
    try:
        duration = audio_info(wav)[0]
    except Exception:  # soundfile raises several types for corrupt headers
        (downloads / "LDC93S1.wav").unlink()
        raise DownloadError(f"{downloads / 'LDC93S1.wav'}: not readable audio; removed, run the command again") from None
    write_manifest(stage / "manifest.jsonl", [{"audio_filepath": wav.name, "duration": round(duration, 4),
                                              "text": text[2].strip()}])
    report = SkipReport(str(stage.parent))
    report.kept = 1
    return report


def _imported(kind: str, folder: str) -> Callable[[Path, Path], Any]:
    """The `speechscale data import KIND` importer over the unpacked FOLDER (a glob under the stage)."""
    def make(stage: Path, downloads: Path) -> Any:
        from .importers import import_corpus

        found = sorted(stage.glob(folder))
        if not found:
            raise DownloadError(f"{stage.parent}: the archive did not hold {folder}")
        return import_corpus(kind, found[0], stage)
    return make


OPENSLR = "https://www.openslr.org/resources"
OPENSLR_HOSTS = ("www.openslr.org", "openslr.org", "us.openslr.org", "openslr.elda.org", "openslr.magicdatatech.com",
                 "openslr.trmal.net")
# sha256 of the LibriSpeech archives as torchaudio's LIBRISPEECH dataset pins them
LIBRISPEECH = {"dev-clean": "76f87d090650617fca0cac8f88b9416e0ebf80350acb97b343a85fa903728ab3",
               "dev-other": "12661c48e8c3fe1de2c1caa4c3e135193bfb1811584f11f569dd12645aa84365",
               "test-clean": "39fde525e59672dc6d1551919b1478f724438a95aa55f874b576be21967e6c23",
               "test-other": "d09c181bba5cf717b3dee7d4d592af11a3ee3a09e08ae025c5506f6ebe961c29",
               "train-clean-100": "d4ddd1d5a6ab303066f14971d768ee43278a5f2a0aa43dc716b0e64ecbbbf6e2"}
LIBRISPEECH_MB = {"dev-clean": 337, "dev-other": 314, "test-clean": 346, "test-other": 328, "train-clean-100": 6387}

CORPORA: dict[str, Corpus] = {
    "yesno": Corpus("Kaldi yesno: 60 files of 8 Hebrew yes/no words, one speaker, 8 kHz", "CC BY 4.0 (OpenSLR 1)",
                    [Source(f"{OPENSLR}/1/waves_yesno.tar.gz", "md5:962ff6e904d2df1126132ecec6978786", "tar", 4.5)],
                    _yesno, 6.0, OPENSLR_HOSTS),
    "fsdd": Corpus("Free Spoken Digit Dataset v1.0.10: 3,000 digit words, 6 speakers, 8 kHz", "CC BY-SA 4.0",
                   [Source("https://github.com/Jakobovski/free-spoken-digit-dataset/archive/refs/tags/v1.0.10.zip",
                           "", "zip", 22)],
                   _imported("fsdd", "free-spoken-digit-dataset-*"), 30, ("github.com", "codeload.github.com"),
                   ["GitHub builds this archive on request and publishes no checksum"]),
    "ldc93s1": Corpus("LDC93S1: the free TIMIT sample, one 16 kHz utterance", "LDC free sample",
                      [Source("https://catalog.ldc.upenn.edu/desc/addenda/LDC93S1.wav", "", "wav", 0.1),
                       Source("https://catalog.ldc.upenn.edu/desc/addenda/LDC93S1.txt", "", "text", 0.01)],
                      _ldc93s1, 0.1, ("catalog.ldc.upenn.edu",), ["the LDC publishes no checksum for it"]),
    **{f"librispeech-{s}": Corpus(f"LibriSpeech {s} (read English audiobooks, 16 kHz flac)", "CC BY 4.0 (OpenSLR 12)",
                                  [Source(f"{OPENSLR}/12/{s}.tar.gz", f"sha256:{h}", "tar", LIBRISPEECH_MB[s])],
                                  _imported("librispeech", f"LibriSpeech/{s}"), round(1.05 * LIBRISPEECH_MB[s]),
                                  OPENSLR_HOSTS)
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
