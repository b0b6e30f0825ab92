"""CTC decoders behind one interface: log-probabilities (B, T, V) and lengths (B,) -> one text each.

    greedy   best class per frame, repeats merged, blanks dropped
    beam     beam search (flashlight-text); with a KenLM word model (`lm`) its vocabulary is the lexicon,
             `alpha` weighs the LM and `beta` is a bonus per word; without one, a lexicon-free search
    lexicon  beam search that may emit only the words of `lexicon` (a closed vocabulary), optionally
             with the LM; `hotwords` get a bonus each time they are emitted (either beam mode)

    >>> decoder = build_decoder("greedy", tokenizer)          # doctest: +SKIP
    >>> decoder(log_probs, lengths)                           # doctest: +SKIP

flashlight-text is the search (a wheel, no build); kenlm-ex provides `import kenlm` for the word
scores. The LM reaches flashlight's decoder through `FlashlightLM`, a Python LM over KenLM's state API.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import torch

from ..config import ConfigError, finite_number
from ..data.pieces import PieceTokenizer
from ..data.text import BLANK, Tokenizer
from ..storage.files import text_lines
from .alignment import text_word_times, word_times
from .greedy import greedy_decode

DECODERS = ("greedy", "beam", "lexicon")
_NEVER = -1e10  # log-probability of a token that may not be emitted (finite: the search adds scores)
LN10 = 2.302585092994046  # KenLM scores in log10; the search adds natural logs
PIECE_TOKENS = 16  # a word-piece search tries this many of a frame's most likely pieces (CTC's outputs are peaked)


class Decoder(Protocol):
    """Log-probabilities (B, T, V) and lengths (B,) -> one text each; and the words of one decoded text."""

    def __call__(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[str]: ...

    def words(self, log_probs: torch.Tensor, frames: int, text: str, frame_s: float, offset_s: float
              ) -> list[dict[str, Any]]:
        """The words of `text` decoded from log_probs (T, V)[:frames]; with timings where the decoder knows them."""
        ...


class GreedyDecoder:
    """Best class per frame, repeats merged, blanks dropped; its words carry start, end and confidence."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[str]:
        return greedy_decode(log_probs, lengths, self.tokenizer)

    def words(self, log_probs: torch.Tensor, frames: int, text: str, frame_s: float, offset_s: float
              ) -> list[dict[str, Any]]:
        """The greedy path's words, each with start and end (s) and a confidence from the CTC alignment."""
        return word_times(log_probs, frames, self.tokenizer, frame_s, offset_s)


@dataclass
class DecoderConfig:
    """How to decode; travels as plain data (CLI flags, tune-lm's result)."""

    name: str = "greedy"
    beam_width: int = 50
    lm: str = ""                 # a KenLM model (ARPA or binary)
    alpha: float = 0.5           # LM weight (natural-log LM score x alpha)
    beta: float = 1.0            # bonus per emitted word
    lexicon: str = ""            # a word list, one word a line (lexicon decoder)
    hotwords: list[str] = field(default_factory=list)  # words to favour (added to the vocabulary if missing)
    hotword_weight: float = 3.0  # their bonus (natural log) each time one is emitted


def build_decoder(cfg: DecoderConfig | str, tokenizer: Tokenizer,
                  normalize: Callable[[str], str] | None = None) -> Decoder:
    """The decoder `cfg` names (a DecoderConfig or just a name)."""
    cfg = DecoderConfig(name=cfg) if isinstance(cfg, str) else cfg
    if cfg.name not in DECODERS:
        raise ConfigError(f"decoder must be one of {', '.join(DECODERS)}, not {cfg.name!r}")
    if cfg.name == "greedy":
        given = [flag for flag, value in (("--lm", cfg.lm), ("--lexicon", cfg.lexicon), ("--hotwords", cfg.hotwords))
                 if value]
        if given:  # a word list the greedy decoder would silently not use
            raise ConfigError(f"{' and '.join(given)} go with --decoder beam or lexicon: the greedy decoder reads "
                              "no words")
        return GreedyDecoder(tokenizer)
    if isinstance(cfg.beam_width, bool) or not isinstance(cfg.beam_width, int) or cfg.beam_width < 1:
        raise ConfigError(f"beam_width must be a whole number of at least 1, got {cfg.beam_width!r}")
    for flag, value in (("alpha", cfg.alpha), ("beta", cfg.beta), ("hotword_weight", cfg.hotword_weight)):
        if not finite_number(value):
            raise ConfigError(f"{flag} must be a finite number, got {value!r}")
    if cfg.name == "lexicon" and not cfg.lexicon:
        raise ConfigError("the lexicon decoder needs --lexicon (a word list, one word a line)")
    return BeamDecoder(cfg, tokenizer, normalize)


