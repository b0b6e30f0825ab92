"""Checks that need the file system or the data, run before any work starts; each fails in one line."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

from .. import storage
from ..config import Config, ConfigError
from ..data.manifest import SkipReport
from ..data.shards import ShardError, is_shard_index, transcripts
from ..data.text import AUTO_ALPHABET, suggest_alphabet

log = logging.getLogger(__name__)


def check_writable(where: str | Path, key: str) -> None:
    """ConfigError when a local folder cannot be created or written (remote URLs: the first write tells)."""
    if storage.is_remote(where):
        return
    try:
        storage.check_writable(where)
    except OSError as e:
        raise ConfigError(f"{key}: cannot write to {where} ({e.strerror or e})") from None


def check_fresh(ckpt_dir: str, resume: str, out_dir: str) -> None:
    """ConfigError when a run that starts fresh (no trainer.resume) would write into another run's checkpoints:
    its best.pt and last.pt would be replaced, and the rotation would keep the other run's higher steps."""
    if resume:
        return
    found = [n for n in ("last.pt", "best.pt", "latest") if storage.exists(storage.join(ckpt_dir, n))]
    found += storage.list_names(ckpt_dir, "step-*.pt")[-1:]
    if found:
        raise ConfigError(f"trainer.out_dir={out_dir} already holds a run's checkpoints ({', '.join(found)}): "
                          f"continue it with trainer.resume=auto, or start over in another trainer.out_dir (or "
                          f"remove {ckpt_dir})")


def resolve_alphabet(cfg: Config) -> None:
    """text.alphabet=auto -> the characters of the training transcripts (data.train_manifest or data.mix, as
    data.filter and data.train_slice select them; a shard index's own list of them), normalized as text.digits and
    digits_language say; in place. Every rank reads the same lines, so every rank gets the same alphabet; the run's
    checkpoints keep it."""
    if cfg.text.alphabet != AUTO_ALPHABET:
        return
    d = cfg.data
    manifests = d.mix or [d.train_manifest]
    count = [0]

    def texts() -> Iterator[str]:
        for m in manifests:
            shards = is_shard_index(m)
            for text in transcripts(m, SkipReport(m), None if shards else d.filter,
                                    None if shards or d.mix else d.train_slice, d.allow_external_shards):
                count[0] += 1
                yield text

    try:
        found = suggest_alphabet(texts(), cfg.text.digits, cfg.text.digits_language)["alphabet"]
    except ShardError as e:
        raise ConfigError(f"text.alphabet=auto: {e}") from None
    if not found.strip():
        raise ConfigError(f"text.alphabet=auto: the training transcripts ({', '.join(manifests)}) hold no character "
                          "to spell")
    cfg.text.alphabet = found
    if int(os.environ.get("RANK", 0)) == 0:
        log.info("text.alphabet=auto: %r, the %d characters of %d training transcripts", found, len(found), count[0])
