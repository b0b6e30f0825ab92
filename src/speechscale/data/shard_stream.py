"""Training and evaluation data streamed from tar shards (data/shards.py): the epoch's batches and the dataset.

An epoch walks the shards in an order drawn from (seed, epoch), `shuffle_shards` at a time: such a window
is the shuffle buffer. Its utterances are bucketed on the fly (sorted by duration with seeded tie-breaks,
packed under data.batch_seconds, the batches shuffled), so every batch holds similar durations and the
units of the epoch are a pure function of (seed, epoch). Only the current windows' member lists are held;
the per-epoch counts are one integer pair per window, so memory grows with shards, not utterances.

Ranks and loader workers get batches, not whole shards: unit j of the rest of the epoch goes to rank
j % world (LockstepPlan, or ClaimedPlan for asynchronous learners) and a loader worker reads just
its batch's members with ranged reads. All ranks walk the same window at the same time, every rank takes
the same number of steps, and the position (samples consumed) resumes onto any world size in O(1).
"""
from __future__ import annotations

import bisect
import heapq
import logging
import zlib
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from ..config import AugmentConfig
from ..storage.seeds import generator
from .audio import AudioError, decode_audio
from .dataset import SpeechDataset, TextError
from .features import FeatureExtractor
from .manifest import MAX_DURATION_S
from .sampler import pack_batches
from .shards import ShardIndex, ShardReader
from .stats import DurationCounts
from .text import Tokenizer

log = logging.getLogger(__name__)


