"""Check a sharded corpus against its index before a long run: every shard read once, in order, each utterance's
bytes against the CRC-32 the index holds for them (`data shard` writes them, `data index` with `--checksums`;
without them an utterance is counted as unchecked). Training skips and counts a damaged utterance anyway; this says
beforehand which ones, so that their shards can be written again.
"""
from __future__ import annotations

import zlib
from typing import Any

import fsspec
from tqdm import tqdm

from .shards import ShardError, ShardIndex, map_in_processes

MAX_NAMED = 20  # damaged utterances named in the report; all are counted


def _verify_shard(work: tuple[str, list[list[Any]], list[int] | None]) -> tuple[int, list[str]]:
    """(utterances checked, the damaged ones' keys) of one shard, read in order."""
    url, members, crcs = work
    if crcs is None:
        return 0, []
    damaged = []
    with fsspec.open(url, "rb") as f:
        for (key, _, start, end), crc in zip(members, crcs):
            f.seek(start)
            if zlib.crc32(f.read(end - start)) != crc:
                damaged.append(str(key))
    return len(members), damaged


def verify_shards(source: str, jobs: int = 1, progress: bool = False) -> dict[str, Any]:
    """Read every shard of the index at `source` (a folder, the file or a URL) and compare each utterance's bytes
    with the index's CRC-32. Returns shards, utterances, checked, unchecked (no checksum in the index), damaged
    (a count) and the first MAX_NAMED damaged as "SHARD member KEY". ShardError (one line) when the index or a
    shard's size does not hold, before any shard is read."""
    index = ShardIndex(source)
    index.check()
    work = ((s.url, *index.entries(n)) for n, s in enumerate(index.shards))
    checked, damaged, named = 0, 0, []
    bar = tqdm(total=len(index.shards), unit="shard", disable=not progress)
    try:
        for (n, bad), shard in zip(map_in_processes(_verify_shard, work, jobs), index.shards):
            checked += n
            damaged += len(bad)
            named += [f"{shard.url} member {key}" for key in bad][:MAX_NAMED - len(named)]
            bar.update()
    except Exception as e:  # a shard gone or unreadable since the size check (fsspec raises per-backend types)
        raise ShardError(f"{index.path}: a shard cannot be read: {type(e).__name__}: {e}") from None
    finally:
        bar.close()
    return {"index": index.path, "shards": len(index.shards), "utterances": index.utterances, "checked": checked,
            "unchecked": index.utterances - checked, "damaged": damaged, "first_damaged": named}
