"""JSONL manifests: one utterance a line with `audio_filepath`, `duration` (s) and `text`; extra keys kept. A line
with `offset` (s) is the segment of `duration` s that starts there in a longer recording (NeMo's convention).

Relative audio paths resolve against the manifest's folder. Reading validates every line; bad lines are
skipped and counted with file and line number, never raised mid-run.

    >>> entries, report = read_manifest("data/yesno/manifest.jsonl")  # doctest: +SKIP
    >>> report.summary()                                                        # doctest: +SKIP
    'yesno/manifest.jsonl: 60 utterances kept, 0 skipped'
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..config import parse_json

REQUIRED = ("audio_filepath", "duration", "text")
OFFSET = "offset"
MAX_DURATION_S = 1e6  # about 11.6 days: a line that says more (or NaN, or an infinity) is no recording's length


@dataclass
class Utterance:
    """One manifest line after validation. `text` is already normalized; `raw_text` is the original."""

    audio_path: str
    duration: float
    text: str
    raw_text: str
    line: int
    extra: dict[str, Any] = field(default_factory=dict)
    offset: float | None = None  # s: the utterance is the segment [offset, offset + duration] of its recording

    def load(self, sample_rate: int, max_seconds: float | None = None) -> Any:
        """Its audio, (T,) float32 at `sample_rate` (data.audio.load_audio; only its segment when it has an offset)."""
        from .audio import load_audio

        if self.offset is None:
            return load_audio(self.audio_path, sample_rate, max_seconds)
        return load_audio(self.audio_path, sample_rate, max_seconds, self.offset, self.duration)

    def record(self, audio_filepath: str) -> dict[str, Any]:
        """Its manifest line as written (text as written, the offset when it has one) with `audio_filepath`."""
        segment = {} if self.offset is None else {OFFSET: self.offset}
        return {"audio_filepath": audio_filepath, "duration": self.duration, **segment, "text": self.raw_text,
                **self.extra}


@dataclass
class SkipReport:
    """Counts of skipped lines by reason, with the first few (line, reason) for the summary."""

    source: str
    kept: int = 0
    reasons: Counter = field(default_factory=Counter)
    examples: list[tuple[int, str]] = field(default_factory=list)
    filtered: int = 0  # lines a filter (data.filter, data.val_filter) left out: chosen, not skipped

    def skip(self, line: int, reason: str, detail: str = "") -> None:
        self.reasons[reason] += 1
        if len(self.examples) < 5:
            self.examples.append((line, f"{reason}{': ' + detail if detail else ''}"))

    @property
    def skipped(self) -> int:
        return sum(self.reasons.values())

    def summary(self) -> str:
        """One line: kept/skipped counts and the reasons with example line numbers."""
        head = f"{self.source}: {self.kept} utterances kept, {self.skipped} skipped"
        if self.filtered:
            head += f", {self.filtered} left out by the filter"
        if not self.skipped:
            return head
        reasons = ", ".join(f"{n} {r}" for r, n in self.reasons.most_common())
        ex = "; ".join(f"line {ln}: {msg}" for ln, msg in self.examples)
        return f"{head} ({reasons}) e.g. {ex}"


class ManifestError(ValueError):
    """The manifest itself cannot be used (missing file, nothing valid in it)."""


def _matches(record: dict[str, Any], filt: dict[str, Any]) -> bool:
    for key, want in filt.items():
        have = record.get(key)
        if isinstance(want, list):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


def read_manifest(
    path: str | Path,
    normalize: Callable[[str], str] | None = None,
    oov: Callable[[str], set[str]] | None = None,
    filt: dict[str, Any] | None = None,
    min_duration: float = 0.0,
    max_duration: float = math.inf,
    check_files: bool = True,
    lines: list[int] | None = None,
) -> tuple[list[Utterance], SkipReport]:
    """Read and validate a manifest. Returns the kept utterances and a report of what was skipped.

    `lines` = [start] or [start, stop] selects records by their 0-based position among non-empty lines
    (as a Python slice), before validation, so a split stays the same whatever is skipped.
    """
    report = SkipReport(source=str(path))
    out = list(iter_manifest(path, report, normalize=normalize, oov=oov, filt=filt, min_duration=min_duration,
                             max_duration=max_duration, check_files=check_files, lines=lines))
    return out, report


def iter_manifest(path: str | Path, report: SkipReport, **select: Any) -> Iterator[Utterance]:
    """`read_manifest`'s utterances one at a time, as the file is read (a corpus of any size in constant memory);
    `select`: read_manifest's keyword arguments; `report` counts what was kept and skipped as they go.
    ManifestError before the first when the file is missing."""
    if "://" in str(path) and not str(path).startswith("file://"):
        raise ManifestError(f"{path}: a JSONL manifest is read from a local file; a corpus on object storage is read "
                            f"from tar shards there (speechscale data shard MANIFEST --out URL, or data index URL)")
    path = Path(str(path).removeprefix("file://"))
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.jsonl"))[:3]
        raise ManifestError(f"{path}: a folder, not a JSONL manifest" + (f" (one of its files? {', '.join(inside)})"
                                                                         if inside else ""))
    if not path.is_file():
        raise ManifestError(f"manifest not found: {path}")
    check_encoding(path)
    return _utterances(path, report, **select)


def check_encoding(path: Path) -> None:
    """ManifestError in one line when the file at `path` is not UTF-8 text to read line by line: JSON lines in UTF-16
    (named so, with how to convert them), or another binary file (NUL bytes in its first 8 KiB). Every reader of a
    manifest calls it before its first line."""
    with path.open("rb") as f:
        head = f.read(8192)
    if b"\x00" in head:
        if any(head[:len(head) // 2 * 2].decode(code, "replace").lstrip("\ufeff \r\n").startswith("{")
               for code in ("utf-16-le", "utf-16-be")):  # JSON lines in UTF-16
            raise ManifestError(f"{path}: not a UTF-8 JSONL manifest (UTF-16?); convert it, e.g. iconv -f utf-16 -t "
                                f"utf-8 {path.name}")
        raise ManifestError(f"{path}: not a JSONL manifest: it holds NUL bytes (an audio or other binary file?)")


def manifest_lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """(line number, text) for each line of the local JSONL file `path` as it is read, a UTF-8 byte-order mark
    dropped; the text is None for a line that is not UTF-8 (a Latin-1 file's accents would otherwise read as
    U+FFFD and change the words)."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield lineno, None
                continue
            yield lineno, text.removeprefix("\ufeff") if lineno == 1 else text


