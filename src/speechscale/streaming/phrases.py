"""A stream's decoding: decided logits in order -> partial and final events, a phrase at a time.

Endpointing: a phrase ends (a Final whose words carry times from the stream's start and confidences, as the offline
transcript's words do) after `endpoint_frames` output frames of blank or space following some text; the next phrase
starts. The finals' texts joined with spaces are the transcript (except where the model emitted no space across
such a pause; `text` is always it). Greedy CTC, or a beam search of its own (decoding.decoders: beam, LM, lexicon)
searched incrementally, each phrase as its own utterance (phrases end where the greedy path is quiet). Of a quiet
stretch before a phrase's text only its last frames are kept, those in which a space said starts the phrase's first
word (decoding.alignment.path_words), so its words are timed as the offline transcript's are; a search that has found
nothing after `endpoint_frames` quiet frames starts again, so a silent stream holds a bounded search; and speech
without a pause ends a phrase at a space once it is `max_phrase_s` long.
"""
from __future__ import annotations

from typing import Any

import torch

from ..decoding.alignment import lead_frames, path_words, text_word_times
from ..decoding.greedy import BLANK
from .events import Event, Final, Partial, Word

MAX_PHRASE_SECONDS = 30.0  # a phrase this long ends at its next space (or, a third of that later, its next blank)
MAX_ENDPOINT_FRAMES = 1000  # the most quiet output frames a stream may ask for before a phrase ends


