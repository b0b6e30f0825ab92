"""Sharded corpora: tar shards in the WebDataset layout and the index that lets every rank read them.

`write_shards` turns a manifest into `shard-000000.tar`, ... (per utterance a `KEY.json` member with text
and duration and a `KEY.flac`/`.wav`/... audio member, in that order: WebDataset and `tar` read them) and
`index.jsonl`: a header line, then one line per shard with its name, bytes, utterances, seconds and its
members as [key, duration, start, end] (byte span of the two members' headers and data), with `crc32`, the
CRC-32 of each span's bytes. The index lets a reader plan batches from durations without opening a shard, and
read one utterance with one ranged read (`pread` locally, a range request through fsspec), so ranks and loader
workers read only what they train on.

A shard is read at the offsets of its index line; the tar headers found there must name the expected key,
and the bytes read must have the CRC the index holds (indexes of other tools' tars hold none), so a shard that
does not match its index, or whose bytes have rotted since it was written, is detected, not misread.
"""
from __future__ import annotations

import atexit
import io
import itertools
import json
import logging
import os
import posixpath
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import fsspec
import numpy as np
import soundfile as sf

from ..config import parse_json
from ..storage import is_remote
from .audio import AUDIO_EXTENSIONS, AudioError, read_audio
from .manifest import ManifestError, SkipReport, Utterance, iter_manifest

log = logging.getLogger(__name__)

INDEX_NAME = "index.jsonl"
RETRY_S = (0.5, 2.0)  # waits before remote spans that failed are asked again (a store's transient errors)
# further waits while a batch's every remote span fails (a store that is down); their sum stays under
# distributed.timeout_s's default, so the other ranks' collectives wait for this one
OUTAGE_S = (10.0, 30.0, 60.0, 120.0)
HEADER_KEY = "speechscale_shards"  # the first line of an index: {"speechscale_shards": 1, ...}


TEXT_FIELDS = ("text", "transcript", "sentence")  # looked for in this order when --text-field is not given
TEXT_EXTENSIONS = ("json", "txt")


def member_key(name: str) -> tuple[str, str]:
    """(key, extension) of a WebDataset member: its path up to the first dot of its file name, and the rest."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext if dot else "")


def audio_member(names: list[str]) -> str | None:
    """The audio member among one utterance's member names: the first whose last extension is an audio format."""
    for name in names:
        if name.rsplit(".", 1)[-1].lower() in AUDIO_EXTENSIONS:
            return name
    return None


def transcript(members: dict[str, bytes], key: str, field: str) -> str | None:
    """An utterance's transcript: `field` of its KEY.json member, else its KEY.txt member; None when neither."""
    raw = members.get(f"{key}.json")
    if raw is not None:
        try:
            meta = parse_json(raw)
        except ValueError:
            meta = None
        if isinstance(meta, dict) and isinstance(meta.get(field), str):
            return meta[field]
    raw = members.get(f"{key}.txt")
    if raw is not None:
        try:
            return raw.decode("utf-8-sig").strip()
        except UnicodeDecodeError:
            return None
    return None


class ShardError(ManifestError):
    """A shard index or shard that cannot be used; the message names the file (and member)."""


def is_shard_index(path: str) -> bool:
    """Whether `path` (a file, a folder holding index.jsonl, or a URL) is a shard index rather than a manifest."""
    if not path:
        return False
    if not is_remote(path) and Path(path).is_dir():
        return (Path(path) / INDEX_NAME).is_file()
    if path.endswith("/" + INDEX_NAME) or path == INDEX_NAME:
        return True
    if is_remote(path):
        return False
    return has_index_header(fsspec.filesystem("file"), path)


def has_index_header(fs: Any, path: str) -> bool:
    """Whether the file at `path` on file system `fs` begins with a shard index's header line."""
    try:
        with fs.open(path, "rb") as f:
            head = parse_json(f.readline().decode("utf-8-sig", "replace"))
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and HEADER_KEY in head


