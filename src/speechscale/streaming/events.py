"""What a live stream says: typed events, serialized to JSON only at the edge (WebSocket, `transcribe --stream`).

    for event in stream.accept(samples):
        if isinstance(event, Final):
            print(event.text, [w.start for w in event.words])
        send(event.to_dict())   # {"type": "final", "text": ..., "words": [...]}
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, Union


@dataclass(frozen=True)
class Word:
    """A word of a transcript or of a stream's final: its start and end in seconds (from the recording's or the
    stream's start) and a confidence (0-1) from the CTC alignment (the greedy path, or the most likely path of a beam
    search's text over the frames); None where no time is known."""

    word: str
    start: float | None = None
    end: float | None = None
    confidence: float | None = None


@dataclass(frozen=True)
class Partial:
    """The current phrase's text so far (it may still change)."""

    text: str
    type: ClassVar[str] = "partial"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text}


@dataclass(frozen=True)
class Final:
    """A phrase that ended (at a pause, or at the stream's end): its text will not change."""

    text: str
    words: list[Word] = field(default_factory=list)
    type: ClassVar[str] = "final"

    def to_dict(self) -> dict[str, Any]:
        words = [{k: v for k, v in asdict(w).items() if v is not None} for w in self.words]
        return {"type": self.type, "text": self.text, "words": words}

    def in_digits(self, language: str = "en") -> Final:
        """This phrase with its numbers written in digits (a model spelling `language`), its words merged as
        decoding.digits merges them."""
        from ..decoding.digits import written

        res = written({"text": self.text, "words": self.to_dict()["words"]}, language)
        return Final(res["text"], [Word(**w) for w in res["words"]])


Event = Union[Partial, Final]


def within(event: Event, seconds: float) -> Event:
    """`event` with its words' times inside the first `seconds` of audio (the last output frame reaches past the audio
    by up to a frame's length)."""
    if not isinstance(event, Final) or all(w.end is None or w.end <= seconds for w in event.words):
        return event
    words = [w if w.end is None or w.end <= seconds else
             Word(w.word, min(w.start, round(seconds, 3)) if w.start is not None else None, round(seconds, 3),
                  w.confidence) for w in event.words]
    return replace(event, words=words)