def check_endpoint_frames(value: Any) -> int:
    """`value` when it is a whole number of quiet output frames from 1 to MAX_ENDPOINT_FRAMES; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ENDPOINT_FRAMES:
        raise ValueError(f"endpoint_frames must be a whole number from 1 to {MAX_ENDPOINT_FRAMES}, got {value!r}")
    return value


class PhraseDecoder:
    """One stream's decoding state: the current phrase, the finals so far, the greedy path's last token."""

    def __init__(self, tokenizer: Any, frame_s: float, endpoint_frames: int = 30, search: Any = None,
                 max_phrase_s: float = MAX_PHRASE_SECONDS) -> None:
        self.tokenizer, self.frame_s, self.endpoint_frames = tokenizer, frame_s, endpoint_frames
        self.max_phrase_frames = max(1, round(max_phrase_s / frame_s))
        self.lead = lead_frames(frame_s)  # the quiet frames kept before a phrase's text
        self.beam, self.beam_text = search, ""  # the search and its current best text
        self.beam_frames: list[torch.Tensor] = []  # the log-probabilities the search has had this phrase
        if search is not None:
            search.begin()
        self.space = -1 if tokenizer.space_id is None else tokenizer.space_id
        self.frame, self.prev, self.quiet = 0, BLANK, 0
        self.chars: list[tuple[str, int]] = []  # the current phrase: (character or word piece, output frame)
        self.path: list[torch.Tensor] = []  # the current phrase's greedy path: (n,) best class a frame, in pieces
        self.path_probs: list[torch.Tensor] = []  # (n,) its probability a frame
        self.phrase_start = 0  # the output frame the phrase's kept frames start at (the end of its quiet start)
        self.finals: list[Final] = []
        self.pieces: list[str] = []  # the text of every greedy phrase, raw
        self.boundaries: list[int] = []  # output frames where phrases ended
        self.restarts: list[int] = []  # output frames where a search started again after a quiet stretch, no text

    @property
    def phrase(self) -> str:
        """The current (unfinished) phrase's text, as its partials show it."""
        if self.beam is not None:
            return self.beam_text
        return " ".join("".join(c for c, _ in self.chars).split())

    @property
    def text(self) -> str:
        """Everything decided so far, as the offline transcript writes it."""
        if self.beam is not None:
            return " ".join(x for x in [*(f.text for f in self.finals), self.beam_text] if x)
        return " ".join(("".join(self.pieces) + "".join(c for c, _ in self.chars)).split())

    @property
    def _spoken(self) -> bool:
        """Whether the current phrase's greedy path holds a character other than a space."""
        return any(c.strip() for c, _ in self.chars)

    def feed(self, logits: torch.Tensor) -> list[Event]:
        """Decided logits (n, V), in order -> a Final for each phrase that ended, then a Partial when the current
        phrase's text changed."""
        log_probs = logits.float().log_softmax(-1)  # (n, V)
        top = log_probs.max(-1)  # values (n,), indices (n,)
        best = top.indices.tolist()
        events: list[Event] = []
        before, fed = self.phrase, 0
        for i, token in enumerate(best):
            if token != self.prev and token != BLANK:
                self.chars.append((self.tokenizer.decode([token]), self.frame))
            self.prev = token
            self.quiet = self.quiet + 1 if token in (BLANK, self.space) else 0
            self.frame += 1
            if (self.quiet >= self.endpoint_frames or self._too_long(token)) and self._spoken:
                text = None
                if self.beam is not None:  # the phrase's frames end its search; the next phrase starts a new one
                    self._search(log_probs[fed:i + 1])
                    text = self.beam.end()
                else:
                    self._greedy(top, fed, i + 1)
                fed = i + 1
                events.append(self._final(text))
                before = ""
            elif self.beam is not None and self.quiet >= self.endpoint_frames and not self.beam_text and \
                    not self._spoken:  # quiet, no text: search again from here on
                self.beam.begin()
                self.beam_frames = _tail([*self.beam_frames, log_probs[fed:i + 1]], self.lead)
                self.chars, self.quiet, fed = [], 0, i + 1
                self.phrase_start = self.frame - _frames(self.beam_frames)
                self.restarts.append(self.frame)
        if self.beam is not None:
            self._search(log_probs[fed:])
            self.beam_text = self.beam.best()
        else:
            self._greedy(top, fed, len(best))
        if self.phrase and self.phrase != before:
            events.append(Partial(self.phrase))
        return events

    def end(self) -> list[Event]:
        """The stream's end: the last phrase as a Final, if it holds anything."""
        last = self.beam.end() if self.beam is not None else None
        return [self._final(last)] if self.chars or last else []

    def _too_long(self, token: int) -> bool:
        """The phrase has run past max_phrase_frames and `token` (this frame's) is a space, or past a third more and
        it is a blank: speech without a pause ends a phrase there, so a search and its frames stay bounded."""
        over = self.frame - self.phrase_start - self.max_phrase_frames
        return over >= 0 and (token == self.space or (token == BLANK and 3 * over >= self.max_phrase_frames))

    def _greedy(self, top: Any, lo: int, hi: int) -> None:
        """Keep frames lo:hi of a fed piece's greedy path (`top`: its best log-probabilities and classes), ending at
        output frame `self.frame`; while the phrase holds no text yet, only the last `lead` of its quiet frames."""
        if not self._spoken:
            self.path = _tail([*self.path, top.indices[lo:hi]], self.lead)
            self.path_probs = _tail([*self.path_probs, top.values[lo:hi].exp()], self.lead)
            self.phrase_start = self.frame - _frames(self.path)
        elif hi > lo:
            self.path.append(top.indices[lo:hi])
            self.path_probs.append(top.values[lo:hi].exp())

    def _search(self, log_probs: torch.Tensor) -> None:
        """Step the phrase's search over more of its frames (n, V)."""
        self.beam.step(log_probs)
        self.beam_frames.append(log_probs)

    def _final(self, beam_text: str | None = None) -> Final:
        """The current phrase as a Final, its words with start and end seconds from the stream's start and a confidence
        (greedy: its path's; a beam's: the most likely path of its text over the phrase's frames); a beam starts the
        next phrase. The next phrase keeps the quiet frames this one ends with, up to `lead`."""
        start, keep = self.phrase_start, min(self.lead, self.quiet)  # the phrase's first kept output frame
        self.phrase_start = self.frame - keep
        self.boundaries.append(self.frame)
        if self.beam is not None:
            text, frames = beam_text or "", torch.cat(self.beam_frames) if self.beam_frames else None
            timed = [{"word": w} for w in text.split()] if frames is None else \
                text_word_times(frames, frames.shape[0], text, self.tokenizer, self.frame_s, start * self.frame_s)
            event = Final(text, [Word(**w) for w in timed])
            self.chars, self.beam_text, self.beam_frames = [], "", [] if frames is None else _tail([frames], keep)
            self.beam.begin()
            self.finals.append(event)
            return event
        raw = "".join(c for c, _ in self.chars)
        path = torch.cat(self.path).tolist() if self.path else []
        probs = torch.cat(self.path_probs).tolist() if self.path_probs else []
        timed = path_words(path, probs, self.tokenizer, self.frame_s, start * self.frame_s)
        self.pieces.append(raw)
        self.chars, self.path, self.path_probs = [], _tail(self.path, keep), _tail(self.path_probs, keep)
        event = Final(" ".join(raw.split()), [Word(**w) for w in timed])
        self.finals.append(event)
        return event


def _tail(pieces: list[torch.Tensor], n: int) -> list[torch.Tensor]:
    """The last `n` rows of the pieces' concatenation, as one piece ([] when n is 0 or there are none)."""
    return [torch.cat(pieces)[-n:]] if n > 0 and pieces else []


def _frames(pieces: list[torch.Tensor]) -> int:
    return sum(p.shape[0] for p in pieces)
