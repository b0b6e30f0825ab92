"""Importers: an already-downloaded public corpus, in its official layout, becomes a JSONL manifest.

    speechscale data import librispeech LibriSpeech/dev-clean --out data/dev-clean
    speechscale data import commonvoice cv-corpus/en --split validated --out data/cv

Every importer yields (audio path or Span, raw transcript, extra fields); `import_corpus` reads each duration
from the file's header (no decoding; a Span's recording is read for its length once and its segment becomes a
line with an `offset`, or is cut into OUT/audio/ when its container cannot be read a segment at a time: such a
recording is decoded once for its segments in a row),
normalizes the text with the one normalizer, applies duration bounds and counts what it skipped and why.
Nothing is downloaded here.

Layouts (as the corpora ship them):
- librispeech: SPLIT/SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt ("ID TEXT" lines) beside ID.flac
- commonvoice: SPLIT.tsv (columns path, sentence, client_id) and clips/
- mls: transcripts.txt ("ID<TAB>TEXT", ID = SPEAKER_BOOK_SEGMENT) and audio/SPEAKER/BOOK/ID.flac (or .opus)
- tedlium: stm/TALK.stm ("TALK 1 SPEAKER START END <LABEL> TEXT") and sph/TALK.sph; each segment is a manifest
  line with the talk's path and an `offset`; "ignore_time_segment_in_scoring" lines are skipped
- fsdd: recordings/DIGIT_SPEAKER_INDEX.wav (the digit spelled out is the transcript)
- csv: a CSV (or TSV, semicolon- or bar-separated) file with a header naming an audio column (audio_filepath,
  path, file, wav_filename, audio, ...) and a text column (text, sentence, transcript, ...), or without a header
  (audio, text in each row); paths relative to the file, other columns kept as fields
- kaldi: a Kaldi or ESPnet data folder: wav.scp (paths, or a sph2pipe/flac/sox/ffmpeg command decoding one file,
  parsed and never run), text, and segments and utt2spk when present; a segment is a line with an `offset`, a
  picked channel is cut into OUT/audio/ as wav
- parquet: Hugging Face datasets' parquet files (a folder, searched below, or one file): an audio column of
  {bytes, path} structs, a text column (text, sentence, transcript, ...); the audio is written to OUT/audio/
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import soundfile as sf

from ..storage.files import text_lines
from .audio import SPAN_SLACK_S, AudioError, audio_info, first_line, read_audio
from .manifest import ManifestError, SkipReport
from .text import DIGIT_WORDS, TextNormalizer

SKIP = "skip"  # a reader yields (path, None, {SKIP: reason}) for a file it cannot take
DETAIL = "detail"  # ... and optionally {DETAIL: where} (else the path is named)


@dataclass(frozen=True)
class Span:
    """Seconds [start, end) of a longer recording: one utterance of a corpus that times its segments."""
    recording: Path
    start: float
    end: float
    name: str  # the file name it is cut into when its recording cannot be read a segment at a time


Row = tuple["Path | Span", "str | None", dict[str, Any]]  # audio, raw transcript (None: skipped), extra fields


class CorpusLayoutError(ManifestError):
    """A source that is not the corpus's layout (one line)."""


def librispeech(src: Path, out: Path, split: str) -> Iterator[Row]:
    for trans in sorted(src.rglob("*.trans.txt")):
        for line in text_lines(trans):
            if line.strip():
                uid, _, text = line.rstrip("\r\n").partition(" ")
                yield trans.parent / f"{uid}.flac", text, {"speaker": uid.split("-")[0], "id": uid}