class BeamDecoder:
    """flashlight-text's lexicon-free or lexicon beam search over CTC log-probabilities."""

    def __init__(self, cfg: DecoderConfig, tokenizer: Tokenizer,
                 normalize: Callable[[str], str] | None = None) -> None:
        from ..extras import require

        fl = require("flashlight.lib.text.decoder", "decode", f"the {cfg.name} decoder")

        self.tokenizer = tokenizer
        pieces = isinstance(tokenizer, PieceTokenizer)
        if not pieces and tokenizer.space_id is None:
            raise ConfigError("beam search needs the space character in the alphabet (the word separator)")
        words = _read_words(cfg.lexicon, normalize) if cfg.lexicon else []
        scorer = None
        if cfg.lm:
            from .lm import KenLMScorer

            scorer = KenLMScorer(cfg.lm)
            words = words or scorer.vocabulary()
        if scorer is not None and not words:
            raise ConfigError("a binary LM needs --lexicon: its vocabulary cannot be read back")
        hot = {(normalize(w) if normalize else w).strip() for w in cfg.hotwords} - {""}
        if hot and not words:
            raise ConfigError("--hotwords need a word list to favour them in: give --lm or --lexicon")
        words = words + sorted(hot - set(words))
        self.vocabulary = words
        self.end_frame: torch.Tensor | None = None
        if scorer is not None and cfg.alpha <= 0:
            scorer = None  # alpha 0: the LM has no say
        lm_weight = cfg.alpha if scorer is not None else 1.0  # with words; a bonus inside the LM is divided by it
        if pieces:
            self._pieces_search(fl, cfg, words, scorer, hot, lm_weight)
            return
        self.space = tokenizer.space_id
        if not words:  # lexicon-free, no LM: a plain beam over characters
            opts = fl.LexiconFreeDecoderOptions(beam_size=cfg.beam_width, beam_size_token=tokenizer.vocab_size,
                                                beam_threshold=50.0, lm_weight=0.0, sil_score=0.0, log_add=False,
                                                criterion_type=fl.CriterionType.CTC)
            self.decoder = fl.LexiconFreeDecoder(opts, fl.ZeroLM(), self.space, BLANK, [])
            return
        # The trie ends every word with a space, but a model need not emit one after the last word (one trained on
        # single words never does): without it, a final word costs the model's least likely token and the search
        # would rather drop it. A frame where only the space may be emitted, appended to each utterance of a
        # search with a vocabulary, makes the utterance's end a word boundary for free.
        self.end_frame = torch.full((1, tokenizer.vocab_size), _NEVER)  # (1, V)
        self.end_frame[0, self.space] = 0.0
        # hotwords: a bonus inside the LM's word score, divided by the LM weight the decoder multiplies it by
        bonus = {i: cfg.hotword_weight / lm_weight for i, w in enumerate(words) if w in hot}
        self.lm = _flashlight_lm_class()(scorer, words, bonus) if scorer is not None or bonus else fl.ZeroLM()
        trie = fl.Trie(tokenizer.vocab_size, self.space)
        start = self.lm.start(False)
        for i, w in enumerate(words):
            if tokenizer.oov(w):
                continue  # characters the model cannot emit
            spelling = tokenizer.encode(w)
            _, score = self.lm.score(start, i)
            trie.insert(spelling + [self.space], i, score)
        trie.smear(fl.SmearingMode.MAX)
        opts = fl.LexiconDecoderOptions(beam_size=cfg.beam_width, beam_size_token=tokenizer.vocab_size,
                                        beam_threshold=50.0, lm_weight=lm_weight if (scorer or bonus) else 0.0,
                                        word_score=cfg.beta, unk_score=float("-inf"), sil_score=0.0,
                                        log_add=False, criterion_type=fl.CriterionType.CTC)
        self.decoder = fl.LexiconDecoder(opts, trie, self.lm, self.space, BLANK, len(words), [], False)

    def _pieces_search(self, fl: Any, cfg: DecoderConfig, words: list[str], scorer: Any, hot: set[str],
                       lm_weight: float) -> None:
        """A word-piece model's search: over pieces freely; with a word list, over pieces that spell its words only,
        each word scored by the LM (and its bonuses) once its last piece is followed by a word's start or the end."""
        tok = self.tokenizer
        sil = BLANK if tok.space_id is None else tok.space_id  # the word start alone; no piece is a bare separator
        lm: Any = fl.ZeroLM()
        if not words:
            lm_weight = 0.0
        else:
            bonus = {w: (cfg.beta + (cfg.hotword_weight if w in hot else 0.0)) / lm_weight for w in words}
            lm = _piece_lm_class()(scorer, tok.units, [w for w in words if not tok.oov(w)], bonus)
        opts = fl.LexiconFreeDecoderOptions(beam_size=cfg.beam_width, beam_size_token=min(tok.vocab_size, PIECE_TOKENS),
                                            beam_threshold=50.0, lm_weight=lm_weight, sil_score=0.0, log_add=False,
                                            criterion_type=fl.CriterionType.CTC)
        self.lm, self.decoder = lm, fl.LexiconFreeDecoder(opts, lm, sil, BLANK, [])

    def __call__(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[str]:
        out = []
        emissions = log_probs.float().cpu().contiguous()  # (B, T, V)
        for b, n in enumerate(lengths.cpu().tolist()):
            em = emissions[b, :n]  # (T, V)
            if self.end_frame is not None:
                em = torch.cat([em, self.end_frame])  # (T + 1, V)
            em = em.contiguous()
            out.append(self._text(self.decoder.decode(em.data_ptr(), em.shape[0], em.shape[1])[0]))
        return out

    def words(self, log_probs: torch.Tensor, frames: int, text: str, frame_s: float, offset_s: float
              ) -> list[dict[str, Any]]:
        """The words of the best beam, each with start, end (s) and a confidence from the most likely CTC path of
        its text (decoding.alignment)."""
        return text_word_times(log_probs, frames, text, self.tokenizer, frame_s, offset_s)

    def _text(self, best: Any) -> str:
        if self.end_frame is not None:  # a character model's search over words: its words, by index
            return " ".join(self.vocabulary[i] for i in best.words if 0 <= i < len(self.vocabulary))
        ids = [t for t in torch.tensor(best.tokens, dtype=torch.long).unique_consecutive().tolist() if t != BLANK]
        return " ".join(self.tokenizer.decode(ids).split())

    def begin(self) -> None:
        """Start an incremental search (flashlight's decode_begin): then `step` frames as they come, `best` for the
        text so far, `end` for the final text. Frames fed in pieces give what `decoder([all frames])` gives. One
        search at a time per decoder."""
        self.decoder.decode_begin()

    def step(self, log_probs: torch.Tensor) -> None:
        """More frames (T, V) of log-probabilities."""
        if log_probs.shape[0]:
            em = log_probs.float().cpu().contiguous()
            self.decoder.decode_step(em.data_ptr(), em.shape[0], em.shape[1])

    def best(self) -> str:
        """The best beam's text so far (it can still change)."""
        return self._text(self.decoder.get_best_hypothesis(0))

    def end(self) -> str:
        """The search's final text (the utterance's end frame as in `__call__`, then decode_end)."""
        if self.end_frame is not None:
            self.step(self.end_frame)
        self.decoder.decode_end()
        hyps = self.decoder.get_all_final_hypothesis()
        return self._text(hyps[0]) if hyps else ""


def _read_words(path: str, normalize: Callable[[str], str] | None) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"lexicon not found: {path}")
    seen: dict[str, None] = {}
    for line in text_lines(p, strict=False):
        w = (normalize(line) if normalize else line).strip()
        if w and " " not in w:
            seen[w] = None
    if not seen:
        raise ConfigError(f"{path}: no words in it")
    return list(seen)


