"""Split a manifest into train, dev and test manifests, by utterance or with whole groups (speakers) held out: a
model validated on voices it trained on looks far better than it is on new ones.

Two passes over the manifest, in flat memory: the first sums each group's hours, the second writes each line to
its split. Groups are shuffled with the seed; each goes to test, else dev, when it brings that split closer to
its share of the hours, else to train. Lines without the field train (an unknown speaker might be a held-out one).
Segments of one recording (lines with an `offset`) always land in one split: drawn by their recording, or with
`--by audio_filepath` held out as a group.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

from ..config import ConfigError
from .manifest import SkipReport, Utterance, iter_manifest
from .shards import is_shard_index

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


RECORDING = "audio_filepath"  # --by this: each recording (all its segments) in one split


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _recording(u: Utterance, base: str) -> str:
    """`u`'s recording as its resolved path relative to `base` (the manifest's resolved folder): the same key
    wherever the corpus is copied, so a seed gives the same split on every machine."""
    return os.path.relpath(os.path.realpath(u.audio_path), base)


def _group(u: Utterance, by: str, base: str) -> str | None:
    """The key of `u`'s group by field `by` (its recording for audio_filepath); None without it."""
    if by == RECORDING:
        return _key(_recording(u, base))
    return _key(u.extra[by]) if by in u.extra else None


def split_manifest(source: str | Path, out: str | Path, by: str | None = None, dev: float = 0.05,
                   test: float = 0.05, seed: int = 0) -> dict[str, Any]:
    """Write OUT/train.jsonl, dev.jsonl and test.jsonl from `source`'s valid lines: with `by`, each value of that
    field in one split only (about `dev` and `test` of the hours held out; `audio_filepath`: each recording); without,
    each utterance drawn on its own, a recording's segments (lines with an offset) drawn together. Audio paths are
    rewritten relative to OUT. Returns per split its utterances, hours and groups."""
    if not (0 <= dev < 1 and 0 <= test < 1 and dev + test < 1):
        raise ConfigError(f"--dev {dev} and --test {test} must be shares in [0, 1) that leave some for training")
    if is_shard_index(str(source)):
        raise ConfigError(f"{source}: data split takes a JSONL manifest; split the manifest the shards came from, then "
                          f"shard each split")
    source, out = Path(source), Path(out)
    base = os.path.realpath(source.parent)
    for name in SPLITS:
        if (out / f"{name}.jsonl").exists() and source.exists() and (out / f"{name}.jsonl").samefile(source):
            raise ConfigError(f"--out {out} would write {name}.jsonl over the manifest being split; choose another "
                              f"folder")
    hours: dict[str, float] = {}
    total = 0.0
    first = SkipReport(str(source))
    for u in iter_manifest(source, first, check_files=False):
        total += u.duration
        key = None if by is None else _group(u, by, base)
        if key is not None:
            hours[key] = hours.get(key, 0.0) + u.duration
    if not first.kept:
        raise ConfigError(f"{source}: no utterance to split ({first.summary()})")
    if by is not None and not hours:
        raise ConfigError(f"{source}: no line has the field {by!r} to split by")
    assign: dict[str, str] = {}
    if by is not None:
        groups = sorted(hours)
        random.Random(seed).shuffle(groups)
        held, target = {"test": 0.0, "dev": 0.0}, {"test": test * total, "dev": dev * total}
        for key in groups:  # a group goes to the first held-out split it brings closer to its share
            name = next((s for s in ("test", "dev")
                         if abs(held[s] + hours[key] - target[s]) < abs(held[s] - target[s])), "train")
            assign[key] = name
            if name != "train":
                held[name] += hours[key]
    out.mkdir(parents=True, exist_ok=True)
    summary = {s: {"utterances": 0, "hours": 0.0, "groups": set()} for s in SPLITS}
    files = {s: open(out / f"{s}.jsonl", "w", encoding="utf-8") for s in SPLITS}
    try:
        for u in iter_manifest(source, SkipReport(str(source)), check_files=False):
            if by is None:
                name = _draw(seed, u.line if u.offset is None else _recording(u, base), dev, test)
            else:
                key = _group(u, by, base)
                name = "train" if key is None else assign.get(key, "train")
                summary[name]["groups"].add(key)
            record = u.record(os.path.relpath(u.audio_path, out))
            files[name].write(json.dumps(record, ensure_ascii=False) + "\n")
            summary[name]["utterances"] += 1
            summary[name]["hours"] += u.duration / 3600
    finally:
        for f in files.values():
            f.close()
    for name, share in (("dev", dev), ("test", test)):
        if share > 0 and not summary[name]["utterances"]:
            why = (f"no {by} holds close to {share:g} of the hours (the smallest: "
                   f"{min(hours.values()) / total:.3g})" if by is not None else f"no utterance drew a share of {share:g}")
            log.warning("%s is empty: %s; give a larger --%s%s", out / f"{name}.jsonl", why, name,
                        " or another --by" if by is not None else "")
    return {"source": str(source), "by": by, "seed": seed, "skipped": dict(first.reasons),
            **{s: {"utterances": v["utterances"], "hours": round(v["hours"], 4),
                   **({"groups": len(v["groups"] - {None})} if by is not None else {})} for s, v in summary.items()}}


def _draw(seed: int, item: int | str, dev: float, test: float) -> str:
    """The split of `item` (a manifest line's number, or the recording a segment line cuts) when utterances are
    drawn one by one: a hash of (seed, item), so the same seed gives the same split however the file is read."""
    x = int.from_bytes(hashlib.blake2b(f"{seed}:{item}".encode(), digest_size=8).digest(), "big") / 2 ** 64
    return "test" if x < test else "dev" if x < test + dev else "train"