def commonvoice(src: Path, out: Path, split: str) -> Iterator[Row]:
    tsv = src / f"{split or 'validated'}.tsv"
    if not tsv.is_file():
        raise CorpusLayoutError(f"{tsv}: no such file (Common Voice ships train/dev/test/validated.tsv)")
    reader = csv.DictReader(text_lines(tsv), delimiter="\t", quoting=csv.QUOTE_NONE)
    if not {"path", "sentence"} <= set(reader.fieldnames or []):
        raise CorpusLayoutError(f"{tsv}: the header needs the columns path and sentence; it has "
                                f"{', '.join(reader.fieldnames or []) or 'none'}")
    for row in reader:
        if row["path"] is None or row["sentence"] is None:  # a row with fewer cells than the header
            yield tsv, None, {SKIP: "a row without path or sentence"}
            continue
        yield src / "clips" / row["path"], row["sentence"], {"speaker": row.get("client_id") or ""}


def mls(src: Path, out: Path, split: str) -> Iterator[Row]:
    root = src / split if split else src
    if not (root / "transcripts.txt").is_file():
        raise CorpusLayoutError(f"{root}: no transcripts.txt (an MLS split folder holds it; --split train?)")
    for line in text_lines(root / "transcripts.txt"):
        if not line.strip():
            continue
        uid, _, text = line.rstrip("\r\n").partition("\t")
        parts = uid.split("_")
        if len(parts) != 3:
            yield root / uid, None, {SKIP: "an id that is not SPEAKER_BOOK_SEGMENT"}
            continue
        speaker, book, _ = parts
        folder = root / "audio" / speaker / book
        found = [folder / f"{uid}{ext}" for ext in (".flac", ".opus", ".wav") if (folder / f"{uid}{ext}").is_file()]
        audio = found[0] if found else folder / f"{uid}.flac"
        yield audio, text, {"speaker": speaker, "id": uid}


def tedlium(src: Path, out: Path, split: str) -> Iterator[Row]:
    root = src / split if split else src
    for stm in sorted((root / "stm").glob("*.stm")):
        talk = root / "sph" / f"{stm.stem}.sph"
        for n, line in enumerate(text_lines(stm)):
            fields = line.split(maxsplit=6)
            if len(fields) < 7 or fields[6].strip() == "ignore_time_segment_in_scoring":
                continue
            try:
                start, end, text = float(fields[3]), float(fields[4]), fields[6]
            except ValueError:
                start = end = float("nan")
            if not 0 <= start < end < float("inf"):
                yield stm, None, {SKIP: "no segment times START < END", DETAIL: f"{stm} line {n + 1}"}
                continue
            text = " ".join(w for w in text.split() if not w.startswith("<") and w != "{NOISE}")
            yield Span(talk, start, end, f"{stm.stem}-{n:05d}.wav"), text, {"speaker": fields[2], "talk": stm.stem}


def fsdd(src: Path, out: Path, split: str) -> Iterator[Row]:
    for wav in sorted((src / "recordings").glob("*.wav")):
        parts = wav.stem.split("_")
        if len(parts) != 3 or not (parts[0].isdigit() and len(parts[0]) == 1 and parts[2].isdigit()):
            yield wav, None, {SKIP: "not named DIGIT_SPEAKER_INDEX.wav"}
            continue
        digit, speaker, index = parts
        yield wav, DIGIT_WORDS[int(digit)], {"speaker": speaker, "split": "test" if int(index) < 5 else "train"}


CSV_AUDIO = ("audio_filepath", "path", "file", "wav_filename", "audio", "filename", "file_name", "wav", "audio_path",
             "filepath")  # the audio column's names, looked for in this order (any case)


SNIFF_LINES = 50  # rows the separator is told from


class Absolute(type(Path())):  # type: ignore[misc]
    """An audio path the source gave absolute: the manifest keeps it so (relative to the output it would break when
    the manifest moves)."""


