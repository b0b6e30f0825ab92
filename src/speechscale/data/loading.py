"""From data config to DataLoaders: manifests (validated, in memory) or shard indexes (streamed), the rank's
`BatchPlan` (data/batch_plan.py) over them, and the dataset. Training and evaluation both shard here; the loader's
worker processes are data/workers.py's."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from .._compat import WatchedLoader
from ..config import AugmentConfig, ConfigError, DataConfig
from .batch_plan import BatchPlan, ListUnits, Units
from .dataset import SpeechDataset, collate
from .manifest import ManifestError, SkipReport, Utterance, read_manifest
from .mixing import MixedUnits, MixPlan, domain_names, domain_probabilities
from .sampler import BucketBatchSampler
from .shard_stream import MixedShardDataset, ShardDataset, ShardUnits
from .shards import ShardIndex, is_shard_index
from .stats import DurationCounts
from .workers import WorkerStart, worker_context

if TYPE_CHECKING:
    from ..components import Components

log = logging.getLogger(__name__)


def load_utterances(path: str, comps: "Components", data: DataConfig, filt: dict[str, Any] | None = None,
                    lines: list[int] | None = None) -> tuple[list[Utterance], SkipReport]:
    """Validated utterances of `path` that the model can learn (label fits in its output frames)."""
    utts, report = read_manifest(path, normalize=comps.normalizer, oov=comps.tokenizer.oov, filt=filt,
                                 min_duration=data.min_duration, max_duration=data.max_duration, lines=lines)
    kept = []
    for u, frames in zip(utts, comps.output_frames([u.duration for u in utts])):
        if not comps.fits(u.text, frames):
            report.skip(u.line, "label longer than the model's output frames", f"{comps.ctc_min_frames(u.text)} > {frames}")
        else:
            kept.append(u)
    report.kept = len(kept)
    log.info(report.summary())
    if not kept:
        raise ManifestError(f"no usable utterances in {path}: {report.summary()}{_space_hint(comps, report)}")
    return kept, report


def _space_hint(comps: "Components", report: SkipReport) -> str:
    """Why every transcript may have failed the alphabet: it has no space, as when a shell override's YAML value
    lost its trailing one."""
    if " " in comps.tokenizer.alphabet or "characters outside the vocabulary" not in report.reasons:
        return ""
    return "; text.alphabet has no space: quote a value that ends in one (text.alphabet=\"abc' \")"


def check_batch_bound(longest: float, where: str, batch_seconds: float) -> None:
    """A batch holds at least one utterance: one longer than data.batch_seconds would break the bound."""
    if longest > batch_seconds:
        raise ConfigError(f"data.batch_seconds={batch_seconds:g} is shorter than the longest training utterance "
                          f"({longest:g} s, {where}); raise data.batch_seconds or set "
                          f"data.max_duration={batch_seconds:g} to skip longer ones")


class LabelCheck:
    """Why a transcript read from a shard cannot be learned (None when it can): the checks a manifest's
    lines get when it is loaded."""

    def __init__(self, comps: "Components") -> None:
        self.comps = comps

    def __call__(self, text: str, duration: float) -> str | None:
        bad = self.comps.tokenizer.oov(text)
        if bad:
            return f"characters outside the vocabulary: {''.join(sorted(bad))!r} (text.alphabet spells none of them)"
        frames = self.comps.output_frames([duration])[0]
        if self.comps.fits(text, frames):
            return None
        return f"label longer than the model's output frames ({self.comps.ctc_min_frames(text)} > {frames})"


class EpochTagged:
    """Training batches as (epoch, index) pairs: loader workers that live across epochs (kept for the audio
    cache) augment with the epoch of the batch, not the one they started in."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = self.plan.epoch
        for batch in self.plan:
            yield [(epoch, i) for i in batch]

    def __len__(self) -> int:
        return len(self.plan)


class Strided:
    """Evaluation: every `world`-th batch of a fixed epoch-0 unit list from `rank` (each rank scores its share)."""

    def __init__(self, units: Any, rank: int, world: int) -> None:
        self.units, self.rank, self.world = units, rank, world

    def __iter__(self) -> Iterator[list[int]]:
        for k in range(self.rank, self.units.num_units(0), self.world):
            yield self.units.unit(0, k)

    def __len__(self) -> int:
        return len(range(self.rank, self.units.num_units(0), self.world))