@functools.cache
def _flashlight_lm_class() -> type:
    """flashlight's LM base class is imported on first use (flashlight-text is an optional dependency)."""
    from flashlight.lib.text.decoder import LM

    class FlashlightLM(LM):
        """A word LM for flashlight's decoder over KenLM's state API (natural-log scores; without a scorer
        every word scores 0), plus the hotwords' bonus."""

        def __init__(self, scorer: Any, words: list[str], bonus: dict[int, float]) -> None:
            LM.__init__(self)
            self.scorer, self.words, self.bonus = scorer, words, bonus
            self.states: dict[Any, Any] = {}

        def start(self, start_with_nothing: bool) -> Any:
            from flashlight.lib.text.decoder import LMState

            state = LMState()
            self.states = {state: self.scorer.begin() if self.scorer else None}  # a search's states, not all searches'
            return state

        def _next(self, state: Any, word: str) -> tuple[Any, float]:
            if self.scorer is None:
                return None, 0.0
            nxt, log10 = self.scorer.score(self.states[state], word)
            return nxt, log10 * LN10

        def score(self, state: Any, word: int) -> tuple[Any, float]:
            out = state.child(word)
            nxt, ln = self._next(state, self.words[word] if word < len(self.words) else "<unk>")
            self.states.setdefault(out, nxt)
            return out, ln + self.bonus.get(word, 0.0)

        def finish(self, state: Any) -> tuple[Any, float]:
            out = state.child(-1)
            nxt, ln = self._next(state, "</s>")
            self.states.setdefault(out, nxt)
            return out, ln

    return FlashlightLM