def csv_file(src: Path, out: Path, split: str) -> Iterator[Row]:
    """A table of audio paths (relative to it) and transcripts: comma-, semicolon-, tab- or bar-separated, with a
    header naming the two columns (CSV_AUDIO, PARQUET_TEXT; any case; other columns kept as fields, named in lower
    case), or without a header when its first row's first cell is an audio file and a transcript follows. The
    separator is told from the first SNIFF_LINES rows (a .tsv file's is a tab when its first row holds one); an
    absolute audio path stays absolute in the manifest, a relative one is read from the table's folder."""
    lines = text_lines(src)
    sample = list(itertools.islice(lines, SNIFF_LINES))  # the separator from many rows, not one
    lines = itertools.chain(sample[1:], lines)
    first = sample[0] if sample else ""
    dialect: Any = csv.excel_tab if src.suffix.lower() == ".tsv" and "\t" in first else None  # the name says
    if dialect is None:
        try:
            dialect = csv.Sniffer().sniff("".join(sample), delimiters=",;\t|")
        except csv.Error:  # one column, or nothing to tell by
            dialect = csv.excel_tab if src.suffix.lower() == ".tsv" else csv.excel
    head = next(csv.reader([first], dialect), [])
    if len(head) >= 2 and head[0] and (src.parent / head[0]).is_file():  # no header: audio, then text
        rows: Iterator[dict[str, Any]] = csv.DictReader(itertools.chain([first], lines), ["audio", "text"], "more",
                                                        dialect=dialect)
        audio, text = "audio", "text"
    else:
        rows = csv.DictReader(lines, head, dialect=dialect)
        folded = {name.strip().lower(): name for name in head}
        audio = next((folded[c] for c in CSV_AUDIO if c in folded), None)
        text = next((folded[c] for c in PARQUET_TEXT if c in folded), None)
        if audio is None or text is None:
            raise CorpusLayoutError(f"{src}: the header needs an audio column ({', '.join(CSV_AUDIO)}) and a text "
                                    f"column ({', '.join(PARQUET_TEXT)}), or no header and audio, text in each row; "
                                    f"it has {', '.join(head)}")
    own = _MANIFEST_KEYS | {"offset"}  # what the manifest line sets itself
    for row in rows:
        if row.get(audio) is None or row.get(text) is None:  # a row with fewer cells than the header
            yield src, None, {SKIP: f"a row without {audio} or {text}"}
            continue
        extra = {k.strip().lower(): v for k, v in row.items() if isinstance(k, str) and k not in (audio, text)
                 and k.strip().lower() not in own and isinstance(v, str) and v.strip()}
        given = Path(row[audio].strip())
        yield (Absolute(given) if given.is_absolute() else src.parent / given), row[text], extra


def kaldi(src: Path, out: Path, split: str) -> Iterator[Row]:
    """A Kaldi (or ESPnet) data folder: wav.scp and text, with segments and utt2spk when it has them. A segment is
    a Span of its recording; a channel a wav.scp command picks is cut into OUT/audio/UTT.wav (with its segment)."""
    root = src / split if split else src
    for name in ("wav.scp", "text"):
        if not (root / name).is_file():
            raise CorpusLayoutError(f"{root}: no {name} (a Kaldi data folder holds wav.scp and text; --split a "
                                    f"subfolder?)")
    recordings = {rid: _scp_audio(value, root) for rid, value in _kaldi_table(root / "wav.scp")}
    segments = dict(_kaldi_table(root / "segments")) if (root / "segments").is_file() else None
    speakers = dict(_kaldi_table(root / "utt2spk")) if (root / "utt2spk").is_file() else {}
    cut = out / "audio"
    for utt, text in _kaldi_table(root / "text"):
        text = " ".join(w for w in text.split() if w[0] + w[-1] not in _MARKUP)  # [noise], <unk>: not words
        extra = {"id": utt, **({"speaker": speakers[utt]} if utt in speakers else {})}
        rec, start, end = utt, None, None
        if segments is not None:
            fields = segments.get(utt, "").split()
            try:
                rec, start, end = fields[0], float(fields[1]), float(fields[2])
            except (IndexError, ValueError):
                yield root / "segments", None, {SKIP: "no segment REC START END", DETAIL: f"{root / 'segments'}: {utt}"}
                continue
            if not 0 <= start < end < float("inf"):
                yield root / "segments", None, {SKIP: "no segment REC START END", DETAIL: f"{root / 'segments'}: {utt}"}
                continue
        if rec not in recordings:
            yield root / "wav.scp", None, {SKIP: "recording not in wav.scp", DETAIL: f"{utt} ({rec})"}
            continue
        path, channel, why = recordings[rec]
        if why:
            yield root / "wav.scp", None, {SKIP: why, DETAIL: f"{root / 'wav.scp'}: {rec}"}
            continue
        if start is None and channel is not None and path.is_file():
            try:
                channel = None if audio_info(path)[2] == 1 and channel == 1 else channel  # mono: the file itself
            except Exception:  # soundfile raises several types for unknown or corrupt headers: cut, and be told
                pass
        name = f"{utt.replace('/', '_')}.wav"
        if channel is None:
            yield (path if start is None else Span(path, start, end, name)), text, extra
            continue
        target = cut / name
        try:
            _cut(path, target, start, end, channel)
        except FileNotFoundError:
            yield path, text, extra  # named as a missing file
            continue
        except (ValueError, RuntimeError, sf.LibsndfileError, AudioError) as e:
            yield path, None, {SKIP: "unreadable audio", DETAIL: f"{path} ({first_line(e)})"}
            continue
        yield target, text, extra