def build_loader(dataset: torch.utils.data.Dataset, batches: Any, data: DataConfig, pin_memory: bool,
                 persistent: bool = False) -> torch.utils.data.DataLoader:
    """Batches of `dataset` in the order `batches` gives, read by data.num_workers worker processes."""
    workers = data.num_workers
    return WatchedLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=workers,
                         persistent_workers=persistent, pin_memory=pin_memory,
                         multiprocessing_context=worker_context() if workers else None,
                         worker_init_fn=WorkerStart() if workers else None)


def make_loader(utts: list[Utterance], comps: "Components", data: DataConfig, augment: AugmentConfig | None,
                seed: int, pin_memory: bool = False, make_plan: Callable[[Units], BatchPlan] | None = None,
                shard: tuple[int, int] = (0, 1), mix: MixPlan | None = None
                ) -> tuple[torch.utils.data.DataLoader, Any, SpeechDataset]:
    """A DataLoader over a manifest's duration-bucketed batches, and what it iterates. Training (`augment`
    given, None for evaluation) iterates the plan `make_plan` builds over the sampler's batches (default: the
    sampler itself, every batch of each epoch); evaluation iterates the fixed batch list, every `shard[1]`-th
    batch from `shard[0]`."""
    train = augment is not None
    sampler = BucketBatchSampler([u.duration for u in utts], batch_seconds=data.batch_seconds,
                                 max_batch_size=data.max_batch_size, num_buckets=data.num_buckets,
                                 seed=seed, sortagrad=data.sortagrad and train, shuffle=train, mix=mix)
    dataset = SpeechDataset(utts, comps.features, comps.tokenizer, augment, seed=seed,
                            cache_audio=data.cache_audio, min_seconds=data.min_duration, max_seconds=data.max_duration,
                            in_step=train and comps.features.cfg.device != "loader")
    plan = make_plan(ListUnits(sampler)) if make_plan else sampler
    batches = EpochTagged(plan) if train else sampler.batches(0)[shard[0]::shard[1]]
    # data.cache_audio keeps decoded audio in the workers: they must outlive the epoch to reuse it
    keep = bool(train and data.cache_audio and data.num_workers)
    return build_loader(dataset, batches, data, pin_memory, keep), plan, dataset


def shard_source(path: str, comps: "Components", data: DataConfig, augment: AugmentConfig | None, seed: int
                 ) -> tuple[ShardUnits, ShardDataset, SkipReport]:
    """A shard index checked against its shards (one clear error before work starts), its units and dataset."""
    index = ShardIndex(path, allow_external=data.allow_external_shards)
    index.check()
    units = ShardUnits(index, data.batch_seconds, data.max_batch_size, seed, shuffle=augment is not None,
                       shuffle_shards=data.shuffle_shards, min_duration=data.min_duration,
                       max_duration=data.max_duration, num_buckets=data.num_buckets)
    report = SkipReport(path, kept=units.kept)
    if units.out_of_range:
        report.reasons["duration out of range"] = units.out_of_range
    log.info("%s: %d shards, %.2f h; %s", path, len(index.shards), index.header.get("hours", 0), report.summary())
    if not units.kept:
        raise ManifestError(f"no usable utterances in {path}: {report.summary()}")
    dataset = ShardDataset(index, comps.features, comps.tokenizer, comps.normalizer, LabelCheck(comps), augment,
                           seed=seed, min_seconds=data.min_duration, max_seconds=data.max_duration)
    return units, dataset, report


def eval_loader(path: str, comps: "Components", data: DataConfig, rank: int = 0, world: int = 1,
                filt: dict[str, Any] | None = None, lines: list[int] | None = None, pin_memory: bool = False
                ) -> tuple[torch.utils.data.DataLoader, SkipReport, int]:
    """This rank's share of a manifest or shard index for evaluation; (loader, what was skipped, utterances)."""
    if is_shard_index(path):
        if filt or lines:
            raise ConfigError("data.val_filter and data.val_slice select manifest lines; a shard index takes neither")
        units, dataset, report = shard_source(path, comps, data, None, 0)
        return build_loader(dataset, Strided(units, rank, world), data, pin_memory), report, units.kept
    utts, report = load_utterances(path, comps, data, filt, lines)
    loader, _, _ = make_loader(utts, comps, data, None, 0, pin_memory=pin_memory, shard=(rank, world))
    return loader, report, len(utts)


