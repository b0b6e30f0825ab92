"""What a corpus holds, read in one pass in flat memory: utterances and hours, the spread of durations (to choose
`data.max_duration` and `data.batch_seconds`), how fast its transcripts are spoken (letters per second: a
transcript far faster or slower than the rest is often the wrong one for its audio), and its manifest fields.

Works on manifests and shard indexes alike (an index lists durations and transcripts; manifest fields are not in
it). Durations are counted in 10 ms bins, so the quantiles are exact to 10 ms whatever the corpus's size.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator

import numpy as np

from .manifest import SkipReport, iter_manifest
from .shards import ShardIndex, is_shard_index

BIN_S = 0.01                 # duration histogram resolution
MAX_S = 3600.0               # longer utterances share the last bin
LONG_S = (16.7, 20.0, 30.0)  # common data.max_duration choices: what each would drop
MAX_VALUES = 100_000         # distinct values counted per field before it is reported as "more than"
QUANTILES = (0.5, 0.9, 0.99)


def _rows(source: str, report: SkipReport) -> Iterator[tuple[float, str, str, dict[str, Any]]]:
    """(duration, transcript as written, where, extra fields) of each utterance of a manifest or shard index."""
    if is_shard_index(source):
        index = ShardIndex(source)
        for shard, line in zip(index.shards, index.lines()):
            for (key, duration, _, _), text in zip(line["members"], index.line_texts(line, shard.utterances)):
                yield float(duration), text, f"{shard.url} member {key}", {}
        return
    for u in iter_manifest(source, report, check_files=False):
        yield u.duration, u.raw_text, f"{source} line {u.line}", u.extra


def corpus_stats(sources: list[str], top: int = 5, by: str | list[str] | None = None) -> dict[str, Any]:
    """The statistics of the utterances in `sources` (manifests or shard indexes) together; `top`: how many of the
    fastest and slowest spoken transcripts (and, for each field of `by`, of its values with the most hours) to
    name; `by` in the result maps each field to its values, as eval's `--by` does."""
    fields_by = [by] if isinstance(by, str) else list(dict.fromkeys(by or []))
    durations = DurationCounts()
    rates = np.zeros(4001, dtype=np.int64)  # letters per second in 0.01 steps up to 40
    count, seconds, shortest = 0, 0.0, float("inf")
    long_n, long_s = dict.fromkeys(LONG_S, 0), dict.fromkeys(LONG_S, 0.0)
    fastest: list[tuple[float, int, str]] = []
    slowest: list[tuple[float, int, str]] = []
    fields: dict[str, set[str]] = {}
    skipped: dict[str, int] = {}
    groups: dict[str, dict[str, list[float]]] = {f: {} for f in fields_by}  # field -> its value -> [utts, seconds]
    tie = itertools.count()
    for source in sources:
        report = SkipReport(source)
        for duration, text, where, extra in _rows(source, report):
            count += 1
            seconds += duration
            shortest = min(shortest, duration)
            durations.add(duration)
            for bound in LONG_S:
                if duration > bound:
                    long_n[bound] += 1
                    long_s[bound] += duration
            if duration > 0:
                rate = sum(c.isalnum() for c in text) / duration
                rates[int(min(rate * 100, len(rates) - 1))] += 1
                heapq.heappush(fastest, (rate, next(tie), where))
                heapq.heappush(slowest, (-rate, next(tie), where))
                if len(fastest) > top:
                    heapq.heappop(fastest)
                if len(slowest) > top:
                    heapq.heappop(slowest)
            for name, value in extra.items():
                seen = fields.setdefault(name, set())
                if len(seen) <= MAX_VALUES:
                    seen.add(repr(value))
            for field, values in groups.items():
                value = str(extra[field]) if field in extra else "(none)"
                if value in values or len(values) < MAX_VALUES:
                    group = values.setdefault(value, [0, 0.0])
                else:
                    group = values.setdefault("(the rest)", [0, 0.0])
                group[0] += 1
                group[1] += duration
        for reason, n in report.reasons.items():
            skipped[reason] = skipped.get(reason, 0) + n
    if not count:
        return {"utterances": 0, "hours": 0.0, "skipped": skipped}
    return {
        "utterances": count, "hours": round(seconds / 3600, 4),
        "duration_s": {"min": round(shortest, 3),
                       **{f"p{round(q * 100)}": _quantile(durations.bins, q, BIN_S) for q in QUANTILES},
                       "max": round(durations.longest, 3), "mean": round(seconds / count, 3)},
        "longer_than_s": {f"{bound:g}": {"utterances": long_n[bound], "hours": round(long_s[bound] / 3600, 4)}
                          for bound in LONG_S},
        "letters_per_s": {f"p{round(q * 100)}": _quantile(rates, q, 0.01) for q in (0.01, 0.5, 0.99)},
        "fastest": [{"letters_per_s": round(r, 2), "where": w} for r, _, w in sorted(fastest, reverse=True)],
        "slowest": [{"letters_per_s": round(-r, 2), "where": w} for r, _, w in sorted(slowest, reverse=True)],
        "fields": {name: len(seen) if len(seen) <= MAX_VALUES else f"more than {MAX_VALUES}"
                   for name, seen in sorted(fields.items())},
        "skipped": skipped,
        **({"by": {field: _groups(field, values, top) for field, values in groups.items()}} if groups else {}),
    }


def _groups(by: str, groups: dict[str, list[float]], top: int) -> dict[str, Any]:
    """`by`'s values with the most hours (the first `top`), the rest summed."""
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][1], kv[0]))
    rest = ranked[top:]
    return {"field": by, "values": len(groups),
            "largest": [{"value": v, "utterances": int(n), "hours": round(sec / 3600, 4)} for v, (n, sec) in ranked[:top]],
            "others": {"values": len(rest), "utterances": int(sum(n for _, (n, _) in rest)),
                       "hours": round(sum(sec for _, (_, sec) in rest) / 3600, 4)}}


class DurationCounts:
    """Utterance durations counted in BIN_S bins (flat memory however many): their median, 90th percentile and
    longest, as a model card states them."""

    def __init__(self) -> None:
        self.bins = np.zeros(int(MAX_S / BIN_S) + 1, dtype=np.int64)
        self.longest = 0.0

    def add(self, duration: float) -> None:
        self.bins[int(min(max(duration, 0.0) / BIN_S, len(self.bins) - 1))] += 1
        self.longest = max(self.longest, duration)

    def merge(self, other: DurationCounts) -> DurationCounts:
        self.bins += other.bins
        self.longest = max(self.longest, other.longest)
        return self

    def summary(self) -> dict[str, float] | None:
        """{"median", "p90", "max"} in s (the quantiles to BIN_S); None when nothing was counted."""
        if not self.bins.any():
            return None
        return {"median": round(_quantile(self.bins, 0.5, BIN_S), 2), "p90": round(_quantile(self.bins, 0.9, BIN_S), 2),
                "max": round(self.longest, 2)}


def _quantile(counts: np.ndarray, q: float, step: float) -> float:
    """The `q` quantile of values counted in bins of width `step` from 0 (a bin's lower edge, rounded)."""
    cumulative = np.cumsum(counts)
    return round(float(np.searchsorted(cumulative, q * cumulative[-1], side="left")) * step, 3)