def _kaldi_table(path: Path) -> Iterator[tuple[str, str]]:
    """(key, rest of the line) of each non-blank line of a Kaldi table file."""
    for line in text_lines(path):
        parts = line.strip().split(maxsplit=1)
        if parts:
            yield parts[0], parts[1] if len(parts) > 1 else ""


_MARKUP = {"[]", "<>", "{}"}  # a transcript token in these brackets is a Kaldi corpus's event or unknown-word tag
_DECODERS = {"sph2pipe", "flac", "sox", "ffmpeg", "cat"}  # wav.scp commands that only decode one file


def _scp_audio(value: str, root: Path) -> tuple[Path, int | None, str]:
    """(audio file, channel to keep or None for all, why it cannot be used or "") of a wav.scp entry: a path, or a
    command that decodes one file (sph2pipe, flac, sox, ffmpeg, cat) and may pick a channel. Nothing is run."""
    if not value.endswith("|"):
        if re.search(r"\.ark:\d+$", value):
            return Path(value), None, "a Kaldi archive offset (ark:), not an audio file"
        return _kaldi_path(value, root), None, ""
    try:
        tokens = shlex.split(value[:-1])
    except ValueError:
        return Path(value), None, "a command that cannot be parsed"
    program = Path(tokens[0]).name if tokens else ""
    if program not in _DECODERS:
        return Path(value), None, f"a command speechscale does not run ({program or 'empty'})"
    channel, files = None, []
    rest = iter(tokens[1:])
    for token in rest:
        if (program, token) in (("sph2pipe", "-c"), ("sox", "remix")):
            picked = next(rest, "")
            if not picked.isdigit() or int(picked) < 1:
                return Path(value), None, f"{program} {token} {picked}: only one channel by number is understood"
            channel = int(picked)
        elif program == "sph2pipe" and token == "-t":
            return Path(value), None, "sph2pipe -t (a time range): list it in segments instead"
        elif program == "sph2pipe" and token == "-f":
            next(rest, None)
        elif program == "sox" and token in ("trim", "speed", "tempo", "pad", "reverse"):
            return Path(value), None, f"sox {token}: an effect that changes the audio's timing"
        elif program == "ffmpeg" and token in ("-ss", "-t", "-to", "-af", "-filter:a", "-filter_complex", "-map_channel"):
            return Path(value), None, f"ffmpeg {token}: an option that cuts or filters the audio"
        elif program == "ffmpeg" and token == "-i":
            files.append(next(rest, ""))
        elif program != "ffmpeg" and not token.startswith("-") and _kaldi_path(token, root).is_file():
            files.append(token)
    if len(files) != 1:
        return Path(value), None, f"a {program} command without exactly one audio file that exists"
    return _kaldi_path(files[0], root), channel, ""


