"""Index tar shards that other tools wrote (webdataset's ShardWriter, GNU tar, a corpus's own release), so that
training streams them as it streams `data shard`'s.

The WebDataset layout is assumed: an utterance's members follow each other and share a key, the member's path
up to the first dot of its file name (`train/utt1.flac` and `train/utt1.json` are utterance `train/utt1`). Its
transcript is a JSON member's text field (`text`, `transcript`, `sentence` or `--text-field`) or a `.txt`
member; its audio is the member in an audio format. Each tar is read once, in order: a local one by seeking
past the audio it does not need, one behind a URL (s3://, gs://, ...) as one stream. An utterance without audio
or transcript, or whose audio does not decode, is skipped and counted. With `checksums` each tar is read a second
time, whole, for the CRC-32 of each utterance's bytes (what `data shard` writes): training and `data verify` then
catch the bytes that change after indexing.
"""
from __future__ import annotations

import io
import json
import os
import posixpath
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import fsspec
from tqdm import tqdm

from ..config import parse_json
from ..storage import is_remote
from .audio import AUDIO_EXTENSIONS, AudioError, stream_duration
from .shards import (
    INDEX_NAME,
    TEXT_EXTENSIONS,
    TEXT_FIELDS,
    IndexWriter,
    ShardError,
    has_index_header,
    map_in_processes,
    member_key,
    transcript,
)

MAX_TEXT_BYTES = 1 << 20  # a transcript member larger than this is no transcript
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


@dataclass
class _Group:
    """One run of tar members sharing a key: where its bytes are, its text members, its audio's length."""

    key: str
    start: int                        # the first member's first header block
    end: int = 0                      # past the last member's data, padded to the block
    whole: bool = True                # every member's data is in the file
    texts: dict[str, bytes] = field(default_factory=dict)
    audio: str | None = None          # the first member in an audio format
    seconds: float | None = None
    audio_error: str = ""
    crc: int | None = None            # CRC-32 of the bytes start..end (with checksums)


def _check_tar(fs: Any, path: str, shown: str) -> None:
    """ShardError unless `path` begins as an uncompressed tar does (one line, before any tar is read)."""
    try:
        with fs.open(path, "rb") as f:
            head = f.read(512)
    except Exception as e:  # fsspec raises per-backend types
        raise ShardError(f"{shown}: cannot be read ({type(e).__name__}: {e})") from None
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            raise ShardError(f"{shown} is {kind}-compressed: utterances are read from shards by byte range, which "
                             f"needs plain tar files (decompress it first)")
    try:
        tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        raise ShardError(f"{shown}: not a tar file") from None


