"""Word n-gram language models: build a Kneser-Ney ARPA file from text, and score words with KenLM.

    speechscale lm build corpus.txt --order 3 --out lm.arpa

`build_arpa` normalizes every line with the model's text normalizer and counts n-grams with kaldingram
(pure Python, SRILM-compatible unmodified Kneser-Ney; KenLM's lmplz ships in no wheel). kaldingram reads and
writes latin-1: the corpus goes to it as UTF-8 bytes, each read as one latin-1 character, and its ARPA text
comes back to UTF-8 the same way, so any script survives (it splits words on spaces and tabs only, never on a
byte of a multi-byte character); at order 1 it counts only each line's first word, so orders start at 2.
kaldingram writes no `<unk>`: the corpus gets one extra line holding `<unk>`, so the model gives unknown words the
probability of a word seen once and every distribution still sums to one (tested). `KenLMScorer` reads
ARPA or binary KenLM files through the `kenlm` module of the kenlm-ex wheel.
"""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from ..config import ConfigError
from ..storage.files import text_lines

UNK = "<unk>"
KENLM_MAX_ORDER = 6  # the highest n-gram order the kenlm-ex wheel is compiled for (KENLM_MAX_ORDER)


def build_arpa(text: str | Path, order: int, out: str | Path, normalize: Callable[[str], str] | None = None
               ) -> dict[str, Any]:
    """Write a Kneser-Ney ARPA model of `order` from the lines of `text` (normalized by `normalize`, default
    the default TextNormalizer) to `out`; returns counts."""
    from ..data.text import TextNormalizer
    from ..extras import require

    NgramCounts = require("kaldingram.train", "decode", "lm build").NgramCounts

    normalize = normalize or TextNormalizer()
    if order < 2:
        raise ConfigError(f"--order must be at least 2, not {order}: a unigram model cannot be built here")
    if order > KENLM_MAX_ORDER:
        raise ConfigError(f"--order must be at most {KENLM_MAX_ORDER}, not {order}: KenLM (kenlm-ex) reads models up to "
                          f"that order")
    if "://" in str(text):
        raise ConfigError(f"{text}: the text to count is read from a local file; copy it here first")
    text = Path(text)
    if not text.is_file():
        raise ConfigError(f"{text}: no such text file")
    lines = 0
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as corpus:
        for raw in _sentences(text):
            line = " ".join(normalize(raw).split())
            if line:
                corpus.write(line + "\n")
                lines += 1
        if not lines:
            raise ConfigError(f"{text}: no words in it")
        corpus.write(UNK + "\n")
        corpus.flush()
        with contextlib.redirect_stderr(io.StringIO()):  # kaldingram's progress bars
            counts = NgramCounts(order)
            counts.add_raw_counts_from_file(corpus.name)
            counts.cal_discounting_constants()
            # D = n1 / (n1 + 2 n2) is 1 when no n-gram of an order occurs twice (a small corpus, e.g. one
            # sentence): every seen n-gram would then get probability 0 (-99 in the ARPA) and a search with the LM
            # would avoid exactly the word sequences it was built from. A typical KN discount instead.
            counts.d = [0.75 if d >= 1.0 else d for d in counts.d]
            counts.cal_f()
            counts.cal_bow()
            buf = io.StringIO()
            counts.print_as_arpa(fout=buf)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(buf.getvalue().encode("latin-1").decode("utf-8"), encoding="utf-8")
    ngrams = {n + 1: sum(len(c.word_to_f) for c in counts.counts[n].values()) for n in range(order)}
    return {"out": str(out), "order": order, "lines": lines, "ngrams": ngrams}


def _sentences(path: Path) -> Iterator[str]:
    """The lines of a text file, or the transcripts of a JSONL manifest (`.jsonl`) or a shard index."""
    from ..data.manifest import SkipReport
    from ..data.shards import ShardError, is_shard_index, transcripts

    if path.suffix != ".jsonl" and not is_shard_index(str(path)):
        yield from text_lines(path, strict=False)
        return
    try:
        yield from transcripts(str(path), SkipReport(str(path)))
    except ShardError as e:
        raise ConfigError(str(e)) from None


class KenLMScorer:
    """log10 word probabilities from a KenLM model (ARPA or binary), with the state API."""

    def __init__(self, path: str | Path) -> None:
        from ..extras import require

        kenlm = require("kenlm", "decode", "a KenLM language model")

        if not Path(path).is_file():
            raise ConfigError(f"language model not found: {path}")
        config = kenlm.Config()
        config.show_progress = logging.getLogger(__name__).isEnabledFor(logging.INFO)  # its star bar: not under -q
        try:
            self.model = kenlm.Model(str(path), config)
        except (OSError, RuntimeError, ValueError) as e:  # ValueError: bytes that are not UTF-8 in an ARPA header
            raise ConfigError(f"{path}: not a KenLM model (ARPA or binary): {e}") from None
        self.kenlm, self.path = kenlm, Path(path)
        self.order = self.model.order

    def begin(self) -> Any:
        state = self.kenlm.State()
        self.model.BeginSentenceWrite(state)
        return state

    def score(self, state: Any, word: str) -> tuple[Any, float]:
        """(next state, log10 P(word | state))."""
        out = self.kenlm.State()
        return out, self.model.BaseScore(state, word, out)

    def vocabulary(self) -> list[str]:
        """The unigrams of the model's ARPA file (the words a lexicon-less beam search may emit); [] for a
        binary model, whose vocabulary cannot be read back."""
        if self.path.suffix == ".bin":
            return []
        words, inside = [], False
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("\\1-grams:"):
                    inside = True
                elif line.startswith("\\"):
                    if inside:
                        break
                elif inside and line.strip():
                    w = line.split("\t")[1].strip()
                    if w not in ("<s>", "</s>", UNK):
                        words.append(w)
        return words
