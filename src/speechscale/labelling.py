"""Pseudo-labels: untranscribed audio written out as a training manifest of a model's own transcripts, each line with
the transcript's confidence. Lines under a confidence bound go to a second file instead. A recording longer than the
longest training example asked for is cut at its pauses into segments (inference.segments), a line each with an
`offset` into it and `segment` K/N. A run appends lines as each batch is done, so an interrupted run resumes where it stopped, and
`part` splits a corpus among processes.

    >>> asr = Transcriber("runs/demo/checkpoints/best.pt")   # doctest: +SKIP
    >>> label(asr, gather(["untranscribed/"]), Path("pseudo.jsonl"), min_confidence=0.85)   # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .config import ConfigError, parse_json
from .data.audio import AudioTooLong, audio_files_under, load_audio
from .data.manifest import MAX_DURATION_S, OFFSET, check_encoding, manifest_lines
from .data.shards import is_shard_index
from .inference.segments import MIN_SPEECH, Segment, confidence, cut_at_pauses, in_speech, speech_share
from .inference.transcribe import Transcriber, transcribe_files

REJECTED_SUFFIX = ".rejected.jsonl"
REFERENCE = "reference"  # a source line's own `text`, kept under this key: how good the labels are, when it is known
CALIBRATION = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)  # the bounds the summary's table of kept share and WER shows
SEGMENT = "segment"  # "K/N": the line is segment K of the N its recording was cut into
MAX_RECORDING_S = 3 * 3600.0  # a recording cut into segments is decoded whole: at most this long
BATCH_SECONDS = 1800.0  # recordings run together hold at most about this much audio


def rejected_path(out: Path) -> Path:
    """Where the lines `out` does not take go: OUT.rejected.jsonl beside it."""
    return out.with_name(out.name.removesuffix(".jsonl") + REJECTED_SUFFIX)


@dataclass
class Sources:
    """What to label: one row per recording (`audio_filepath` absolute; a source manifest's other keys, its `text`
    as `reference`), and the source lines that could not be read."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    examples: list[str] = field(default_factory=list)


def gather(paths: list[str]) -> Sources:
    """Rows from each path: a JSONL manifest (`.jsonl`; `audio_filepath` relative to its folder, `duration` and `text`
    optional; a line with an `offset` is that segment of its recording), a folder (every audio file under it, by
    name), or an audio file. A recording (or segment) named twice is labelled once. ConfigError (one line) for a path
    that is none of these, a URL, or a shard index."""
    found = Sources()
    seen: set[tuple[str, float | None]] = set()

    def add(row: dict[str, Any]) -> None:
        if source_key(row) not in seen:
            seen.add(source_key(row))
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
            for f in audio_files_under(path):
                add({"audio_filepath": str(f.resolve())})
        elif path.suffix == ".jsonl" and path.is_file():
            _manifest_rows(path, found, add)
        elif path.is_file():
            add({"audio_filepath": str(path.resolve())})
        else:
            raise ConfigError(f"{text}: no such file or folder")
    return found


def _manifest_rows(path: Path, found: Sources, add: Callable[[dict[str, Any]], None]) -> None:
    check_encoding(path)  # a UTF-16 or binary file is one line, as every reader of a manifest says it
    for lineno, raw in manifest_lines(path):
        if raw is not None and not raw.strip():
            continue
        try:
            rec = parse_json(raw) if raw is not None else None
        except ValueError:
            rec = None
        audio = rec.get("audio_filepath") if isinstance(rec, dict) else None
        if raw is None:
            bad: str | None = "not UTF-8"
        elif not isinstance(audio, str) or not audio:
            bad = "not a JSON object with audio_filepath"
        else:
            bad = _bad_segment(rec)
        if bad:
            found.bad_lines += 1
            if len(found.examples) < 3:
                found.examples.append(f"{path}:{lineno}: {bad}")
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


def _bad_segment(rec: dict[str, Any]) -> str | None:
    """Why a manifest line's `offset` (and `duration` with it) names no segment, or None."""
    if OFFSET not in rec:
        return None
    for key in (OFFSET, "duration"):
        value = rec.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DURATION_S:
            return f"{key} {value!r} is no number of seconds"
    return None


def source_key(line: dict[str, Any]) -> tuple[str, float | None]:
    """What a row or a written line was labelled from: its recording, and the offset of the segment a source
    manifest named (None for a whole recording, also for the segments label cut it into)."""
    return line["audio_filepath"], None if SEGMENT in line or OFFSET not in line else float(line[OFFSET])


_OWN_KEYS = ("text", "duration", "confidence", "rejected", "error", SEGMENT, REFERENCE)  # a label line says anew


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


@dataclass
class Written:
    """What files of labels already hold: sources done, and the segment offsets written of recordings cut into
    segments that are not all written yet."""

    done: set[tuple[str, float | None]] = field(default_factory=set)
    partial: dict[tuple[str, float | None], set[float]] = field(default_factory=dict)