def _groups(tar: tarfile.TarFile, size: int, name: str, stream: bool) -> tuple[list[_Group], str | None]:
    """The runs of file members sharing a key, in tar order (links and folders left out), with their text members
    read and their audio's length taken as it passes; and what stopped the reading early (None when the tar
    ended well). `stream`: the tar is read once, in order (each member only while it is the current one)."""
    groups: list[_Group] = []
    members = iter(tar)
    while True:
        try:
            info = next(members)
        except StopIteration:
            return groups, None
        except (tarfile.TarError, OSError) as e:  # the members before the damage are kept
            return groups, str(e)
        if not info.isfile():
            continue
        key, ext = member_key(info.name)
        if not groups or groups[-1].key != key:
            groups.append(_Group(key, info.offset))
        g = groups[-1]
        g.end = info.offset_data + -(-info.size // 512) * 512
        if info.offset_data + info.size > size:
            g.whole = False
            continue
        kind = ext.rsplit(".", 1)[-1].lower()
        try:
            if kind in TEXT_EXTENSIONS and info.size <= MAX_TEXT_BYTES:
                g.texts[info.name] = tar.extractfile(info).read()
            elif kind in AUDIO_EXTENSIONS and g.audio is None:
                g.audio = info.name
                data = tar.extractfile(info)
                g.seconds = stream_duration(io.BytesIO(data.read()) if stream else data, f"{name} member {info.name}")
        except AudioError as e:
            g.audio_error = str(e)
        except (tarfile.TarError, OSError) as e:
            return groups, str(e)


def _checksum(f: Any, groups: list[_Group]) -> None:
    """Set each whole group's `crc` from the bytes of `f` (a tar read once, in order, from its start: a URL's is a
    stream)."""
    at, crc = 0, 0
    for g in groups:
        if not g.whole:
            continue
        for begin, end, counted in ((at, g.start, False), (g.start, g.end, True)):  # the members between: read past
            crc = 0
            while begin < end:
                chunk = f.read(min(end - begin, 1 << 22))
                if not chunk:
                    raise OSError(f"the tar ends inside {g.key} (changed while it was read?)")
                crc = zlib.crc32(chunk, crc) if counted else 0
                begin += len(chunk)
        g.crc, at = crc, g.end


def _read_tar(work: tuple[str, str, str, bool]) -> tuple[str, int, list[_Group], str | None]:
    """(name, bytes, groups, damage) of the tar at `path` under `folder` (`_groups`; a URL's as one stream); with
    `checksums` read a second time for each group's CRC-32 (`_checksum`)."""
    folder, path, name, checksums = work
    stream, size = is_remote(folder), 0
    try:
        fs = fsspec.core.url_to_fs(folder)[0]
        size = fs.size(path)
        with fs.open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|" if stream else "r:") as tar:
            groups, damage = _groups(tar, size, name, stream)
        if checksums and groups:
            with fs.open(path, "rb") as f:
                _checksum(f, groups)
        return name, size, groups, damage
    except Exception as e:  # a tar gone or unreadable since it was listed (fsspec raises per-backend types)
        return name, size, [], f"{type(e).__name__}: {e}"


def index_tars(folder: str | Path, pattern: str = "*.tar", out: str | Path | None = None,
               text_field: str | None = None, progress: bool = False, jobs: int = 1, checksums: bool = False
               ) -> dict[str, Any]:
    """Write the index of the tar shards under `folder` (a local folder or a URL) that match `pattern` (sorted by
    path) to `out` (default FOLDER/index.jsonl; its folder holds the shards). `text_field` names the JSON members'
    transcript field (None: the first of TEXT_FIELDS the first JSON member has); `progress` shows a bar of the
    tars read; `jobs` processes read tars side by side (the same index as one); `checksums` stores each
    utterance's CRC-32 (each tar read twice). Returns the index header plus what was skipped, by reason."""
    folder = str(folder).rstrip("/") or "/"
    out = str(out) if out is not None else f"{folder}/{INDEX_NAME}"
    try:
        fs, root = fsspec.core.url_to_fs(folder)
        if not fs.isdir(root):
            raise ShardError(f"{folder}: not a folder")
        out_fs, out_path = fsspec.core.url_to_fs(out)
        if out_fs.exists(out_path) and not has_index_header(out_fs, out_path):
            raise ShardError(f"{out} exists and is not a shard index: choose another --out")
        paths = sorted(p for p in fs.glob(posixpath.join(root, pattern)) if fs.isfile(p) and p != out_path)
    except ShardError:
        raise
    except Exception as e:  # fsspec raises per-backend types (a missing s3fs is an ImportError)
        raise ShardError(f"{folder}: cannot be listed ({type(e).__name__}: {e})") from None
    if not paths:
        raise ShardError(f"{folder}: no file matches {pattern!r}")
    base = posixpath.dirname(out_path) if is_remote(out) else str(Path(out).absolute().parent)
    names = []
    for p in paths:
        here = p if is_remote(folder) else str(Path(folder, os.path.relpath(p, root)).absolute())
        rel = posixpath.relpath(here, base) if is_remote(folder) == is_remote(out) else ".."
        if rel.split("/")[0] == ".." or type(fs) is not type(out_fs):
            raise ShardError(f"{out}: an index names its shards relative to its own folder; {here} is outside it")
        names.append(rel)
        _check_tar(fs, p, rel)
    skipped: dict[str, int] = {}
    chosen = [text_field]  # the JSON field, once the first JSON member chose it

    def skip(reason: str, where: str, why: str = "") -> None:
        skipped[reason] = skipped.get(reason, 0) + 1
        tqdm.write(f"skipping {where}: {why or reason}")

    work = [(folder, p, name, checksums) for p, name in zip(paths, names)]
    read = map_in_processes(_read_tar, work, jobs)
    with IndexWriter() as index:
        for name, size, groups, damage in tqdm(read, total=len(work), desc="index", unit="tar", disable=not progress,
                                               leave=False):
            members, texts, crcs = _utterances(name, groups, chosen, skip)
            if damage and not (groups and not groups[-1].whole):  # a cut inside the last member is counted with it
                skip("damaged tar", name, f"unreadable after the utterances above ({damage})")
            if not members:  # nothing to read from it
                tqdm.write(f"leaving out {name}: no utterance in it")
                continue
            index.add({"shard": name, "bytes": size, "utterances": len(members),
                       "seconds": round(sum(m[1] for m in members), 3), "members": members, "texts": texts,
                       **({"crc32": crcs} if checksums else {})})
        field_name = chosen[0] or "text"
        if not index.shards:
            said = f"; transcripts read from .txt members or the JSON field {field_name!r} (--text-field)" \
                if "no transcript" in skipped else ""
            raise ShardError(f"{folder}: no utterance with audio and a transcript in {len(paths)} tar files "
                             f"(skipped: {json.dumps(skipped)}{said})")
        header = index.finish(out, {"source": folder, "codec": "as-is", "text_field": field_name})
    return {**header, "skipped": skipped}


def _utterances(name: str, groups: list[_Group], chosen: list[str | None], skip: Callable[..., None]
                ) -> tuple[list[list[Any]], list[str], list[int | None]]:
    """The index members [key, seconds, start, end], transcripts and CRC-32s of one tar's groups; each group that
    is no utterance is passed to `skip` with its reason. `chosen[0]`: the JSON text field (None: the first JSON
    member met chooses it)."""
    members, texts, crcs = [], [], []
    keys = Counter(g.key for g in groups)
    for g in groups:
        where = f"{name} member {g.key}"
        if keys[g.key] > 1:  # a reader takes an utterance's members as one run of bytes
            skip("members not adjacent", where, "its members do not follow each other in the tar (write tars with "
                                                "`tar --sort=name`, or webdataset's writers)")
            continue
        if not g.whole:
            skip("truncated shard", where)
            continue
        if g.audio is None:
            skip("no audio member", where)
            continue
        if chosen[0] is None and f"{g.key}.json" in g.texts:
            chosen[0] = _guess_field(g.texts[f"{g.key}.json"])
        text = transcript(g.texts, g.key, chosen[0] or "text")
        if text is None:
            skip("no transcript", where)
        elif g.seconds is None:
            skip("unreadable audio", where, g.audio_error)
        else:
            members.append([g.key, round(g.seconds, 4), g.start, g.end])
            texts.append(text)
            crcs.append(g.crc)
    return members, texts, crcs


def _guess_field(raw: bytes) -> str:
    """The first of TEXT_FIELDS that a JSON member holds as a string ("text" when none does)."""
    try:
        meta = parse_json(raw)
    except ValueError:
        meta = None
    if isinstance(meta, dict):
        for name in TEXT_FIELDS:
            if isinstance(meta.get(name), str):
                return name
    return "text"