def _utterances(path: Path, report: SkipReport, normalize: Callable[[str], str] | None = None,
                oov: Callable[[str], set[str]] | None = None, filt: dict[str, Any] | None = None,
                min_duration: float = 0.0, max_duration: float = math.inf, check_files: bool = True,
                lines: list[int] | None = None) -> Iterator[Utterance]:
    start = lines[0] if lines else 0
    stop = lines[1] if lines and len(lines) > 1 else math.inf
    base = path.parent
    position = -1
    for lineno, raw in manifest_lines(path):
        if raw is not None and not raw.strip():
            continue
        position += 1
        if position < start:
            continue
        if position >= stop:
            break
        if raw is None:
            report.skip(lineno, "not UTF-8", f"convert the file, e.g. iconv -f latin1 -t utf-8 {path.name}")
            continue
        try:
            rec = parse_json(raw)
        except ValueError:
            report.skip(lineno, "malformed JSON")
            continue
        if not isinstance(rec, dict):
            report.skip(lineno, "malformed JSON", "not an object")
            continue
        missing = [k for k in REQUIRED if k not in rec]
        if missing:
            report.skip(lineno, "missing key", ",".join(missing))
            continue
        if filt and not _matches(rec, filt):
            report.filtered += 1
            continue
        try:
            duration = float(rec["duration"])
        except (TypeError, ValueError):
            report.skip(lineno, "bad duration", repr(rec["duration"]))
            continue
        if not 0 <= duration <= MAX_DURATION_S or duration < min_duration or duration > max_duration:
            report.skip(lineno, "duration out of range", f"{duration}s")
            continue
        offset = None
        if OFFSET in rec:
            try:
                offset = float(rec[OFFSET]) if not isinstance(rec[OFFSET], bool) else math.nan
            except (TypeError, ValueError):
                offset = math.nan
            if not 0 <= offset <= MAX_DURATION_S:
                report.skip(lineno, "bad offset", repr(rec[OFFSET]))
                continue
        raw_text = rec["text"]
        if not isinstance(raw_text, str) or not raw_text.strip():
            report.skip(lineno, "empty text")
            continue
        text = normalize(raw_text) if normalize else raw_text
        if not text:
            report.skip(lineno, "empty text", "after normalization")
            continue
        bad = oov(text) if oov else set()
        if bad:
            report.skip(lineno, "characters outside the vocabulary", repr("".join(sorted(bad))))
            continue
        audio = Path(str(rec["audio_filepath"]))
        audio = audio if audio.is_absolute() else base / audio
        if check_files and not audio.is_file():
            report.skip(lineno, "missing audio", str(audio))
            continue
        extra = {k: v for k, v in rec.items() if k not in REQUIRED and k != OFFSET}
        report.kept += 1
        yield Utterance(str(audio), duration, text, raw_text, lineno, extra, offset)


def write_manifest(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Write records as JSONL (paths are written as given)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