def _kaldi_path(name: str, root: Path) -> Path:
    """A wav.scp path: as given when absolute; else relative to the current folder, the data folder or the two
    above it (a recipe's data/train names its audio from the recipe's folder), the first that exists."""
    path = Path(name)
    if path.is_absolute():
        return path
    for base in (Path.cwd(), root, root.parent, root.parent.parent):
        if (base / path).is_file():
            return base / path
    return path


_decoded = lru_cache(maxsize=1)(read_audio)  # the last container decoded whole, (T, C) and rate; import_corpus clears it


def _cut(path: Path, target: Path, start: float | None, end: float | None, channel: int | None) -> None:
    """Write seconds [start, end) of `path` (all of it when start is None), channel `channel` (1-based; None: every
    channel), to `target` as wav."""
    if not path.is_file():
        raise FileNotFoundError(path)
    try:
        rate = sf.info(str(path)).samplerate
        frames = (None, None) if start is None else (int(start * rate), int(end * rate))
        data, rate = sf.read(str(path), start=frames[0] or 0, stop=frames[1], always_2d=True)  # (T, C)
    except sf.LibsndfileError:  # a container soundfile does not read (data.media): decoded once for its segments
        data, rate = _decoded(path)
        if start is not None:
            data = data[int(start * rate):int(end * rate)]
    if channel is not None:
        if channel > data.shape[1]:
            raise ValueError(f"no channel {channel} (it has {data.shape[1]})")
        data = data[:, channel - 1:channel]
    if data.shape[0] == 0:
        raise ValueError("the segment holds no samples")
    target.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(target), data, rate)