def written(*paths: Path) -> Written:
    """What the files of labels `paths` hold (a recording cut into N segments is done when N lines of it are there,
    in either file). A last line cut short (the run was killed while writing it) is cut off its file, so that
    appending goes on from the last whole line."""
    found = Written()
    segments: dict[tuple[str, float | None], tuple[int, set[float]]] = {}
    for path in paths:
        for rec in whole_lines(path):
            if not isinstance(rec.get("audio_filepath"), str):
                continue
            key = source_key(rec)
            if SEGMENT not in rec:
                found.done.add(key)
                continue
            try:
                offset, count = segment_place(rec)
            except (KeyError, TypeError, ValueError):  # not a line label wrote: its recording counts as done
                found.done.add(key)
                continue
            segments.setdefault(key, (count, set()))[1].add(offset)
    for key, (n, offsets) in segments.items():
        if len(offsets) >= n:
            found.done.add(key)
        else:
            found.partial[key] = offsets
    return found


def segment_place(line: dict[str, Any]) -> tuple[float, int]:
    """(offset, N) of a segment line (`segment` K/N): where it lies and how many its recording was cut into.
    KeyError, TypeError or ValueError for a line that is no such segment."""
    return float(line[OFFSET]), int(str(line[SEGMENT]).split("/")[-1])


def whole_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of `path`'s whole lines; a last line without its newline is cut off the file."""
    if not path.is_file():
        return
    whole = 0  # bytes up to the end of the last whole line
    with path.open("r+b") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                f.truncate(whole)
                break
            whole += len(raw)
            rec = _record(raw.decode("utf-8", errors="replace"))
            if rec is not None:
                yield rec


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
    segmented: int = 0  # recordings cut into segments
    little_speech: int = 0  # segments under min_speech
    untimed: int = 0  # segments holding speech their transcript does not time (align)


def label(asr: Transcriber, rows: list[dict[str, Any]], out: Path, min_confidence: float = 0.0,
          max_seconds: float = 30.0, batch_size: int = 8, resume: bool = False,
          progress: Callable[[int], None] | None = None, segment: bool = True,
          min_speech: float = MIN_SPEECH) -> Counts:
    """Transcribe `rows` (gather's) with `asr` and append each to `out` (text, duration, confidence, the row's own
    keys) when its confidence is at least `min_confidence`, else to rejected_path(out) with the reason. A recording
    longer than `max_seconds` is cut at its pauses into segments of at most that, each its own line (with `segment`;
    up to MAX_RECORDING_S, past which it is rejected), or rejected without being decoded past it. A segment a source
    manifest names (an `offset`) longer than `max_seconds`, an unreadable recording, or one with no text said goes to
    the rejected file too. With `resume`, what either file already holds is skipped; without it, either file holding
    lines is a ConfigError. Files of similar length (by a manifest's `duration`) run together; `progress(1)` after
    each row."""
    rejected = rejected_path(out)
    if not resume:
        for f in (out, rejected):
            if f.is_file() and f.stat().st_size:
                raise ConfigError(f"{f} holds labels already: --resume goes on from them, or write elsewhere")
    have = written(out, rejected)
    todo = sorted((r for r in rows if source_key(r) not in have.done), key=lambda r: r.get("duration", 0.0))
    by_key = {str(i): r for i, r in enumerate(todo)}
    counts = Counts()
    too_long: set[str] = set()
    long_audio: dict[str, Any] = {}  # the waveforms of recordings to cut into segments, until they are

    def read(key: str, rate: int) -> Any:
        row = by_key[key]
        try:
            if OFFSET in row:
                return load_audio(row["audio_filepath"], rate, max_seconds, row[OFFSET], row.get("duration"))
            wav = load_audio(row["audio_filepath"], rate, MAX_RECORDING_S if segment else max_seconds)
        except AudioTooLong:
            too_long.add(key)
            raise
        if wav.shape[0] > max_seconds * rate:
            long_audio[key] = wav
        return wav

    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as keep, rejected.open("a", encoding="utf-8") as drop:
        results = transcribe_files(asr, list(by_key), batch_size, read, batch_seconds=BATCH_SECONDS)
        for n, (key, res) in enumerate(results, start=1):
            row = {k: v for k, v in by_key[key].items() if k != "duration"}
            wav = long_audio.pop(key, None)
            if wav is not None and "error" not in res and res["words"]:
                lines = _cut(asr, row, res, wav, max_seconds, min_confidence, counts,
                             have.partial.get(source_key(row), set()), min_speech)
            else:
                lines = [_line(row, res, min_confidence, key in too_long, counts)]
            for line, kept in lines:
                (keep if kept else drop).write(json.dumps(line, ensure_ascii=False) + "\n")
            if n % batch_size == 0 or n == len(by_key) or wav is not None:  # on disk before the next batch runs
                for handle in (keep, drop):
                    handle.flush()
                    os.fsync(handle.fileno())
            if progress:
                progress(1)
    counts.kept_seconds = round(counts.kept_seconds, 3)
    return counts