@dataclass
class TrainingData:
    """The training and validation data of one rank."""

    utterances: int                       # training utterances kept
    report: SkipReport                    # what loading skipped
    loader: torch.utils.data.DataLoader   # this rank's share of each round of training batches
    plan: BatchPlan                       # its resumable position
    dataset: SpeechDataset
    val_loader: torch.utils.data.DataLoader
    val_utterances: int
    batches_per_epoch: int                # all ranks together, in a shuffled epoch
    domains: dict[str, int]               # data.mix: samples per epoch of each domain ({} for one source)
    longest: list[tuple[float, int]]      # (duration, id) of the longest training utterances, longest first
    plain: SpeechDataset                  # the training utterances without augmentation (the pre-scan)
    seconds: dict[str, float] | None      # the training utterances' median, 90th-percentile and longest durations


def check_line_keys(data: DataConfig) -> None:
    """One ConfigError listing every key that selects manifest lines (filter, train_slice, val_filter, val_slice)
    set for a source that is a shard index, which takes none: a recipe sets some (yesno's slices), and a user who
    points it at shards learns of them all at once, with how to clear them."""
    streamed = data.mix and all(is_shard_index(m) for m in data.mix) or is_shard_index(data.train_manifest)
    keys = [("data.filter", data.filter, streamed), ("data.train_slice", data.train_slice, streamed),
            ("data.val_filter", data.val_filter, is_shard_index(data.val_manifest)),
            ("data.val_slice", data.val_slice, is_shard_index(data.val_manifest))]
    wrong = [(k, v) for k, v, shards in keys if shards and v]
    if wrong:
        set_ = ", ".join(f"{k}={v}" for k, v in wrong)
        clear = " ".join(f"{k}={'{}' if isinstance(v, dict) else '[]'}" for k, v in wrong)
        raise ConfigError(f"{set_} select manifest lines, and a shard index takes none (a recipe may set them): clear "
                          f"them with {clear}")


def training_data(data: DataConfig, augment: AugmentConfig, seed: int, comps: "Components", rank: int, world: int,
                  make_plan: Callable[[Units], BatchPlan], pin_memory: bool = False) -> TrainingData:
    """Validated sources, the batch bound checked, and both loaders for this rank. `make_plan` (the strategy's)
    turns the epoch's batches into this rank's plan: lockstep rounds, or claims of asynchronous learners."""
    check_line_keys(data)
    val_loader, _, val_n = eval_loader(data.val_manifest, comps, data, rank, world, data.val_filter, data.val_slice,
                                       pin_memory)
    if data.mix and all(is_shard_index(m) for m in data.mix) or is_shard_index(data.train_manifest):
        if comps.features.cfg.device != "loader":
            raise ConfigError(f"features.device={comps.features.cfg.device}: features in the training step need a "
                              "manifest; a shard index computes them in its loader (features.device=loader)")
        return _streamed(data, augment, seed, comps, make_plan, pin_memory, val_loader, val_n)
    utts, report, mix, domains = _training_utterances(data, seed, comps)
    top = max(utts, key=lambda u: u.duration)
    check_batch_bound(top.duration, f"{top.audio_path}, manifest line {top.line}", data.batch_seconds)
    loader, plan, dataset = make_loader(utts, comps, data, augment, seed, pin_memory=pin_memory, mix=mix,
                                        make_plan=make_plan)
    longest = sorted(((u.duration, i) for i, u in enumerate(utts)), reverse=True)[:2 * data.max_batch_size]
    plain = SpeechDataset(utts, comps.features, comps.tokenizer, speakers=dataset.speakers)
    durations = DurationCounts()
    for u in utts:
        durations.add(u.duration)
    return TrainingData(len(utts), report, loader, plan, dataset, val_loader, val_n, plan.batches_per_epoch(1),
                        domains, longest, plain, durations.summary())


