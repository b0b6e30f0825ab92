"""From manifest to DataLoader: validation, the label-length filter, sampler and dataset."""
from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ..components import Components
from ..config import Config
from ..data.dataset import SpeechDataset, collate
from ..data.manifest import ManifestError, SkipReport, Utterance, read_manifest
from ..data.mixing import MixPlan, domain_names, domain_probabilities
from ..data.distributed_sampler import Claims, ClaimedBatchSampler, ShardedBatchSampler
from ..data.sampler import BucketBatchSampler
from .preflight import check_batch_bound

log = logging.getLogger(__name__)


def load_utterances(path: str, comps: Components, cfg: Config, filt: dict[str, Any] | None = None,
                    lines: list[int] | None = None) -> tuple[list[Utterance], SkipReport]:
    """Validated utterances of `path` that the model can learn (label fits in its output frames)."""
    utts, report = read_manifest(path, normalize=comps.normalizer, oov=comps.tokenizer.oov, filt=filt,
                                 min_duration=cfg.data.min_duration, max_duration=cfg.data.max_duration,
                                 lines=lines)
    kept = []
    for u, frames in zip(utts, comps.output_frames([u.duration for u in utts])):
        need = comps.ctc_min_frames(u.text)
        if need > frames:
            report.skip(u.line, "label longer than the model's output frames", f"{need} > {frames}")
        else:
            kept.append(u)
    report.kept = len(kept)
    log.info(report.summary())
    if not kept:
        raise ManifestError(f"no usable utterances in {path}: {report.summary()}")
    return kept, report


class EpochTagged:
    """Training batches as (epoch, index) pairs: loader workers that live across epochs (kept for the audio
    cache) augment with the epoch of the batch, not the one they started in."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = self.sampler.epoch
        for batch in self.sampler:
            yield [(epoch, i) for i in batch]

    def __len__(self) -> int:
        return len(self.sampler)


def _ignore_stop_signals(worker_id: int) -> None:
    """Loader workers leave Ctrl-C and SIGTERM (a launcher may signal the whole process group) to the main
    process, which checkpoints and then stops them; they also exit by themselves when it dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def make_loader(utts: list[Utterance], comps: Components, cfg: Config, train: bool, pin_memory: bool = False,
                wrap: Callable[[BucketBatchSampler], Any] | None = None, shard: tuple[int, int] = (0, 1),
                plan: MixPlan | None = None) -> tuple[torch.utils.data.DataLoader, BucketBatchSampler, SpeechDataset]:
    """A DataLoader over duration-bucketed batches; augmentation only when `train`; `pin_memory` for GPUs.
    Training iterates `wrap(sampler)` (the per-rank sharded view) when given; evaluation iterates the
    fixed batch list, every `shard[1]`-th batch from `shard[0]` (each rank scores its share)."""
    d = cfg.data
    sampler = BucketBatchSampler([u.duration for u in utts], batch_seconds=d.batch_seconds,
                                 max_batch_size=d.max_batch_size, num_buckets=d.num_buckets,
                                 seed=cfg.trainer.seed, sortagrad=d.sortagrad and train, shuffle=train, plan=plan)
    dataset = SpeechDataset(utts, comps.features, comps.tokenizer, cfg.augment if train else None,
                            seed=cfg.trainer.seed, cache_audio=d.cache_features, min_seconds=d.min_duration)
    # Evaluation iterates a fixed list (every pass sees every utterance); training the resumable sampler.
    batches = EpochTagged(wrap(sampler) if wrap else sampler) if train else sampler.batches(0)[shard[0]::shard[1]]
    # data.cache_features keeps decoded audio in the workers: they must outlive the epoch to reuse it
    keep = bool(train and d.cache_features and d.num_workers)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, collate_fn=collate,
                                         num_workers=d.num_workers, persistent_workers=keep, pin_memory=pin_memory,
                                         worker_init_fn=_ignore_stop_signals if d.num_workers else None)
    return loader, sampler, dataset


@dataclass
class TrainingData:
    """The training and validation data of one rank."""

    train_utts: list[Utterance]
    train_report: SkipReport
    val_utts: list[Utterance]
    loader: torch.utils.data.DataLoader   # this rank's share of each round of training batches
    sampler: ShardedBatchSampler | ClaimedBatchSampler  # its resumable position
    dataset: SpeechDataset
    val_loader: torch.utils.data.DataLoader
    batches_per_epoch: int                # all ranks together, in a shuffled epoch
    domains: dict[str, int]               # data.mix: samples per epoch of each domain ({} for one manifest)


def training_data(cfg: Config, comps: Components, rank: int, world: int, pin_memory: bool,
                  claims: Claims | None = None) -> TrainingData:
    """Validated manifests, the batch bound checked, and both loaders for this rank. Lockstep ranks are dealt
    rounds of batches; asynchronous learners (`claims`: their shared position) claim batches at their pace."""
    d = cfg.data
    train_utts, report, plan, domains = _training_utterances(cfg, comps)
    check_batch_bound(train_utts, d.batch_seconds)
    val_utts, _ = load_utterances(d.val_manifest, comps, cfg, d.val_filter, d.val_slice)
    loader, base, dataset = make_loader(train_utts, comps, cfg, train=True, pin_memory=pin_memory,
                                        wrap=lambda b: ClaimedBatchSampler(b, claims) if claims
                                        else ShardedBatchSampler(b, rank, world), plan=plan)
    val_loader, _, _ = make_loader(val_utts, comps, cfg, train=False, pin_memory=pin_memory, shard=(rank, world))
    return TrainingData(train_utts, report, val_utts, loader, loader.batch_sampler.sampler, dataset, val_loader,  # type: ignore
                        len(base.batches(1)), domains)


def _training_utterances(cfg: Config, comps: Components
                         ) -> tuple[list[Utterance], SkipReport, MixPlan | None, dict[str, int]]:
    """The training utterances; with data.mix, every domain's one after another and the plan that mixes them."""
    d = cfg.data
    if not d.mix:
        utts, report = load_utterances(d.train_manifest, comps, cfg, d.filter, d.train_slice)
        return utts, report, None, {}
    loaded = [load_utterances(m, comps, cfg, d.filter) for m in d.mix]
    sizes = [len(u) for u, _ in loaded]
    plan = MixPlan(sizes, domain_probabilities(sizes, d.mix_weights, d.mix_temperature), cfg.trainer.seed)
    domains = dict(zip(domain_names(d.mix), plan.quotas))
    report = SkipReport(", ".join(d.mix), kept=sum(sizes))
    for _, r in loaded:
        report.reasons.update(r.reasons)
    log.info("mixing %d domains, samples per epoch: %s", len(sizes),
             ", ".join(f"{k} {v} (of {n})" for (k, v), n in zip(domains.items(), sizes)))
    return [u for utts, _ in loaded for u in utts], report, plan, domains