def _cut(asr: Transcriber, row: dict[str, Any], res: dict[str, Any], wav: Any, max_seconds: float,
         min_confidence: float, counts: Counts, written: set[float],
         min_speech: float) -> list[tuple[dict[str, Any], bool]]:
    """The lines of a long recording (`res`: its transcript) cut at its pauses, each segment decoded again alone; one
    rejected line when its words carry no times to cut at (a decoder found no CTC path of its text)."""
    if not all("start" in w for w in res["words"]):
        counts.too_long += 1
        return [({**row, "rejected": "too long", "error": "its words carry no times to cut it at"}, False)]
    words, pauses, runs = in_speech(res["words"], wav, asr.sample_rate)
    cut = with_speech(cut_at_pauses(words, res["duration"], max_seconds, pauses), runs)
    return segment_lines(row, decode_alone(asr, wav, cut), max_seconds, min_confidence, counts, written, min_speech)


def with_speech(segments: list[Segment], runs: Any, untimed: list[list[float]] = ()) -> list[Segment]:
    """`segments` with the share of each that is sound (segments.speech_share over the recording's quiet `runs`) and
    the seconds of each that the `untimed` stretches of speech ([start, end] s: align's) take."""
    for seg in segments:
        seg.speech = speech_share(seg.start, seg.end, runs)
        seg.untimed = round(sum(max(0.0, min(b, seg.end) - max(a, seg.start)) for a, b in untimed), 3)
    return segments


def segment_lines(row: dict[str, Any], segments: list[Segment], max_seconds: float, min_confidence: float,
                  counts: Counts, written: Iterable[float] = (),
                  min_speech: float = 0.0) -> list[tuple[dict[str, Any], bool]]:
    """The manifest lines of a recording's `segments` (`row`: its `audio_filepath` and keys to carry), each with
    whether it is kept (some text, at least `min_confidence`, not longer than `max_seconds`, at least `min_speech`
    of it sound where it was measured); segments whose offset `written` holds are left out. `counts` updated."""
    written = set(written)
    counts.segmented += 1
    own = {k: v for k, v in row.items() if k not in ("audio_filepath", REFERENCE)}  # a reference is the whole's
    lines = []
    for k, seg in enumerate(segments, start=1):
        if seg.start in written:
            continue
        line = {"audio_filepath": row["audio_filepath"], OFFSET: seg.start, "duration": seg.duration,
                "text": seg.text, "confidence": seg.confidence, SEGMENT: f"{k}/{len(segments)}",
                **({"speech": seg.speech} if seg.speech is not None else {}), **own}
        lines.append(_judge(line, seg, max_seconds, min_confidence, counts, min_speech))
    return lines


def decode_alone(asr: Transcriber, wav: Any, segments: list[Segment]) -> list[Segment]:
    """`segments` of the recording `wav` (T,) at the model's rate, each decoded again on its own, as training will
    hear it: its words (times in the recording) are what the model says of the segment alone, which for a model
    trained on short utterances is closer to the truth than its words in the long recording's chunks."""
    rate = asr.sample_rate
    results = asr.transcribe_batch([wav[round(s.start * rate):round(s.end * rate)] for s in segments])
    return [Segment(s.start, s.end, [{**w, **({"start": round(w["start"] + s.start, 3),
                                               "end": round(w["end"] + s.start, 3)} if "start" in w else {})}
                                     for w in res["words"]], s.speech) for s, res in zip(segments, results)]


def _judge(line: dict[str, Any], seg: Segment, max_seconds: float, min_confidence: float,
           counts: Counts, min_speech: float = 0.0) -> tuple[dict[str, Any], bool]:
    """A segment's line, kept unless it is longer than `max_seconds` (one word that long), says nothing, is under
    the confidence bound, is mostly silence (under `min_speech` sound), or holds speech its text does not time."""
    if seg.speech is not None and seg.speech < min_speech:
        counts.little_speech += 1
        return {**line, "rejected": "little speech"}, False
    if not seg.words:
        counts.empty += 1
        return {**line, "rejected": "no text"}, False
    if seg.duration > max_seconds + 1e-3:  # bounds are written in ms
        counts.too_long += 1
        return {**line, "rejected": "too long"}, False
    if seg.confidence < min_confidence:
        counts.low_confidence += 1
        return {**line, "rejected": "low confidence"}, False
    if seg.untimed:
        counts.untimed += 1
        return {**line, "rejected": "untimed speech", "untimed_s": seg.untimed}, False
    counts.kept += 1
    counts.kept_seconds += seg.duration
    return line, True


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
    from .decoding.metrics import ErrorRate

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
