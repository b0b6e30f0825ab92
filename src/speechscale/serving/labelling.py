"""Pseudo-labels: untranscribed audio written out as a training manifest of a model's own transcripts, each line with
the transcript's confidence. Lines under a confidence bound go to a second file instead. A run appends a line as each
batch is done, so an interrupted run resumes where it stopped, and `part` splits a corpus among processes.

    >>> asr = Transcriber("runs/demo/checkpoints/best.pt")   # doctest: +SKIP
    >>> label(asr, gather(["untranscribed/"]), Path("pseudo.jsonl"), min_confidence=0.85)   # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..config import ConfigError, parse_json
from ..data.audio import AudioTooLong, load_audio
from ..data.shards import AUDIO_EXTENSIONS, is_shard_index
from .transcribe import Transcriber, transcribe_files

REJECTED_SUFFIX = ".rejected.jsonl"
REFERENCE = "reference"  # a source line's own `text`, kept under this key: how good the labels are, when it is known
CALIBRATION = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)  # the bounds the summary's table of kept share and WER shows


def rejected_path(out: Path) -> Path:
    """Where the lines `out` does not take go: OUT.rejected.jsonl beside it."""
    return out.with_name(out.name.removesuffix(".jsonl") + REJECTED_SUFFIX)


def confidence(words: list[dict[str, Any]]) -> float:
    """A transcript's confidence: the mean of its words' (each the mean probability of the CTC path over the word's
    frames); 0 without words."""
    scores = [w["confidence"] for w in words if "confidence" in w]
    return round(sum(scores) / len(scores), 4) if scores else 0.0


@dataclass
class Sources:
    """What to label: one row per recording (`audio_filepath` absolute; a source manifest's other keys, its `text`
    as `reference`), and the source lines that could not be read."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    examples: list[str] = field(default_factory=list)


def gather(paths: list[str]) -> Sources:
    """Rows from each path: a JSONL manifest (`.jsonl`; `audio_filepath` relative to its folder, `duration` and `text`
    optional), a folder (every audio file under it, by name), or an audio file. A recording named twice is labelled
    once. ConfigError (one line) for a path that is none of these, a URL, or a shard index."""
    found = Sources()
    seen: set[str] = set()

    def add(row: dict[str, Any]) -> None:
        if row["audio_filepath"] not in seen:
            seen.add(row["audio_filepath"])
            found.rows.append(row)

    for text in paths:
        if "://" in text:
            raise ConfigError(f"{text}: label reads local files (a manifest, a folder, audio files), as training "
                              f"reads the manifest it writes")
        path = Path(text)
        if is_shard_index(text):
            raise ConfigError(f"{text}: a shard index; the manifest label writes names each recording's file, so give "
                              f"the manifest or folder the shards were made from")
        if path.is_dir():
            for f in sorted(p for p in path.rglob("*") if p.suffix[1:].lower() in AUDIO_EXTENSIONS and p.is_file()):
                add({"audio_filepath": str(f.resolve())})
        elif path.suffix == ".jsonl" and path.is_file():
            _manifest_rows(path, found, add)
        elif path.is_file():
            add({"audio_filepath": str(path.resolve())})
        else:
            raise ConfigError(f"{text}: no such file or folder")
    return found


def _manifest_rows(path: Path, found: Sources, add: Callable[[dict[str, Any]], None]) -> None:
    with path.open("r", encoding="utf-8-sig", errors="replace") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                rec = parse_json(raw)
            except ValueError:
                rec = None
            audio = rec.get("audio_filepath") if isinstance(rec, dict) else None
            if not isinstance(audio, str) or not audio:
                found.bad_lines += 1
                if len(found.examples) < 3:
                    found.examples.append(f"{path}:{lineno}: not a JSON object with audio_filepath")
                continue
            row = {k: v for k, v in rec.items() if k not in _OWN_KEYS}
            row["audio_filepath"] = str((path.parent / audio).resolve())
            # a line label wrote (it has a confidence) keeps its reference; another line's text is its reference
            ref = rec.get(REFERENCE) if "confidence" in rec else rec.get("text")
            if isinstance(ref, str) and ref.strip():
                row[REFERENCE] = ref
            if isinstance(rec.get("duration"), (int, float)):
                row["duration"] = float(rec["duration"])
            add(row)


_OWN_KEYS = ("text", "duration", "confidence", "rejected", "error", REFERENCE)  # what a label line says anew


def part_of(rows: list[dict[str, Any]], part: tuple[int, int]) -> list[dict[str, Any]]:
    """Part K of N (K from 1): every N-th row from the K-th, so N processes given the same sources label all of
    them once between them."""
    k, n = part
    return rows[k - 1::n]


