"""Subtitles from a transcript's timed words: cues of at most `lines` lines of `line_chars` characters and
`max_seconds` each, a new cue after a pause of `pause_s`, written as SRT or WebVTT.

    cues = make_cues(result["words"], duration=result["duration"])
    Path("talk.srt").write_text(render(cues, "srt"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FORMATS = ("srt", "vtt")


@dataclass(frozen=True)
class Cue:
    """One subtitle: shown from `start` to `end` (s), its text in lines."""

    start: float
    end: float
    lines: list[str]


def wrap(words: list[str], line_chars: int, lines: int) -> list[str] | None:
    """`words` in at most `lines` lines of at most `line_chars` characters, the longest line as short as it can be;
    None when they do not fit (a single word longer than a line stands alone on its line)."""
    if len(words) == 1:
        return [words[0]]
    best: list[str] | None = None
    if len(" ".join(words)) <= line_chars:
        return [" ".join(words)]
    if lines > 1:
        for k in range(1, len(words)):
            head = " ".join(words[:k])
            if len(head) > line_chars:
                break
            rest = wrap(words[k:], line_chars, lines - 1)
            if rest is not None and (best is None or max(map(len, [head, *rest])) < max(map(len, best))):
                best = [head, *rest]
    return best


def make_cues(words: list[Any], duration: float | None = None, line_chars: int = 42, lines: int = 2,
              max_seconds: float = 7.0, pause_s: float = 0.8) -> list[Cue]:
    """Cues from timed words (dicts with word, start, end, or objects with those attributes), in order. A cue ends
    at its last word's end, kept inside the audio (`duration`) and before the next cue. ValueError when a word has
    no time, or when a rule is out of range."""
    for name, value, least in (("line_chars", line_chars, 1), ("lines", lines, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    for name, value in (("max_seconds", max_seconds), ("pause_s", pause_s)):
        if not (isinstance(value, (int, float)) and 0 < value < math.inf):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    timed = []
    for w in words:
        get = w.get if isinstance(w, dict) else lambda k, w=w: getattr(w, k, None)
        if get("start") is None or get("end") is None:
            raise ValueError(f"the word {get('word')!r} has no time: subtitles need timed words")
        timed.append((str(get("word")), float(get("start")), float(get("end"))))
    groups: list[tuple[list[tuple[str, float, float]], list[str]]] = []  # (words, their lines)
    for word in timed:
        cur = groups[-1][0] if groups else None
        wrapped = None
        if cur is not None and word[1] - cur[-1][2] < pause_s and word[2] - cur[0][1] <= max_seconds:
            wrapped = wrap([w for w, _, _ in cur] + [word[0]], line_chars, lines)
        if cur is None or wrapped is None:
            groups.append(([word], [word[0]]))  # a word alone: on its line, however long
        else:
            cur.append(word)
            groups[-1] = (cur, wrapped)
    cues = []
    for i, (group, text) in enumerate(groups):
        start, end = group[0][1], group[-1][2]
        if i + 1 < len(groups):
            end = min(end, groups[i + 1][0][0][1])
        if duration is not None:
            start, end = min(start, duration), min(end, duration)
        cues.append(Cue(round(start, 3), round(max(end, start + 0.001), 3), text))
    return cues


def timestamp(seconds: float, fmt: str) -> str:
    """HH:MM:SS,mmm (srt) or HH:MM:SS.mmm (vtt)."""
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{',' if fmt == 'srt' else '.'}{ms:03d}"


def render(cues: list[Cue], fmt: str) -> str:
    """The cues as an SRT or WebVTT file's text."""
    if fmt not in FORMATS:
        raise ValueError(f"subtitles are one of {', '.join(FORMATS)}, not {fmt!r}")
    blocks = [("" if fmt == "vtt" else f"{i}\n") + f"{timestamp(c.start, fmt)} --> {timestamp(c.end, fmt)}\n"
              + "\n".join(c.lines) + "\n" for i, c in enumerate(cues, 1)]
    return ("WEBVTT\n\n" if fmt == "vtt" else "") + "\n".join(blocks)