PARQUET_TEXT = ("text", "sentence", "transcript", "transcription", "normalized_text")  # looked for in this order
_SNIFFED = {"WAV": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3", "AIFF": "aiff", "W64": "w64", "CAF": "caf"}
_MANIFEST_KEYS = {"audio_filepath", "duration", "text"}


def parquet(src: Path, out: Path, split: str) -> Iterator[Row]:
    """Parquet files as Hugging Face `datasets` writes them: an audio column of {bytes, path} structs, a text column
    and other columns kept as fields (speaker ids, say); the audio is written to OUT/audio/ (a row without bytes
    whose path names a file beside its parquet, inside SRC, is that file)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusLayoutError("parquet files need pyarrow: pip install 'speechscale[parquet]'") from None
    files = [src] if src.is_file() else sorted(src.rglob("*.parquet"))
    corpus = (src.parent if src.is_file() else src).resolve()  # where files a row names may be
    if split:  # a split folder (clean/test/0000.parquet) or file prefix (data/train-00000-of-00004.parquet)
        files = [f for f in files if split in f.relative_to(src).parts[:-1] or f.name.startswith((f"{split}-",
                                                                                                   f"{split}."))]
    for f in files:
        try:
            table = pq.ParquetFile(f)
            schema = table.schema_arrow
        except Exception as e:  # pyarrow raises several types for files that are not parquet
            yield f, None, {SKIP: "unreadable parquet", DETAIL: f"{f} ({first_line(e)})"}
            continue
        audio = next((x.name for x in sorted(schema, key=lambda x: x.name != "audio")
                      if pa.types.is_struct(x.type) and x.type.get_field_index("bytes") >= 0), None)
        strings = {x.name for x in schema if pa.types.is_string(x.type) or pa.types.is_large_string(x.type)}
        text = next((c for c in PARQUET_TEXT if c in strings), None)
        if audio is None or text is None:
            raise CorpusLayoutError(f"{f}: needs an audio column of {{bytes, path}} structs (as datasets' Audio "
                                    f"writes it) and a text column ({', '.join(PARQUET_TEXT)}); it has "
                                    f"{', '.join(schema.names)}")
        fields = [x.name for x in schema if x.name not in (audio, text) and x.name not in _MANIFEST_KEYS
                  and (x.name in strings or pa.types.is_integer(x.type) or pa.types.is_floating(x.type)
                       or pa.types.is_boolean(x.type))]
        folder = out / "audio" / (f.relative_to(src).with_suffix("") if f != src else Path(f.stem))
        folder.mkdir(parents=True, exist_ok=True)
        n = 0
        try:
            for batch in table.iter_batches(batch_size=64, columns=[audio, text, *fields]):
                for row in batch.to_pylist():
                    where = f"{f} row {n}"
                    cell = row[audio] or {}
                    data, named = cell.get("bytes"), cell.get("path")
                    n += 1
                    beside = f.parent / named if isinstance(named, str) and named else None
                    if beside is not None and not beside.resolve().is_relative_to(corpus):
                        beside = None  # a row names no file outside the corpus's folder
                    if not data and not (beside is not None and beside.is_file()):
                        yield f, None, {SKIP: "no audio bytes", DETAIL: where}
                        continue
                    if row[text] is None:
                        yield f, None, {SKIP: "no transcript", DETAIL: where}
                        continue
                    fields_kept = {k: row[k] for k in fields if row[k] is not None}
                    if not data:  # a dataset that keeps its audio as files beside the parquet: that file
                        yield beside, row[text], fields_kept
                        continue
                    path = folder / f"{n - 1:06d}.{_extension(data, named)}"
                    path.write_bytes(data)
                    yield path, row[text], fields_kept
        except Exception as e:  # a damaged row group: the rows before it are kept
            yield f, None, {SKIP: "unreadable parquet", DETAIL: f"{f} after row {n} ({first_line(e)})"}


def _extension(data: bytes, path: Any) -> str:
    """A file extension for audio `data`: its `path`'s when that is a short alphanumeric one, else its format's."""
    suffix = Path(path).suffix.lstrip(".").lower() if isinstance(path, str) else ""
    if suffix.isalnum() and len(suffix) <= 5:
        return suffix
    try:
        return _SNIFFED.get(sf.info(io.BytesIO(data)).format, "audio")
    except Exception:  # not a format soundfile knows: data.media reads it by its first bytes
        return "audio"


# what each importer looks for, for the error when it finds nothing
LAYOUTS = {"librispeech": "SPEAKER/CHAPTER/*.trans.txt beside their .flac files", "commonvoice": "a .tsv and clips/",
           "mls": "transcripts.txt and audio/", "tedlium": "stm/*.stm and sph/*.sph",
           "fsdd": "recordings/DIGIT_SPEAKER_INDEX.wav", "csv": "a header and a row an utterance",
           "kaldi": "wav.scp and text", "parquet": "*.parquet files (under a --split folder or named SPLIT-*.parquet)"}

# speechscale data import KIND -> the importer
IMPORTERS: dict[str, Callable[[Path, Path, str], Iterator[Row]]] = {
    "librispeech": librispeech, "commonvoice": commonvoice, "mls": mls, "tedlium": tedlium, "fsdd": fsdd,
    "csv": csv_file, "kaldi": kaldi, "parquet": parquet}


def import_corpus(kind: str, src: str | Path, out: str | Path, split: str = "", min_duration: float = 0.0,
                  max_duration: float = 0.0, normalize: Callable[[str], str] | None = None) -> SkipReport:
    """Write OUT/manifest.jsonl from corpus `kind` at `src`; returns what was kept and skipped, and why."""
    src, out = Path(src), Path(out)
    if kind not in IMPORTERS:
        raise CorpusLayoutError(f"unknown corpus {kind!r}; choose one of {', '.join(IMPORTERS)}")
    if not src.exists():
        raise CorpusLayoutError(f"{src}: no such file or folder")
    # every letter and digit kept as written: a model's alphabet and digit policy apply when it trains and scores
    normalize = normalize or TextNormalizer(alphabet=None, digits="keep")
    out.mkdir(parents=True, exist_ok=True)
    report = SkipReport(str(src))
    recording = lru_cache(maxsize=4096)(_recording)  # a recording's header is read once for its segments
    partial = out / "manifest.jsonl.partial"  # lines are written as they come: a corpus of any size in flat memory
    try:
        with open(partial, "w", encoding="utf-8") as f:
            for n, (audio, raw, extra) in enumerate(IMPORTERS[kind](src, out, split), 1):
                record = _record(n, audio, raw, extra, out, normalize, min_duration, max_duration, report, recording)
                if record is not None:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    report.kept += 1
        if not report.kept:  # an empty manifest would only fail later, in training
            if not report.skipped:
                raise CorpusLayoutError(f"{src}: nothing in {kind}'s layout here ({LAYOUTS[kind]})")
            raise ManifestError(f"{src}: no utterance imported ({report.summary()})")
        os.replace(partial, out / "manifest.jsonl")
    finally:
        partial.unlink(missing_ok=True)
        _decoded.cache_clear()
    return report


def _record(n: int, audio: Path | Span, raw: str | None, extra: dict[str, Any], out: Path,
            normalize: Callable[[str], str], min_duration: float, max_duration: float, report: SkipReport,
            recording: Callable[[Path], tuple[float, bool]]) -> dict[str, Any] | None:
    """Row `n` of an importer as a manifest record, or None when it is skipped (counted in `report`); `recording`:
    (seconds, whether a segment can be read alone) of a Span's recording."""
    if raw is None:  # the reader's own reason to skip it
        report.skip(n, extra[SKIP], extra.get(DETAIL, str(audio)))
        return None
    try:
        audio, timing = _segment(audio, out, recording) if isinstance(audio, Span) else (audio, _whole(audio))
    except _Skipped as e:
        report.skip(n, e.reason, e.detail)
        return None
    text = normalize(raw)
    duration = timing["duration"]
    if not text:
        report.skip(n, "empty transcript", str(audio))
    elif duration < min_duration or (max_duration and duration > max_duration):
        report.skip(n, "duration out of bounds", f"{duration:.2f} s")
    else:
        path = str(audio) if isinstance(audio, Absolute) else os.path.relpath(audio, out)
        return {"audio_filepath": path, **timing, "text": text, **extra}
    return None


class _Skipped(Exception):
    """A row left out: the reason it is counted under, and where (a path, times)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def _whole(audio: Path) -> dict[str, float]:
    """{"duration": s} of a whole audio file, from its header."""
    if not audio.is_file():
        raise _Skipped("audio file missing", str(audio))
    try:
        return {"duration": round(audio_info(audio)[0], 3)}
    except Exception as e:  # soundfile raises several types for unknown or corrupt headers
        raise _Skipped("unreadable audio", f"{audio} ({e})") from None


def _recording(path: Path) -> tuple[float, bool]:
    """(seconds, True when soundfile reads it, so a segment is read without decoding what comes before)."""
    try:
        info = sf.info(str(path))
    except Exception:  # soundfile raises several types for unknown formats: a container data.media decodes
        return audio_info(path)[0], False
    return info.frames / info.samplerate, True


def _segment(span: Span, out: Path, recording: Callable[[Path], tuple[float, bool]]) -> tuple[Path, dict[str, float]]:
    """(audio file, its manifest fields `offset` and `duration`) of a Span: the recording itself with an offset, or
    the segment cut into OUT/audio/ when its recording is a container read only from its start."""
    path = span.recording
    if not path.is_file():
        raise _Skipped("audio file missing", str(path))
    try:
        total, seekable = recording(path)
    except Exception as e:  # soundfile raises several types for unknown or corrupt headers
        raise _Skipped("unreadable audio", f"{path} ({first_line(e)})") from None
    if span.start >= total or span.end > total + SPAN_SLACK_S:
        raise _Skipped("segment past the recording's end",
                       f"{path} {span.start:g}-{span.end:g} s (it has {total:.3f} s)")
    end = min(span.end, total)
    if seekable:
        return path, {"offset": span.start, "duration": round(end - span.start, 3)}
    target = out / "audio" / span.name
    try:
        _cut(path, target, span.start, end, None)
    except (ValueError, RuntimeError, sf.LibsndfileError, AudioError) as e:
        raise _Skipped("unreadable audio", f"{path} ({first_line(e)})") from None
    return target, {"duration": round(audio_info(target)[0], 3)}