def parse_part(text: str) -> tuple[int, int]:
    """"K/N" -> (K, N), 1 <= K <= N; ValueError otherwise."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"{text!r}: a part is K/N, e.g. 1/4") from None
    if not 1 <= k <= n:
        raise ValueError(f"{text!r}: K must be between 1 and N")
    return k, n


def written_audio(path: Path) -> set[str]:
    """The recordings a file of labels already holds. A last line cut short (the run was killed while writing it) is
    cut off the file, so that appending goes on from the last whole line."""
    done: set[str] = set()
    if not path.is_file():
        return done
    whole = 0  # bytes up to the end of the last whole line
    with path.open("r+b") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                f.truncate(whole)
                break
            whole += len(raw)
            rec = _record(raw.decode("utf-8", errors="replace"))
            if rec is not None and isinstance(rec.get("audio_filepath"), str):
                done.add(rec["audio_filepath"])
    return done


def _record(raw: str) -> dict[str, Any] | None:
    try:
        rec = parse_json(raw)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


@dataclass
class Counts:
    """What one run did (resumed lines not counted)."""

    kept: int = 0
    low_confidence: int = 0
    empty: int = 0
    too_long: int = 0
    unreadable: int = 0
    kept_seconds: float = 0.0


def label(asr: Transcriber, rows: list[dict[str, Any]], out: Path, min_confidence: float = 0.0,
          max_seconds: float = 30.0, batch_size: int = 8, resume: bool = False,
          progress: Callable[[int], None] | None = None) -> Counts:
    """Transcribe `rows` (gather's) with `asr` and append each to `out` (text, duration, confidence, the row's own
    keys) when its confidence is at least `min_confidence`, else to rejected_path(out) with the reason. A recording
    longer than `max_seconds`, unreadable, or with no text said goes there too. With `resume`, rows either file
    already holds are skipped; without it, either file holding lines is a ConfigError. Files of similar length (by
    a manifest's `duration`) run together; `progress(1)` after each recording."""
    rejected = rejected_path(out)
    if not resume:
        for f in (out, rejected):
            if f.is_file() and f.stat().st_size:
                raise ConfigError(f"{f} holds labels already: --resume goes on from them, or write elsewhere")
    done = written_audio(out) | written_audio(rejected)
    todo = sorted((r for r in rows if r["audio_filepath"] not in done), key=lambda r: r.get("duration", 0.0))
    by_audio = {r["audio_filepath"]: r for r in todo}
    counts = Counts()
    too_long: set[str] = set()

    def read(f: str, rate: int) -> Any:
        try:
            return load_audio(f, rate, max_seconds)
        except AudioTooLong:
            too_long.add(f)
            raise

    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as keep, rejected.open("a", encoding="utf-8") as drop:
        for n, (f, res) in enumerate(transcribe_files(asr, list(by_audio), batch_size, read), start=1):
            row = {k: v for k, v in by_audio[f].items() if k != "duration"}
            line, kept = _line(row, res, min_confidence, f in too_long, counts)
            (keep if kept else drop).write(json.dumps(line, ensure_ascii=False) + "\n")
            if n % batch_size == 0 or n == len(by_audio):  # a batch's lines on disk before the next batch runs
                for handle in (keep, drop):
                    handle.flush()
                    os.fsync(handle.fileno())
            if progress:
                progress(1)
    return counts


def _line(row: dict[str, Any], res: dict[str, Any], min_confidence: float, too_long: bool,
          counts: Counts) -> tuple[dict[str, Any], bool]:
    """The line one result writes, and whether it is kept; `counts` updated."""
    if "error" in res:
        counts.too_long += too_long
        counts.unreadable += not too_long
        return {**row, "rejected": "too long" if too_long else "unreadable", "error": res["error"]}, False
    conf = confidence(res["words"])
    line = {"audio_filepath": row["audio_filepath"], "duration": res["duration"], "text": res["text"],
            "confidence": conf, **{k: v for k, v in row.items() if k != "audio_filepath"}}
    if not res["text"]:
        counts.empty += 1
        return {**line, "rejected": "no text"}, False
    if conf < min_confidence:
        counts.low_confidence += 1
        return {**line, "rejected": "low confidence"}, False
    counts.kept += 1
    counts.kept_seconds += res["duration"]
    return line, True


def read_labels(path: Path) -> Iterator[dict[str, Any]]:
    """The lines of a labels file (whole JSON objects only), one at a time."""
    if not path.is_file():
        return
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for raw in f:
            rec = _record(raw)
            if rec is not None:
                yield rec


def summary(out: Path, normalize: Callable[[str], str]) -> dict[str, Any]:
    """The whole of `out` and its rejected file (earlier runs' lines too), read a line at a time: lines kept and
    rejected by reason, hours kept; where the sources carried references, the labels' WER kept and rejected and, for
    each bound in CALIBRATION, the share of transcribed lines it keeps and their WER (how to choose
    --min-confidence)."""
    from ..decoding.metrics import ErrorRate

    kept, seconds, reasons, scored = 0, 0.0, {}, 0
    rates = {"kept": ErrorRate(), "rejected": ErrorRate()}
    bounds = {b: [0, ErrorRate()] for b in CALIBRATION}  # lines at or over the bound, their error counts
    for name, path in (("kept", out), ("rejected", rejected_path(out))):
        for r in read_labels(path):
            if name == "kept":
                kept, seconds = kept + 1, seconds + float(r.get("duration", 0.0))
            else:
                reasons[r.get("rejected", "?")] = reasons.get(r.get("rejected", "?"), 0) + 1
            if REFERENCE not in r or "text" not in r:
                continue
            scored += 1
            pair = ([normalize(r[REFERENCE])], [r["text"]])
            rates[name].update(*pair)
            for b, at in bounds.items():
                if r["confidence"] >= b:
                    at[0] += 1
                    at[1].update(*pair)
    res: dict[str, Any] = {"out": str(out), "rejected_out": str(rejected_path(out)), "kept": kept, "rejected": reasons,
                           "kept_hours": round(seconds / 3600, 4)}
    if not scored:
        return res

    def wer(m: ErrorRate) -> float | None:
        return round(m.wer, 4) if m.words else None

    res["wer_kept"], res["wer_rejected"] = wer(rates["kept"]), wer(rates["rejected"])
    res["by_confidence"] = [{"min_confidence": b, "share": round(n / scored, 4), "wer": wer(m)}
                            for b, (n, m) in bounds.items()]
    return res
