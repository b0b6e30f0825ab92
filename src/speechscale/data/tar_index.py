"""Index tar shards that other tools wrote (webdataset's ShardWriter, GNU tar, a corpus's own release), so that
training streams them as it streams `data shard`'s.

The WebDataset layout is assumed: an utterance's members follow each other and share a key, the member's path
up to the first dot of its file name (`train/utt1.flac` and `train/utt1.json` are utterance `train/utt1`). Its
transcript is a JSON member's text field (`text`, `transcript`, `sentence` or `--text-field`) or a `.txt`
member; its audio is the member in an audio format. Each tar is read once, in order; an utterance without
audio or transcript, or whose audio does not decode, is skipped and counted.
"""
from __future__ import annotations

import json
import os
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

from .audio import AudioError, stream_duration
from .shards import (
    HEADER_KEY,
    INDEX_NAME,
    TEXT_EXTENSIONS,
    TEXT_FIELDS,
    ShardError,
    audio_member,
    member_key,
    transcript,
)

MAX_TEXT_BYTES = 1 << 20  # a transcript member larger than this is no transcript
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def _check_tar(path: Path) -> None:
    """ShardError unless `path` begins as an uncompressed tar does (one line, before any tar is read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise ShardError(f"{path}: cannot be read ({e.strerror or e})") from None
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            raise ShardError(f"{path} is {kind}-compressed: utterances are read from shards by byte range, which "
                             f"needs plain tar files (decompress it first)")
    try:
        tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        raise ShardError(f"{path}: not a tar file") from None


def _groups(tar: tarfile.TarFile, size: int) -> tuple[list[tuple[str, list[tarfile.TarInfo], dict[str, bytes]]],
                                                     str | None]:
    """([(key, members, {name: data of its text members})] of each run of members sharing a key, in tar order;
    links and folders left out), and what stopped the reading early (None when the tar ended well). `size`: the
    tar's bytes (a truncated text member is not read)."""
    groups: list[tuple[str, list[tarfile.TarInfo], dict[str, bytes]]] = []
    damage = None
    members = iter(tar)
    while True:
        try:
            info = next(members)
        except StopIteration:
            break
        except (tarfile.TarError, OSError) as e:  # the members before the damage are kept
            damage = str(e)
            break
        if not info.isfile():
            continue
        key, ext = member_key(info.name)
        if not groups or groups[-1][0] != key:
            groups.append((key, [], {}))
        groups[-1][1].append(info)
        if ext.rsplit(".", 1)[-1].lower() in TEXT_EXTENSIONS and info.size <= MAX_TEXT_BYTES \
                and info.offset_data + info.size <= size:
            groups[-1][2][info.name] = tar.extractfile(info).read()
    return groups, damage


def index_tars(folder: str | Path, pattern: str = "*.tar", out: str | Path | None = None,
               text_field: str | None = None) -> dict[str, Any]:
    """Write the index of the tar shards under `folder` that match `pattern` (sorted by path) to `out` (default
    FOLDER/index.jsonl). `text_field` names the JSON members' transcript field (None: the first of TEXT_FIELDS
    the first utterance has). Returns the index header plus what was skipped, by reason."""
    if "://" in f"{folder} {out}":
        raise ShardError(f"{folder}: index a local copy of the shards; the index names them relative to itself, so it "
                         f"can be uploaded beside them")
    folder = Path(folder)
    if not folder.is_dir():
        raise ShardError(f"{folder}: not a folder")
    out = Path(out) if out is not None else folder / INDEX_NAME
    if out.exists() and not _is_index_file(out):
        raise ShardError(f"{out} exists and is not a shard index: choose another --out")
    tars = sorted(p for p in folder.glob(pattern) if p.is_file() and p.resolve() != out.resolve())
    if not tars:
        raise ShardError(f"{folder}: no file matches {pattern!r}")
    base = out.absolute().parent  # not resolved: a shard may be a link to a file elsewhere
    names = []
    for p in tars:
        rel = os.path.relpath(p.absolute(), base)
        if rel.split(os.sep)[0] == "..":
            raise ShardError(f"{out}: an index names its shards relative to its own folder; {p} is outside it")
        names.append(rel.replace(os.sep, "/"))
        _check_tar(p)
    skipped: dict[str, int] = {}
    lines, total_s, field = [], 0.0, text_field

    def skip(reason: str, where: str, why: str = "") -> None:
        skipped[reason] = skipped.get(reason, 0) + 1
        print(f"skipping {where}: {why or reason}")

    for p, name in zip(tars, names):
        members, texts_kept, seconds, size = [], [], 0.0, p.stat().st_size
        try:
            with tarfile.open(p, "r:") as tar:
                groups, damage = _groups(tar, size)
                keys = Counter(g[0] for g in groups)
                for key, infos, texts in groups:
                    where = f"{name} member {key}"
                    if keys[key] > 1:  # a reader takes an utterance's members as one run of bytes
                        skip("members not adjacent", where, "its members do not follow each other in the tar (write "
                                                            "tars with `tar --sort=name`, or webdataset's writers)")
                        continue
                    last = infos[-1]
                    end = last.offset_data + -(-last.size // 512) * 512
                    if last.offset_data + last.size > size:
                        skip("truncated shard", where)
                        continue
                    audio = audio_member([i.name for i in infos])
                    if audio is None:
                        skip("no audio member", where)
                        continue
                    if field is None and f"{key}.json" in texts:  # the first JSON member decides for all
                        field = _guess_field(texts[f"{key}.json"])
                    text = transcript(texts, key, field or "text")
                    if text is None:
                        skip("no transcript", where)
                        continue
                    info = next(i for i in infos if i.name == audio)
                    try:
                        duration = stream_duration(tar.extractfile(info), f"{name} member {audio}")
                    except AudioError as e:
                        skip("unreadable audio", where, str(e))
                        continue
                    members.append([key, round(duration, 4), infos[0].offset, end])
                    texts_kept.append(text)
                    seconds += duration
                cut = bool(groups) and groups[-1][1][-1].offset_data + groups[-1][1][-1].size > size
                if damage and not cut:  # a cut inside the last member was counted with it
                    skip("damaged tar", name, f"unreadable after its last utterance above ({damage})")
        except (tarfile.TarError, OSError) as e:
            skip("damaged tar", name, f"unreadable ({e})")
        if not members:  # nothing to read from it
            print(f"leaving out {name}: no utterance in it")
            continue
        lines.append({"shard": name, "bytes": size, "utterances": len(members), "seconds": round(seconds, 3),
                      "members": members, "texts": texts_kept})
        total_s += seconds
    count = sum(x["utterances"] for x in lines)
    if not lines:
        raise ShardError(f"{folder}: no utterance with audio and a transcript in {len(tars)} tar files "
                         f"(skipped: {json.dumps(skipped)})")
    header = {HEADER_KEY: 1, "shards": len(lines), "utterances": count, "hours": round(total_s / 3600, 4),
              "source": str(folder), "codec": "as-is", "text_field": field or "text"}
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for x in lines:
            f.write(json.dumps(x, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    return {**header, "skipped": skipped}


def _is_index_file(path: Path) -> bool:
    """Whether the file at `path` begins with a shard index's header line (what may be replaced by a new index)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = json.loads(f.readline())
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and HEADER_KEY in head


def _guess_field(raw: bytes) -> str:
    """The first of TEXT_FIELDS that a JSON member holds as a string ("text" when none does)."""
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = None
    if isinstance(meta, dict):
        for name in TEXT_FIELDS:
            if isinstance(meta.get(name), str):
                return name
    return "text"

