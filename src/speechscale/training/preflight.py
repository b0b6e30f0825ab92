"""Checks that need the file system or the data, run before any work starts; each fails in one line."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Iterator

from .. import storage
from ..config import Config, ConfigError
from ..data.manifest import SkipReport
from ..data.shards import ShardError, is_shard_index, transcripts
from ..data.text import AUTO_ALPHABET, TextNormalizer, suggest_alphabet

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


def _training_texts(cfg: Config, count: list[int]) -> Iterator[str]:
    """The training transcripts as written (data.train_manifest or data.mix, as data.filter and data.train_slice
    select them; a shard index's own list of them); `count[0]` counts them."""
    d = cfg.data
    for m in d.mix or [d.train_manifest]:
        shards = is_shard_index(m)
        for text in transcripts(m, SkipReport(m), None if shards else d.filter,
                                None if shards or d.mix else d.train_slice, d.allow_external_shards):
            count[0] += 1
            yield text


def resolve_alphabet(cfg: Config) -> None:
    """text.alphabet=auto -> the characters of the training transcripts (data.train_manifest or data.mix, as
    data.filter and data.train_slice select them; a shard index's own list of them), normalized as text.digits and
    digits_language say; in place. Every rank reads the same lines, so every rank gets the same alphabet; the run's
    checkpoints keep it."""
    if cfg.text.alphabet != AUTO_ALPHABET:
        return
    manifests = cfg.data.mix or [cfg.data.train_manifest]
    count = [0]
    try:
        found = suggest_alphabet(_training_texts(cfg, count), cfg.text.digits, cfg.text.digits_language)["alphabet"]
    except ShardError as e:
        raise ConfigError(f"text.alphabet=auto: {e}") from None
    if not found.strip():
        raise ConfigError(f"text.alphabet=auto: the training transcripts ({', '.join(manifests)}) hold no character "
                          "to spell")
    cfg.text.alphabet = found
    if int(os.environ.get("RANK", 0)) == 0:
        log.info("text.alphabet=auto: %r, the %d characters of %d training transcripts", found, len(found), count[0])


def resolve_pieces(cfg: Config, resumed: dict[str, Any] | None = None) -> None:
    """text.pieces=N without text.piece_list -> up to N word pieces, in place: those of the checkpoint the run
    resumes (`resumed`: its config's text part) when it learned N too, else learned from the training transcripts
    as the model's targets are (normalized, those the alphabet spells). Every rank learns the same pieces from the
    same lines; the run's checkpoints keep them."""
    t = cfg.text
    if not t.pieces or t.piece_list:
        return
    if resumed and resumed.get("pieces") == t.pieces and resumed.get("piece_list"):
        t.piece_list, t.piece_scores = list(resumed["piece_list"]), list(resumed.get("piece_scores", []))
        return
    from ..data.pieces import learn_pieces, too_few_pieces

    few = too_few_pieces(t.pieces, t.alphabet)  # text.alphabet=auto: known only now
    if few:
        raise ConfigError(few)
    normalize = TextNormalizer(t.alphabet, t.digits, t.digits_language)
    alphabet, count = set(t.alphabet), [0]
    texts = (x for x in map(normalize, _training_texts(cfg, count)) if x and set(x) <= alphabet)
    try:
        t.piece_list, t.piece_scores = learn_pieces(texts, t.pieces, t.alphabet)
    except ShardError as e:
        raise ConfigError(f"text.pieces: {e}") from None
    if int(os.environ.get("RANK", 0)) == 0:
        fewer = f" (the transcripts hold no more than {len(t.piece_list)})" if len(t.piece_list) < t.pieces else ""
        log.info("text.pieces=%d: %d word pieces learned from %d training transcripts%s", t.pieces,
                 len(t.piece_list), count[0], fewer)