def _streamed(data: DataConfig, augment: AugmentConfig, seed: int, comps: "Components",
              make_plan: Callable[[Units], BatchPlan], pin_memory: bool, val_loader: torch.utils.data.DataLoader,
              val_n: int) -> TrainingData:
    """Training data streamed from one shard set, or from several mixed batch by batch (data.mix)."""
    if data.filter or data.train_slice:
        raise ConfigError("data.filter and data.train_slice select manifest lines; a shard index takes neither")
    sources = [shard_source(m, comps, data, augment, seed) for m in (data.mix or [data.train_manifest])]
    units: Any
    if data.mix:
        sizes = [u.kept for u, _, _ in sources]
        parts = [d for _, d, _ in sources]
        dataset: SpeechDataset = MixedShardDataset(parts, augment, seed, data.min_duration)
        units = MixedUnits([u for u, _, _ in sources], domain_probabilities(sizes, data.mix_weights,
                                                                            data.mix_temperature),
                           dataset.bases, seed)  # type: ignore[attr-defined]
        domains = dict(zip(domain_names(data.mix), units.domain_samples(1)))
        log.info("mixing %d shard sets, samples in epoch 2: %s", len(sources),
                 ", ".join(f"{k} {v} (of {n})" for (k, v), n in zip(domains.items(), sizes)))
        plain: SpeechDataset = MixedShardDataset([_plain(d, comps) for d in parts])
    else:
        units, dataset, _ = sources[0]
        domains, plain = {}, _plain(dataset, comps)  # type: ignore[arg-type]
    bases = getattr(dataset, "bases", [0])
    longest = sorted(((dur, bases[d] + i) for d, (u, _, _) in enumerate(sources) for dur, i in u.longest),
                     reverse=True)[:2 * data.max_batch_size]
    check_batch_bound(longest[0][0], ", ".join(data.mix or [data.train_manifest]), data.batch_seconds)
    report = SkipReport(", ".join(data.mix or [data.train_manifest]), kept=sum(u.kept for u, _, _ in sources))
    for _, _, r in sources:
        report.reasons.update(r.reasons)
    plan = make_plan(units)
    loader = build_loader(dataset, EpochTagged(plan), data, pin_memory)
    durations = DurationCounts()
    for u, _, _ in sources:
        durations.merge(u.durations)
    return TrainingData(report.kept, report, loader, plan, dataset, val_loader, val_n, plan.batches_per_epoch(1),
                        domains, longest, plain, durations.summary())


def _plain(dataset: ShardDataset, comps: "Components") -> ShardDataset:
    """The same shard set without augmentation (the pre-scan reads the longest utterances through it)."""
    return ShardDataset(dataset.index, comps.features, comps.tokenizer, comps.normalizer, LabelCheck(comps))


def _training_utterances(data: DataConfig, seed: int, comps: "Components"
                         ) -> tuple[list[Utterance], SkipReport, MixPlan | None, dict[str, int]]:
    """The training utterances; with data.mix, every domain's one after another and the plan that mixes them."""
    if not data.mix:
        utts, report = load_utterances(data.train_manifest, comps, data, data.filter, data.train_slice)
        return utts, report, None, {}
    if any(is_shard_index(m) for m in data.mix):
        raise ConfigError("data.mix takes manifests or shard indexes, not both in one run")
    loaded = [load_utterances(m, comps, data, data.filter) for m in data.mix]
    sizes = [len(u) for u, _ in loaded]
    plan = MixPlan(sizes, domain_probabilities(sizes, data.mix_weights, data.mix_temperature), seed)
    domains = dict(zip(domain_names(data.mix), plan.quotas))
    report = SkipReport(", ".join(data.mix), kept=sum(sizes))
    for _, r in loaded:
        report.reasons.update(r.reasons)
    log.info("mixing %d domains, samples per epoch: %s", len(sizes),
             ", ".join(f"{k} {v} (of {n})" for (k, v), n in zip(domains.items(), sizes)))
    return [u for utts, _ in loaded for u in utts], report, plan, domains