# ---- writing --------------------------------------------------------------------------------------------
def _add(tar: tarfile.TarFile, name: str, data: bytes, crc: int = 0) -> int:
    """Add member `name` holding `data`; returns `crc` continued over the bytes it takes in the tar (header, data,
    padding to the block)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))
    crc = zlib.crc32(info.tobuf(tar.format, tar.encoding, tar.errors), crc)
    return zlib.crc32(bytes(-len(data) % tarfile.BLOCKSIZE), zlib.crc32(data, crc))


def write_shards(manifest: str, out: str | Path, shard_size: int = 1000, codec: str | None = None,
                 jobs: int = 1) -> dict[str, Any]:
    """Write `manifest`'s valid utterances as tar shards of `shard_size` utterances and index.jsonl in `out` (a
    folder, or a URL: s3://bucket/corpus, ...).
    `codec` "flac" re-encodes the audio as 16-bit FLAC (None keeps each file's bytes and format); `jobs`
    processes write shards side by side (the same files as one). Returns the index header (shards, utterances,
    hours) plus what was skipped."""
    if shard_size < 1:
        raise ShardError(f"--shard-size must be at least 1, not {shard_size}")
    if codec not in (None, "flac"):
        raise ShardError(f"--codec must be flac (or left out to keep the files as they are), not {codec!r}")
    report = SkipReport(source=str(manifest))
    utts = iter_manifest(manifest, report)
    first = list(itertools.islice(utts, shard_size))
    if not first:  # before any file is written: an empty index would only fail later, in training
        raise ShardError(f"{manifest}: no utterance to shard ({report.summary()})")
    out = str(out).rstrip("/")
    if not is_remote(out):
        Path(out).mkdir(parents=True, exist_ok=True)
    rest = iter(lambda: list(itertools.islice(utts, shard_size)), [])  # the manifest is read a shard at a time
    work = ((out, s, part, codec) for s, part in enumerate(itertools.chain([first], rest)))
    unreadable = 0
    with IndexWriter() as index:
        for line, bad in map_in_processes(_write_shard, work, jobs):
            index.add(line)
            unreadable += bad
        header = index.finish(f"{out}/{INDEX_NAME}", {"source": str(manifest), "codec": codec or "as-is"})
    return {**header, "skipped": dict(report.reasons) | ({"unreadable audio": unreadable} if unreadable else {})}


class IndexWriter:
    """An index written as its shard lines come (memory stays flat however large the corpus): the lines wait in a
    temporary file, and `finish` writes the header with the totals, then them (a local index by rename, whole)."""

    def __init__(self) -> None:
        self.body = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.shards, self.utterances, self.seconds = 0, 0, 0.0

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.body.close()

    def add(self, line: dict[str, Any]) -> None:
        """One shard's line: {"shard", "bytes", "utterances", "seconds", "members", "texts"}."""
        self.body.write(json.dumps(line, ensure_ascii=False) + "\n")
        self.shards += 1
        self.utterances += line["utterances"]
        self.seconds += line["seconds"]

    def finish(self, out: str, extra: dict[str, Any]) -> dict[str, Any]:
        """Write the index to `out` (a path or URL); returns its header."""
        header = {HEADER_KEY: 1, "shards": self.shards, "utterances": self.utterances,
                  "hours": round(self.seconds / 3600, 4), **extra}
        local = not is_remote(out)
        target = Path(out).with_name(Path(out).name + ".partial") if local else out
        with fsspec.open(str(target), "w", encoding="utf-8") as f:  # an object appears whole or not at all
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            self.body.seek(0)
            while chunk := self.body.read(1 << 16):
                f.write(chunk)
        if local:
            os.replace(target, out)
        return header


def _write_shard(work: tuple[str, int, list[Any], str | None]) -> tuple[dict[str, Any], int]:
    """Shard number s of `write_shards` under `out` (a folder or URL; a URL's shard is uploaded as it is written):
    (its index line, utterances skipped for unreadable audio)."""
    out, s, utts, codec = work
    name = f"shard-{s:06d}.tar"
    members, texts, crcs, seconds, unreadable = [], [], [], 0.0, 0
    with fsspec.open(f"{out}/{name}", "wb") as f, \
            tarfile.open(fileobj=f, mode="w|" if is_remote(out) else "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, u in enumerate(utts):
            key = f"{s:06d}{i:06d}"
            try:
                audio, ext, duration = _audio_bytes(u, codec)
            except AudioError as e:
                unreadable += 1
                print(f"skipping {u.audio_path}: {e}", flush=True)
                continue
            start = tar.offset
            meta = {"text": u.raw_text, "duration": duration, "source": os.path.basename(u.audio_path),
                    **({} if u.offset is None else {"source_offset": u.offset}), **u.extra}
            crc = _add(tar, f"{key}.json", json.dumps(meta, ensure_ascii=False).encode())
            crcs.append(_add(tar, f"{key}.{ext}", audio, crc))
            members.append([key, round(duration, 4), start, tar.offset])
            texts.append(u.raw_text)
            seconds += duration
    fs, path = fsspec.core.url_to_fs(f"{out}/{name}")
    line = {"shard": name, "bytes": fs.size(path), "utterances": len(members),
            "seconds": round(seconds, 3), "members": members, "texts": texts, "crc32": crcs}
    return line, unreadable


def map_in_processes(fn: Callable[[Any], Any], items: Iterable[Any], jobs: int) -> Iterator[Any]:
    """`map(fn, items)` in order; with `jobs` > 1 in that many fresh (spawned) processes, with at most two items per
    process taken from `items` at a time (a stream stays a stream)."""
    if jobs <= 1:
        yield from map(fn, items)
        return
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    items = iter(items)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending = deque(pool.submit(fn, x) for x in itertools.islice(items, 2 * jobs))
        while pending:
            done = pending.popleft().result()
            pending.extend(pool.submit(fn, x) for x in itertools.islice(items, 1))
            yield done


def _audio_bytes(u: Utterance, codec: str | None) -> tuple[bytes, str, float]:
    """(bytes, extension, duration) of one utterance's audio for a shard: the file's own bytes (`codec` None), else
    FLAC; a segment of a longer recording (a line with an offset) is always cut out into FLAC."""
    path = u.audio_path
    try:
        if u.offset is not None:  # its channels as stored, at its rate
            stored, rate = read_audio(path, u.offset, u.duration)  # (T, C)
            data = _pcm16(stored if stored.shape[1] > 1 else stored[:, 0])
        elif codec is None:
            return Path(path).read_bytes(), Path(path).suffix.lstrip(".").lower() or "audio", u.duration
        else:
            try:
                data, rate = sf.read(path, dtype="int16", always_2d=False)
            except sf.LibsndfileError:  # a container soundfile does not read (data.media): its mono audio, at its rate
                stored, rate = read_audio(path)  # (T, C)
                data = _pcm16(stored.mean(axis=1))
        buf = io.BytesIO()
        sf.write(buf, data, rate, format="FLAC", subtype="PCM_16")
        return buf.getvalue(), "flac", round(len(data) / rate, 4)
    except AudioError:
        raise
    except (OSError, RuntimeError, sf.LibsndfileError) as e:
        raise AudioError(f"{path}: {e}") from e


def _pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] as 16-bit PCM (clipped)."""
    return np.round(np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)


def transcripts(source: str, report: SkipReport, filt: dict[str, Any] | None = None, lines: list[int] | None = None,
                allow_external: bool = False) -> Iterator[str]:
    """The transcripts as written of a manifest (its valid lines, as `filt` and `lines` select them; the files
    are not looked for) or of a shard index (all of them), one at a time; `report` counts the manifest's lines."""
    if is_shard_index(source):
        if filt or lines:
            raise ShardError(f"{source}: a filter or slice selects manifest lines; a shard index takes neither")
        return ShardIndex(source, allow_external=allow_external).texts()
    return (u.raw_text for u in iter_manifest(source, report, filt=filt, check_files=False, lines=lines))


# ---- reading --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShardEntry:
    """One shard of an index: where it is, its size, and where its line (member list) starts in the index."""

    url: str
    bytes: int
    utterances: int
    seconds: float
    line_offset: int


class ShardIndex:
    """An index.jsonl read line by line: per shard only its entry is kept (memory grows with shards, not
    utterances); a shard's members are read from its line when needed. A remote index is copied to a local
    temporary file first (streamed)."""

    def __init__(self, path: str, allow_external: bool = False) -> None:
        """`allow_external`: shards may be named by absolute path, URL or `..` (data.allow_external_shards);
        by default each resolves under the index's own folder, so an index cannot point reads elsewhere."""
        path = str(path)
        if not is_remote(path) and Path(path).is_dir():
            path = str(Path(path) / INDEX_NAME)
        self.path = path
        self.base = path.rsplit("/", 1)[0] if "/" in path else "."
        self.local = self._local_copy(path)
        self.shards: list[ShardEntry] = []
        with open(self.local, "rb") as f:
            first = f.readline()
            try:
                self.header = parse_json(first)
                assert HEADER_KEY in self.header
            except (ValueError, AssertionError, TypeError):
                raise ShardError(f"{path}: not a shard index (its first line lacks {HEADER_KEY!r})") from None
            while True:
                offset, line = f.tell(), f.readline()
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    head = parse_json(line)  # members are parsed here once, then dropped
                    url = self._resolve(str(head["shard"]), allow_external)
                    entry = ShardEntry(url, int(head["bytes"]), int(head["utterances"]), float(head["seconds"]),
                                       offset)
                    members, crcs = head["members"], head.get("crc32")
                    ok = isinstance(members, list) and all(isinstance(m, list) and len(m) == 4 for m in members)
                    ok = ok and (crcs is None or isinstance(crcs, list) and len(crcs) == entry.utterances and all(
                        isinstance(c, int) for c in crcs))
                except (ValueError, KeyError, TypeError) as e:
                    raise ShardError(f"{path}: shard line at byte {offset} is malformed ({e})") from None
                if not ok or len(members) != entry.utterances:
                    raise ShardError(f"{path}: shard line at byte {offset} says {entry.utterances} utterances but "
                                     f"lists {len(members) if isinstance(members, list) else 'no'} members (or "
                                     f"checksums not one integer each); "
                                     f"rewrite the index with `speechscale data shard`")
                self.shards.append(entry)
        if not self.shards:
            raise ShardError(f"{path}: the index lists no shards")
        # global utterance id of each shard's first member
        self.starts = [0]
        for s in self.shards:
            self.starts.append(self.starts[-1] + s.utterances)

    def _resolve(self, name: str, allow_external: bool) -> str:
        """Where shard `name` of this index lives: under the index's folder unless external names are allowed."""
        external = "://" in name or name.startswith("/") or posixpath.normpath(name).split("/")[0] == ".."
        if external and not allow_external:
            raise ShardError(f"{self.path}: shard {name!r} lies outside the index's folder; indexes name shards "
                             f"relative to themselves (set data.allow_external_shards=true to trust this one)")
        return name if external else f"{self.base}/{name}"

    @staticmethod
    def _local_copy(path: str) -> str:
        if not is_remote(path):
            if not Path(path.removeprefix("file://")).is_file():
                raise ShardError(f"shard index not found: {path}")
            return path.removeprefix("file://")
        try:
            with fsspec.open(path, "rb") as src, tempfile.NamedTemporaryFile("wb", suffix=".jsonl",
                                                                            delete=False) as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except Exception as e:  # fsspec raises per-backend types
            raise ShardError(f"shard index {path} cannot be read: {type(e).__name__}: {e}") from None
        owner = os.getpid()  # loader workers share the copy; the process that made it removes it at exit
        atexit.register(lambda: os.getpid() == owner and os.path.exists(dst.name) and os.unlink(dst.name))
        return dst.name

    @property
    def utterances(self) -> int:
        return self.starts[-1]

    def members(self, shard: int) -> list[list[Any]]:
        """Shard `shard`'s members as [key, duration, start, end], in tar order."""
        return self.entries(shard)[0]

    def entries(self, shard: int) -> tuple[list[list[Any]], list[int] | None]:
        """Shard `shard`'s members and the CRC-32 of each one's bytes (None in an index without them)."""
        with open(self.local, "rb") as f:
            f.seek(self.shards[shard].line_offset)
            line = parse_json(f.readline())
        return line["members"], line.get("crc32")

    def lines(self) -> Iterator[dict[str, Any]]:
        """Each shard's line (members, transcripts) in index order, read once from the index."""
        with open(self.local, "rb") as f:
            for s in self.shards:
                f.seek(s.line_offset)
                yield parse_json(f.readline())

    def texts(self) -> Iterator[str]:
        """Every utterance's transcript as written, in index order (shard by shard, read from its line)."""
        for s, line in zip(self.shards, self.lines()):
            yield from self.line_texts(line, s.utterances)

    def line_texts(self, line: dict[str, Any], utterances: int) -> list[str]:
        """The transcripts of one shard's line; ShardError when the index does not keep them."""
        if not isinstance(line.get("texts"), list) or len(line["texts"]) != utterances:
            raise ShardError(f"{self.path}: the index does not hold its transcripts (an index written before they "
                             f"were kept): write it again with `speechscale data shard` or `data index`")
        return [str(t) for t in line["texts"]]

    def locate(self, uid: int) -> tuple[int, int]:
        """(shard, member) of global utterance id `uid`."""
        import bisect

        s = bisect.bisect_right(self.starts, uid) - 1
        return s, uid - self.starts[s]

    def check(self) -> None:
        """Before work starts: every shard exists and has the size the index says (one clear error). Sizes on one
        file system are asked together (concurrently on object stores and HTTP); when any cannot be read, one by one,
        so the error names the shard."""
        groups, bad = _by_file_system([s.url for s in self.shards])
        if bad:
            n, e = next(iter(bad.items()))  # the first shard whose URL names no file system
            raise ShardError(f"{self.path}: shard {self.shards[n].url} cannot be read: {type(e).__name__}: {e}")
        for fs, positions, paths in groups:
            try:
                sizes = fs.sizes(paths)
            except Exception:  # noqa: BLE001 - which one failed is found below
                sizes = [_shard_size(self.path, fs, p, self.shards[n]) for n, p in zip(positions, paths)]
            for size, n in zip(sizes, positions):
                s = self.shards[n]
                if size != s.bytes:
                    raise ShardError(f"{self.path}: shard {s.url} has {size} bytes, the index says {s.bytes}: "
                                     f"the shard and its index do not match (re-run speechscale data shard)")


def _shard_size(index: str, fs: Any, path: str, shard: ShardEntry) -> int:
    """The size of one shard of `index`; ShardError naming it when it is missing or cannot be read."""
    try:
        return fs.size(path)
    except FileNotFoundError:
        raise ShardError(f"{index}: shard {shard.url} is missing") from None
    except Exception as e:
        raise ShardError(f"{index}: shard {shard.url} cannot be read: {type(e).__name__}: {e}") from None


class ShardReader:
    """Reads members by byte span. A local shard: `pread` on a few files kept open per process (loader workers open
    their own). A remote one: exact ranged requests, no read-ahead (a buffered remote file fetches megabytes past a
    member that lies anywhere in the shard), and a batch's spans requested at once (fsspec's `cat_ranges`:
    concurrent on object stores and HTTP), so a batch waits about one round trip, not one per utterance."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self.files: dict[str, Any] = {}
        self.pid = os.getpid()

    def _file(self, url: str) -> Any:
        if self.pid != os.getpid():  # forked into a loader worker: never share the parent's file positions
            self.files, self.pid = {}, os.getpid()
        f = self.files.pop(url, None)
        if f is None:
            f = open(url.removeprefix("file://"), "rb")
        self.files[url] = f  # most recently used last
        while len(self.files) > self.keep:
            self.files.pop(next(iter(self.files))).close()
        return f

    def fetch(self, spans: list[tuple[str, int, int]]) -> list[bytes | Exception]:
        """The bytes [start, end) of each (url, start, end), in order; an Exception in place of one that cannot be
        read whole. Remote spans go out together, one request each, per file system; those that fail for a reason
        that may pass (not a missing file or a refused one) are asked again after each wait of RETRY_S, and while
        every one of them still fails (the store is down, not a member), after each of OUTAGE_S too: an outage of a
        few minutes costs the run time, not data."""
        out: list[bytes | Exception] = [b""] * len(spans)
        remote = []
        for n, (url, start, end) in enumerate(spans):
            if is_remote(url):
                remote.append(n)
                continue
            try:
                data = os.pread(self._file(url).fileno(), end - start, start)
            except Exception as e:  # noqa: BLE001 - missing, unreadable: this span fails
                data = e
            short = isinstance(data, bytes) and len(data) != end - start  # the file ends before the span does
            out[n] = OSError(f"{len(data)} bytes for a span of {end - start} (a truncated shard)") if short else data
        asked = len(remote)
        for k, wait in enumerate((0.0, *RETRY_S, *OUTAGE_S)):
            if not remote or (k > len(RETRY_S) and len(remote) < asked):  # past the retries only while none answers
                break
            if wait:
                first = out[remote[0]]
                log.warning("%d of %d member(s) could not be read (%s: %s); asking again in %g s", len(remote), asked,
                            type(first).__name__, first, wait)
                time.sleep(wait)
            _fetch_remote(spans, remote, out)
            remote = [n for n in remote if isinstance(out[n], Exception) and not isinstance(out[n], _LASTING)]
        return out

    @staticmethod
    def parse(url: str, key: str, chunk: bytes | Exception, text_field: str = "text") -> tuple[str | None, bytes, str]:
        """(transcript, audio bytes, audio member name) of utterance `key` from `chunk`, the bytes fetch read for
        it; the transcript is `text_field` of KEY.json or else KEY.txt (None when neither holds one). Raises
        AudioError naming the shard and member when the bytes are missing or are not that member."""
        if isinstance(chunk, Exception):
            raise AudioError(f"{url} member {key}: cannot be read ({type(chunk).__name__}: {chunk})")
        found = dict(_members(chunk, key))
        audio_name = audio_member(list(found)) or next(
            (n for n in found if member_key(n)[1] not in TEXT_EXTENSIONS), None)
        if audio_name is None or not {f"{key}.json", f"{key}.txt"} & set(found):
            raise AudioError(f"{url} member {key}: not in the shard where the index says (truncated or "
                             f"rewritten shard?)")
        text = transcript(found, key, text_field)
        if text is None and f"{key}.txt" not in found:
            try:
                parse_json(found[f"{key}.json"])
            except ValueError:
                raise AudioError(f"{url} member {key}.json: corrupt metadata") from None
        return text, found[audio_name], audio_name


_LASTING = (FileNotFoundError, PermissionError, IsADirectoryError, ValueError, ImportError)  # not asked again


def _by_file_system(urls: list[str]) -> tuple[list[tuple[Any, list[int], list[str]]], dict[int, Exception]]:
    """`urls` grouped by their fsspec file system: (fs, positions in `urls`, paths) each, and why any URL names
    none (an unknown protocol, a bad URL), by position."""
    groups: dict[int, tuple[Any, list[int], list[str]]] = {}  # id(fs) -> (fs, positions, paths)
    bad: dict[int, Exception] = {}
    for n, url in enumerate(urls):
        try:
            fs, path = fsspec.core.url_to_fs(url)
        except Exception as e:  # noqa: BLE001 - the caller says what it means
            bad[n] = e
            continue
        _, positions, paths = groups.setdefault(id(fs), (fs, [], []))
        positions.append(n)
        paths.append(path)
    return list(groups.values()), bad


def _fetch_remote(spans: list[tuple[str, int, int]], positions: list[int], out: list[bytes | Exception]) -> None:
    """Read spans[n] for n in `positions` into out[n] (an Exception where one fails): one cat_ranges per file system;
    a span that comes short fails as an OSError (asked again), one that comes long as a ValueError (not)."""
    groups, bad = _by_file_system([spans[n][0] for n in positions])
    for k, e in bad.items():
        out[positions[k]] = e
    for fs, ks, paths in groups:
        mine = [positions[k] for k in ks]
        try:
            got = fs.cat_ranges(paths, [spans[n][1] for n in mine], [spans[n][2] for n in mine], on_error="return")
        except Exception as e:  # noqa: BLE001 - the whole round failed: every span in it fails
            got = [e] * len(mine)
        for n, data in zip(mine, got):
            want = spans[n][2] - spans[n][1]
            if isinstance(data, bytes) and len(data) < want:  # a connection cut mid-answer, or a truncated shard
                data = OSError(f"{len(data)} bytes came for a span of {want}")
            elif isinstance(data, bytes) and len(data) > want:
                data = ValueError(f"{len(data)} bytes came for a span of {want}: the server ignores ranged requests")
            out[n] = data


_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)  # header blocks that describe the next member


def _members(chunk: bytes, key: str) -> Iterator[tuple[str, bytes]]:
    """The (name, data) file members in `chunk` (tar headers and data) whose key is `key`; stops at any other
    key, at the end of `chunk` or at damage. Plain headers are read directly; pax and GNU extended ones by
    tarfile."""
    pos = 0
    while pos + 512 <= len(chunk):
        try:
            info = tarfile.TarInfo.frombuf(chunk[pos:pos + 512], "utf-8", "surrogateescape")
        except tarfile.HeaderError:
            return
        if info.type in _EXTENDED:
            yield from _members_extended(chunk, key)
            return
        end = pos + 512 + info.size
        if end > len(chunk) or (info.isfile() and member_key(info.name)[0] != key):
            return
        if info.isfile():
            yield info.name, chunk[pos + 512:end]
        pos += 512 + -(-info.size // 512) * 512


def _members_extended(chunk: bytes, key: str) -> Iterator[tuple[str, bytes]]:
    """`_members` of a chunk with pax or GNU extended headers, parsed by tarfile."""
    try:
        with tarfile.open(fileobj=io.BytesIO(chunk), mode="r:") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                if member_key(info.name)[0] != key or info.offset_data + info.size > len(chunk):
                    return
                yield info.name, tar.extractfile(info).read()
    except tarfile.TarError:
        return