class ShardUnits:
    """The `Units` of a shard index: epochs of duration-bucketed batches of global utterance ids."""

    def __init__(self, index: ShardIndex, batch_seconds: float, max_batch_size: int = 64, seed: int = 0,
                 shuffle: bool = True, shuffle_shards: int = 4, min_duration: float = 0.0,
                 max_duration: float = float("inf"), num_buckets: int = 10) -> None:
        self.index, self.seed, self.shuffle = index, seed, shuffle
        self.num_buckets = max(1, num_buckets)
        self.batch_seconds, self.max_batch_size = batch_seconds, max_batch_size
        self.window, self.bounds = max(1, shuffle_shards), (min_duration, max_duration)
        self._counts: dict[int, tuple[list[list[int]], list[int], list[int]]] = {}
        self._units: dict[tuple[int, int], list[list[int]]] = {}
        # one pass over the index: what the duration bounds leave, and the longest kept utterances
        self.kept, self.out_of_range = 0, 0
        self.durations = DurationCounts()  # the kept utterances' (what a model card states)
        top: list[tuple[float, int]] = []  # a min-heap of the 2 x max_batch_size longest (duration, id)
        for s in range(len(index.shards)):
            for m, (_, d, _, _) in enumerate(index.members(s)):
                if not self._keeps(d):
                    self.out_of_range += 1
                    continue
                self.kept += 1
                self.durations.add(d)
                (heapq.heappush if len(top) < 2 * max_batch_size else heapq.heappushpop)(top, (d, index.starts[s] + m))
        self.longest = sorted(top, reverse=True)  # (duration, id), longest first

    def _keeps(self, duration: float) -> bool:
        return self.bounds[0] <= duration <= min(self.bounds[1], MAX_DURATION_S)

    def _windows(self, epoch: int) -> list[list[int]]:
        n = len(self.index.shards)
        order = (torch.randperm(n, generator=generator(self.seed, "order", epoch)).tolist()
                 if self.shuffle else list(range(n)))
        return [order[i:i + self.window] for i in range(0, n, self.window)]

    def _make(self, epoch: int, w: int, shards: list[int]) -> list[list[int]]:
        """Window `w`'s batches as the manifest's BucketBatchSampler makes an epoch's: its utterances sorted by
        duration, cut into `num_buckets` buckets, each shuffled (seeded) and packed, the batches shuffled. The
        same batch sizes, so a corpus trains the same number of steps from shards as from its manifest."""
        ids, durs = [], []
        for s in shards:
            for m, (_, d, _, _) in enumerate(self.index.members(s)):
                if self._keeps(d):
                    ids.append(self.index.starts[s] + m)
                    durs.append(d)
        order = sorted(range(len(ids)), key=lambda i: (durs[i], ids[i]))
        if not self.shuffle:
            return [[ids[i] for i in b] for b in pack_batches(order, durs, self.batch_seconds, self.max_batch_size)]
        gen = generator(self.seed, "item", epoch, w)
        # as many buckets as the manifest has (a window of the whole corpus is cut as the manifest is), fewer
        # where a bucket would hold fewer than the manifest's or four batches' worth of utterances (a small window:
        # the batches at each bucket's end would be part-full)
        n, packed = len(order), []
        per_batch = self.batch_seconds / max(1e-3, durs[order[n // 2]]) if n else 1.0  # at the median duration
        least = max(1.0, min(self.kept / self.num_buckets, 4 * per_batch, self.max_batch_size * 4))
        buckets = max(1, min(self.num_buckets, int(n / least + 1e-9)))
        for b in range(buckets):
            bucket = order[b * n // buckets:(b + 1) * n // buckets]
            perm = torch.randperm(len(bucket), generator=gen).tolist()
            packed += pack_batches([bucket[p] for p in perm], durs, self.batch_seconds, self.max_batch_size)
        batches = [[ids[i] for i in b] for b in packed]
        return [batches[p] for p in torch.randperm(len(batches), generator=gen).tolist()]

    def _epoch(self, epoch: int) -> tuple[list[list[int]], list[int], list[int]]:
        """(windows, units before each window, samples before each window); one pass over the index."""
        if epoch not in self._counts:
            windows = self._windows(epoch)
            units, samples = [0], [0]
            for w, shards in enumerate(windows):
                batches = self._make(epoch, w, shards)
                units.append(units[-1] + len(batches))
                samples.append(samples[-1] + sum(len(b) for b in batches))
            self._counts = {e: c for e, c in self._counts.items() if e > epoch - 2}
            self._counts[epoch] = (windows, units, samples)
        return self._counts[epoch]

    def _window_units(self, epoch: int, w: int) -> list[list[int]]:
        if (epoch, w) not in self._units:
            if len(self._units) >= 4:  # the windows in use (a loader runs ahead of training by a little)
                self._units.pop(next(iter(self._units)))
            self._units[(epoch, w)] = self._make(epoch, w, self._epoch(epoch)[0][w])
        return self._units[(epoch, w)]

    def num_units(self, epoch: int) -> int:
        return self._epoch(epoch)[1][-1]

    def epoch_samples(self, epoch: int) -> int:
        return self._epoch(epoch)[2][-1]

    def _where(self, epoch: int, k: int) -> tuple[int, int]:
        units = self._epoch(epoch)[1]
        w = bisect.bisect_right(units, k) - 1
        return w, k - units[w]

    def unit(self, epoch: int, k: int) -> list[int]:
        w, j = self._where(epoch, k)
        return self._window_units(epoch, w)[j]

    def offset(self, epoch: int, k: int) -> int:
        _, units, samples = self._epoch(epoch)
        if k >= units[-1]:
            return samples[-1]
        w, j = self._where(epoch, k)
        return samples[w] + sum(len(b) for b in self._window_units(epoch, w)[:j])


class Span(NamedTuple):
    """Where one utterance's members lie in its shard, and the CRC-32 of those bytes (None when not indexed)."""
    url: str
    key: str
    duration: float
    start: int
    end: int
    crc: int | None


class ShardDataset(SpeechDataset):
    """Utterances by global id from a shard index: one ranged read per utterance (json + audio members), a
    batch's reads made at once (`__getitems__`), the transcript normalized and checked as it is read (`check`
    returns why it cannot be learned, or None)."""

    def __init__(self, index: ShardIndex, features: FeatureExtractor, tokenizer: Tokenizer,
                 normalize: Callable[[str], str], check: Callable[[str, float], str | None],
                 augment: AugmentConfig | None = None, seed: int = 0, min_seconds: float = 0.0,
                 max_seconds: float | None = None) -> None:
        super().__init__([], features, tokenizer, augment, seed=seed, min_seconds=min_seconds, max_seconds=max_seconds)
        self.index, self.normalize, self.check = index, normalize, check
        self.reader = ShardReader()
        self.text_field = str(index.header.get("text_field", "text"))
        self._entries: dict[int, tuple[list[list[Any]], list[int] | None]] = {}
        self._fetched: dict[int, tuple[Span, bytes | Exception]] = {}  # id -> (span, bytes)

    def __len__(self) -> int:
        return self.index.utterances

    def __getitems__(self, keys: list[Any]) -> list[dict[str, Any]]:
        """The items of a batch (torch's DataLoader passes a batch's keys here): their bytes fetched together, then
        each made as __getitem__ makes it."""
        self.prefetch([self.split_key(k)[1] for k in keys])
        try:
            return [self[k] for k in keys]
        finally:
            self.release()

    def prefetch(self, ids: list[int]) -> None:
        """Read the members of utterances `ids` at once (ShardReader.fetch); _load takes them from here."""
        spans = [self._span(i) for i in ids]
        chunks = self.reader.fetch([(sp.url, sp.start, sp.end) for sp in spans])
        self._fetched = {i: (span, chunk) for i, span, chunk in zip(ids, spans, chunks)}

    def release(self) -> None:
        """Forget what prefetch read (its batch is made)."""
        self._fetched = {}

    def _shard_entries(self, s: int) -> tuple[list[list[Any]], list[int] | None]:
        if s not in self._entries:
            if len(self._entries) >= 4:
                self._entries.pop(next(iter(self._entries)))
            self._entries[s] = self.index.entries(s)
        return self._entries[s]

    def _span(self, i: int) -> Span:
        """Where utterance `i`'s members lie."""
        s, m = self.index.locate(i)
        members, crcs = self._shard_entries(s)
        key, duration, start, end = members[m]
        return Span(self.index.shards[s].url, key, duration, start, end, None if crcs is None else crcs[m])

    def _load(self, i: int) -> tuple[np.ndarray, str, str, float]:
        if i in self._fetched:
            span, chunk = self._fetched[i]
        else:
            span = self._span(i)
            chunk = self.reader.fetch([(span.url, span.start, span.end)])[0]
        url, key, duration = span.url, span.key, span.duration
        raw, audio, name = self.reader.parse(url, key, chunk, self.text_field)
        if span.crc is not None and not isinstance(chunk, Exception) and zlib.crc32(chunk) != span.crc:
            raise AudioError(f"{url} member {key}: its bytes are not those written (their CRC-32 differs from the "
                             f"index's): a damaged shard")
        wav = decode_audio(audio, f"{url} member {name}", self.features.cfg.sample_rate, self.max_seconds)
        text = self.normalize(raw) if raw is not None else ""
        why = "empty text" if not text else self.check(text, duration)
        if why:
            raise TextError(f"{url} member {key}: {why}")
        return wav, text, f"{url} member {name}", duration


class MixedShardDataset(SpeechDataset):
    """Several shard sets as one dataset: domain d's utterance ids follow the earlier domains' (`bases`)."""

    def __init__(self, parts: list[ShardDataset], augment: AugmentConfig | None = None, seed: int = 0,
                 min_seconds: float = 0.0) -> None:
        first = parts[0]
        super().__init__([], first.features, first.tokenizer, augment, seed=seed, min_seconds=min_seconds)
        self.parts = parts
        self.bases = [0]
        for p in parts:
            self.bases.append(self.bases[-1] + len(p))

    def __len__(self) -> int:
        return self.bases[-1]

    def __getitems__(self, keys: list[Any]) -> list[dict[str, Any]]:
        """A batch's items, each domain's bytes fetched together (ShardDataset.__getitems__)."""
        ids: list[list[int]] = [[] for _ in self.parts]
        for k in keys:
            i = self.split_key(k)[1]
            d = bisect.bisect_right(self.bases, i) - 1
            ids[d].append(i - self.bases[d])
        for part, mine in zip(self.parts, ids):
            if mine:
                part.prefetch(mine)
        try:
            return [self[k] for k in keys]
        finally:
            for part in self.parts:
                part.release()

    def _load(self, i: int) -> tuple[np.ndarray, str, str, float]:
        d = bisect.bisect_right(self.bases, i) - 1
        return self.parts[d]._load(i - self.bases[d])