@functools.cache
def _piece_lm_class() -> type:
    """The word LM of a word-piece model's search, as flashlight's token LM (imported on first use)."""
    from flashlight.lib.text.decoder import LM

    class PieceWordLM(LM):
        """flashlight's LM over word pieces: a state is the KenLM state before the current word and that word's
        letters so far. A piece that starts a word (or the search's end) ends the word before it, which scores its
        LM probability (natural log) plus its bonus, or -inf when the word list lacks it; letters that begin no
        word of the list score -inf at once, so the search only spells the list's words."""

        def __init__(self, scorer: Any, units: list[str], words: list[str], bonus: dict[str, float]) -> None:
            LM.__init__(self)
            self.scorer, self.words, self.bonus = scorer, set(words), bonus
            self.units = [(u.startswith(" "), u.strip()) for u in units]  # each piece: starts a word?, its letters
            self.prefixes = {w[:i] for w in words for i in range(len(w) + 1)}
            self.states: dict[Any, tuple[Any, str]] = {}
            self.scores: dict[Any, float] = {}

        def _word(self, before: Any, word: str) -> tuple[Any, float]:
            """The LM state after `word` and its score (natural log, its bonus added); -inf off the list."""
            if word not in self.words:
                return before, float("-inf")
            if self.scorer is None:
                return None, self.bonus.get(word, 0.0)
            after, log10 = self.scorer.score(before, word)
            return after, log10 * LN10 + self.bonus.get(word, 0.0)

        def start(self, start_with_nothing: bool) -> Any:
            from flashlight.lib.text.decoder import LMState

            state = LMState()
            self.states = {state: (self.scorer.begin() if self.scorer else None, "")}  # a search's, not all searches'
            self.scores = {}
            return state

        def score(self, state: Any, token: int) -> tuple[Any, float]:
            out = state.child(token)
            if out not in self.scores:
                before, letters = self.states[state]
                (starts, more), score = self.units[token - 1], 0.0
                if starts and letters:  # a word's start ends the word before it
                    before, score = self._word(before, letters)
                    letters = ""
                letters += more
                if letters not in self.prefixes:
                    score = float("-inf")
                self.states[out], self.scores[out] = (before, letters), score
            return out, self.scores[out]

        def finish(self, state: Any) -> tuple[Any, float]:
            out = state.child(-1)
            before, letters = self.states[state]
            score = 0.0
            if letters:
                before, score = self._word(before, letters)
            if self.scorer is not None and score > float("-inf"):
                before, log10 = self.scorer.score(before, "</s>")
                score += log10 * LN10
            self.states.setdefault(out, (before, ""))
            return out, score

    return PieceWordLM
