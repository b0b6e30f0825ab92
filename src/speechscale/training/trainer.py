"""The training loop: CTC in fp32, AdamW/SGD with warm-up and decay, clipping, validation, checkpoints.

    speechscale train --config configs/yesno.yaml trainer.out_dir=runs/yesno
    torchrun --nproc-per-node 2 -m speechscale.cli train --config configs/yesno.yaml   # data parallel

One batch goes: data plan (data/batch_plan.py) -> dataset (audio, augment, features) -> collate -> model ->
CTC (step.py) -> strategy -> optimizer. A non-finite loss or gradient skips the step (counted); an utterance that cannot
become features is dropped (counted by reason). The strategy (distributed/) owns everything distributed. This module
sets a run up and runs its loop; the step is step.py's (eager or graphed, chosen once), the checkpoints
checkpointing.py's (rank 0 writes, state.py holds the training state), and what happens when data or arithmetic
fails recovery.py's.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import torch

from .. import storage
from .._compat import deterministic_algorithms
from ..components import build_components
from ..config import Config, ConfigError, to_dict
from ..data.dataset import SKIP_REASONS, Batch
from ..data.features import GLOBAL_STATS_UTTERANCES, WITH_TRAINING_SET_STATS, pooled_prior
from ..data.loading import training_data
from ..distributed import build_strategy
from ..distributed.straggler import Straggler
from ..storage.cards import data_summary
from ..storage.seeds import derive_seed, seed_everything
from .checkpointing import CheckpointWriter, check_resumable, find_resume, run_folders
from .ema import WeightAverage
from .evaluate import validate
from .feeding import FeedMeter
from .graphs import step_shapes
from .init import freeze, init_weights
from .optim import SampleSchedule, build_optimizer, set_lr
from .precision import Precision, resolve_device, resolve_precision
from .preflight import resolve_alphabet, resolve_pieces
from .prescan import prescan
from .progress import RunProgress, planned_steps
from .recompute import recompute_blocks
from .recovery import Recovery
from .runlog import RunLog, trace_samples, train_row, write_run_config
from .state import TrainingState, restore
from .step import StepTally, build_train_step, placeholder_batch
from .stop import StopSignals, TimeBudget

log = logging.getLogger(__name__)


class Trainer:
    """Owns the model, data and optimizer of one run (one rank); `fit()` trains and returns the summary."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        t = cfg.trainer
        self.ckpt_dir, self.out_dir = run_folders(t)  # checked before any work
        if t.threads > 0:
            torch.set_num_threads(t.threads)
        self.strategy = build_strategy(cfg.distributed, t.seed, t.device)
        self.rank, self.world = self.strategy.rank, self.strategy.world_size
        if not self.strategy.lockstep and (t.val_every_steps or t.checkpoint_every_steps or t.checkpoint_every_minutes
                                           ) and self.rank == 0:
            log.warning("asynchronous learners validate and checkpoint at epoch ends and stops: ignoring "
                        "trainer.val_every_steps, checkpoint_every_steps and checkpoint_every_minutes")
        seed_everything(t.seed)  # the same initial weights on every rank
        if t.deterministic:
            deterministic_algorithms(compiling=t.compile)
        self.device = resolve_device(self.strategy.device(t.device))
        if cfg.features.device not in ("loader", self.device.type):
            raise ConfigError(f"features.device={cfg.features.device} computes features in the training step, on "
                              f"its device; this run trains on {self.device.type}: use features.device="
                              f"{self.device.type} or loader")
        resuming = find_resume(t.resume, self.ckpt_dir) if t.resume else None  # read once; its word pieces hold
        resolve_alphabet(cfg)
        resolve_pieces(cfg, resuming[1].get("config", {}).get("text") if resuming else None)
        self.comps = build_components(cfg)
        self.model = self.comps.model.to(self.device)
        if t.init_from:  # fine-tuning: weights only; a checkpoint found by trainer.resume replaces them
            init_weights(self.model, t.init_from, cfg)
        if t.freeze:  # before the optimizer, DDP and any graph capture see which parameters train
            frozen = freeze(self.model, t.freeze)
            log.info("trainer.freeze: %d of %d parameter values do not train (%s)", frozen,
                     sum(p.numel() for p in self.model.parameters()), ", ".join(t.freeze))
        if t.activation_checkpointing:  # before DDP and any compile wrap the model
            blocks = recompute_blocks(self.model)
            if self.rank == 0:
                log.info("trainer.activation_checkpointing: %d blocks recompute their activations in the backward "
                         "pass", blocks)
        self.precision = Precision(resolve_precision(t.precision, self.device), self.device,
                                   init_scale=t.loss_scale_init, min_scale=t.min_loss_scale)
        self.n_params = n_params = sum(p.numel() for p in self.model.parameters())
        text = cfg.text
        if self.rank == 0 and text.digits == "spell" and text.digits_language == "en" and not text.alphabet.isascii():
            log.warning("text.alphabet spells letters beyond English, but text.digits_language is en: digits in the "
                        "transcripts become English words; set text.digits_language (de, fr, ...) or text.digits")
        if self.rank == 0 and self.precision.mode == "fp16" and self.device.type == "cpu":
            log.warning("trainer.precision=fp16 on a CPU: torch emulates half-precision arithmetic there, many times "
                        "slower than fp32 (`speechscale bench train --precision fp32,fp16` measures it); use fp32 or "
                        "auto")
        if self.rank == 0:
            log.info("model %s: %d parameters (%.2fM); device %s, precision %s, %d rank(s), strategy %s",
                     cfg.model.name, n_params, n_params / 1e6, self.device, self.precision.mode, self.world,
                     self.strategy.name)
        self.data = data = training_data(cfg.data, cfg.augment, t.seed, self.comps, self.rank, self.world,
                                         self.strategy.make_plan, pin_memory=self.device.type == "cuda")
        self.domains = data.domains  # data.mix: samples of each domain per epoch (logged with validation)
        utts = getattr(data.plain, "utts", None) or []  # a streamed corpus: counted, not listed
        self.shapes, graphs = step_shapes(cfg, self.comps, utts, self.device)  # trainer.cuda_graphs, data.fixed_shapes
        self.unshaped = 0
        card_data = data_summary(cfg.data.mix or [cfg.data.train_manifest], utts, data.seconds)
        if not utts:
            card_data.update(utterances=data.utterances, hours=None)
        if cfg.features.normalize in WITH_TRAINING_SET_STATS and not cfg.features.global_stats:  # before any feature
            if not hasattr(data.plain, "global_stats"):
                raise ConfigError(f"features.normalize={cfg.features.normalize} computes the training set's "
                                  "statistics from a manifest's utterances; "
                                  "a sharded corpus needs them given (features.global_stats) or another "
                                  "features.normalize")
            cfg.features.global_stats = data.plain.global_stats(GLOBAL_STATS_UTTERANCES)  # saved with the config
        if cfg.features.normalize == "speaker" and (prior := pooled_prior(getattr(data.dataset, "speakers", {}))):
            cfg.features.speaker_prior = prior  # saved with the config: what a file without a speaker meets
        self.loader, self.plan, self.dataset, self.val_loader = data.loader, data.plan, data.dataset, data.val_loader
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.schedule = SampleSchedule(cfg.optim, self.plan.epoch_samples(1), data.batches_per_epoch, t.grad_accum,
                                       self.world, t.max_steps, t.max_epochs,
                                       self.strategy.lr_scale(cfg.distributed.scale_lr))
        self.state = TrainingState()
        self.tally = StepTally(self.device)
        self.feed = FeedMeter(self.comps.features.hop_length / cfg.features.sample_rate)
        slow = cfg.distributed.simulate_straggler
        self.straggler = Straggler(self.rank, slow.rank, slow.slowdown, self.device)
        placeholder = placeholder_batch(self.comps.features.num_features, self.comps.features.frames_for_seconds(1))
        # graphed or eager, decided here once: the step, its forward (bare, or compiled and/or strategy-wrapped)
        # and how its gradients are reduced follow from it
        self.optimizer_step = build_train_step(self.model, self.optimizer, self.precision, self.strategy,
                                               cfg.optim.grad_clip, self.device, placeholder, graphed=graphs,
                                               compile_model=t.compile)
        self.forward = self.optimizer_step.forward
        self.resumed_from: str | None = None
        self.stopped_by: str | None = None
        self.data_part: dict[str, Any] = {}  # this rank's data position from a checkpoint (asynchronous learners)
        self.ema = WeightAverage(self.model, t.ema_decay) if t.ema_decay > 0 else None
        seed_everything(derive_seed(t.seed, "process", self.rank))  # dropout and other streams differ per rank
        if resuming:
            self._resume(*resuming)
        elif t.resume and self.rank == 0:
            log.info("resume=auto: no checkpoint in %s, starting fresh", self.ckpt_dir)
        self._resumed_step = self.state.step
        self.checkpoints = CheckpointWriter(cfg, self.ckpt_dir, self.strategy, self.model, self.optimizer,
                                            self.precision, self.plan, self.state, self.ema, n_params, card_data,
                                            self.comps.streaming_card())
        self.recovery = Recovery(self.state, self.strategy, cfg.data.max_unreadable_batches, t.max_skipped_steps,
                                 self._sync_and_save, self.ckpt_dir)

    # ---- checkpoints -------------------------------------------------------------------------------
    def _resume(self, path: str, ckpt: dict[str, Any]) -> None:
        check_resumable(path, ckpt, self.cfg)
        self.state, saved_by, self.data_part = restore(ckpt, str(path), self.model, self.optimizer, self.precision,
                                                       self.strategy, self.cfg.trainer.seed)
        if self.ema is not None:
            self.ema.load_state_dict(ckpt.get("ema"), self.model)
        self.resumed_from = str(path)
        if self.rank == 0:
            log.info("resumed from %s at epoch %d step %d (%d samples into the epoch; saved by %d rank(s), now %d)",
                     path, self.state.epoch, self.state.step, self.state.consumed, saved_by, self.world)

    def save(self, name: str | None = None, best: bool = False) -> str | None:
        """Write a checkpoint (collective; CheckpointWriter.save)."""
        return self.checkpoints.save(name, best)

    def _sync_and_save(self) -> None:
        self.sync()
        self.save()

    # ---- one step ----------------------------------------------------------------------------------
    def train_step(self, batch: Batch | list[Batch]) -> torch.Tensor:
        """One optimizer step over one batch or a list of micro-batches (gradient accumulation): forward
        (autocast), CTC (fp32), backward (scaled in fp16), clip, step. No host sync on GPUs.

        Returns the detached mean loss on the device. A non-finite loss or gradient skips the update (fused
        optimizers and the fp16 scaler decide on the device) and is counted at the next `sync()`."""
        s, micro = self.state, (batch if isinstance(batch, list) else [batch])
        if self.cfg.features.device != "loader":  # the loader shipped waveforms: features on the step's device
            micro = [self._features_in_step(b) for b in micro]
        for b in micro:
            self.feed.trained(b.feat_lens)
        if self.shapes is not None:  # data.fixed_shapes: padded with zero-weight fillers, the same gradients
            padded = [self.shapes.pad(b) for b in micro]
            micro = [b for b, _ in padded]
            self.unshaped += sum(not ok for b, ok in padded if len(b))
        # the samples of the batches about to be trained on are already counted
        set_lr(self.optimizer, self.schedule.lr(s.samples_seen - sum(len(b) for b in micro) * self.world, s.step))
        # Dropout draws from torch's global generator, which loaders and validation also draw from (a new
        # iterator takes a seed): seeding it from (seed, rank, step) makes every step's masks independent of
        # them, so a run resumed mid-epoch (or on another number of ranks) takes the same steps.
        torch.manual_seed(derive_seed(self.cfg.trainer.seed, "process", self.rank, s.step + 1))
        with self.straggler.step():  # distributed.simulate_straggler: this rank sleeps after its compute
            t0 = time.perf_counter()
            loss, flags = self.optimizer_step(micro)
            self.feed.stepped(time.perf_counter() - t0)
        self.tally.add(flags)
        s.step += 1
        if self.ema is not None:
            self.ema.update(self.model, s.step)
        return loss

    def _features_in_step(self, batch: Batch) -> Batch:
        """A batch of waveforms (features.device) as a batch of features on the device, lengths in frames on the
        host; an empty batch stays as it is."""
        if len(batch) == 0 or batch.draws is None:
            return batch
        moved = batch.to(self.device)
        feats, frames = self.comps.features.batch(moved.feats, batch.feat_lens, moved.draws, self.cfg.augment)
        return dataclasses.replace(batch, feats=feats, feat_lens=frames, targets=moved.targets, draws=None)

    def sync(self, collective: bool = True) -> float | None:
        """Fold all ranks' step flags into the counters (collective); the mean loss since the last sync
        (`collective=False`: this rank's, for asynchronous learners between sync points)."""
        s = self.state
        flagged = s.counters["nonfinite_loss"] + s.counters["nonfinite_grad"]
        loss = self.tally.sync(self.strategy, s.counters, collective)
        if collective and self.strategy.lockstep:
            self.recovery.counted_skips(flagged)
        return loss

    def validate(self) -> dict[str, float]:
        """WER/CER of the consensus weights on the validation set."""
        return validate(self.model, self.val_loader, self.comps.tokenizer, self.strategy, self.device,
                        self.precision.autocast)

    # ---- the loop ----------------------------------------------------------------------------------
    def _validate_and_save(self, runlog: RunLog | None, progress: RunProgress) -> None:
        """Validate, log the row and write a checkpoint (mid-epoch: trainer.val_every_steps)."""
        self._checkpoint(self._validate(runlog, progress)["wer"])

    def _checkpoint(self, wer: float | None = None, ending: bool = False) -> None:
        """A checkpoint (also best.pt when validation `wer` is the best so far), unless some rank is amid batches
        it could not read and the run goes on (collective): one written there would resume past them, and if the
        data is gone the run stops in a few batches anyway."""
        if ending or not self.recovery.amid_unreadable():
            self.checkpoints.after_validation(wer)

    def _validate(self, runlog: RunLog | None, progress: RunProgress) -> dict[str, float]:
        """The validation row, logged."""
        s = self.state
        self.sync()
        self.recovery.stop_if_diverged()
        val = self.validate()
        row = {"epoch": s.epoch, "step": s.step, "train_loss": self.tally.take_mean_loss(), **val,
               **self.strategy.stats(), **{f"samples_{k}": v for k, v in self.domains.items()}}
        s.history.append(row)
        if runlog is not None:
            runlog.write("val", s.step, {**row, **s.counters})
            log.info("epoch %s step %d: train loss %.3f, val WER %.2f%% CER %.2f%% (%d utts)%s", progress.epoch_label(),
                     s.step, row["train_loss"], 100 * val["wer"], 100 * val["cer"], val["utterances"], progress.eta())
        return row

    def _log_train(self, runlog: RunLog | None, progress: RunProgress) -> None:
        """Logging interval: the one host sync of the hot loop, the fp16 watchdog, GPU peak memory."""
        loss = self.sync(collective=self.strategy.lockstep)
        self.precision.check()
        self.recovery.stop_if_diverged()
        if runlog is not None:
            progress.show_loss(loss)
            runlog.write("train", self.state.step, {**train_row(self.state.epoch, self.optimizer.param_groups[0]["lr"],
                                                                loss, self.precision, self.device,
                                                                self.state.samples_seen), **self.feed.take()})

    def _train_epoch(self, runlog: RunLog | None, progress: RunProgress, signals: StopSignals) -> bool:
        """Train on the rest of the current epoch; True when the run must stop before the epoch's end
        (max_steps, max_minutes or a signal, agreed by all ranks)."""
        t, s = self.cfg.trainer, self.state
        s.consumed = self.plan.resume(s.epoch, s.consumed, self.data_part)
        self.data_part = {}
        self.dataset.set_epoch(s.epoch)
        progress.new_epoch()
        self.recovery.new_epoch()
        micro: list[Batch] = []
        batches = self.recovery.batches(self.loader, self.plan.restart, self.feed.timed)
        while True:
            try:
                i, batch = next(batches)
            except StopIteration:
                break
            except Exception as e:  # between steps: the model and optimizer are whole
                self.recovery.save_before_failing(e)
                raise
            n = self.plan.advance(i)
            s.consumed += n
            s.samples_seen += n
            for reason, k in batch.skipped.items():
                s.counters[reason] += k
            self.recovery.check_readable(batch)
            if len(batch) > 0 or self.strategy.matched_steps:
                micro.append(batch)
            if len(micro) == t.grad_accum:  # a step every grad_accum batches, and with the epoch's rest below
                if self._step(micro, runlog, progress, signals):
                    return True
                micro = []
        return bool(micro) and self._step(micro, runlog, progress, signals)

    def _step(self, micro: list[Batch], runlog: RunLog | None, progress: RunProgress, signals: StopSignals) -> bool:
        """One optimizer step and what follows it (log, validation, checkpoint); True to stop."""
        t, s = self.cfg.trainer, self.state
        self.train_step(micro)
        self.recovery.stepped(micro)
        progress.stepped()
        if t.trace_samples:
            trace_samples(self.out_dir, self.rank, {"epoch": s.epoch, "step": s.step, "world": self.world,
                                                    "ids": [i for b in micro for i in b.indices],
                                                    "resumed_at": self._resumed_step})
        logging_step = s.step % t.log_every == 0
        if logging_step:
            self._log_train(runlog, progress)
        lockstep = self.strategy.lockstep  # step-count events need ranks that take step N together
        if lockstep and t.val_every_steps and s.step % t.val_every_steps == 0:
            self._validate_and_save(runlog, progress)
        elif lockstep and ((t.checkpoint_every_steps and s.step % t.checkpoint_every_steps == 0)
                           or self.checkpoints.due(logging_step or self.recovery.alone)):
            self._checkpoint()
        # max_steps is the same on every lockstep rank; the clock and signals are not, so ranks agree on those
        # at every step (a preemption notice gives about 30-120 s: it is acted on at the next step boundary)
        done = bool(t.max_steps and s.step >= t.max_steps)
        if done and lockstep:
            return True
        stop = self.strategy.agree_stop(done or progress.budget.spent() or signals.received is not None
                                        or self.recovery.gone is not None)
        self.recovery.raise_if_gone(stop)  # all ranks agreed on `stop`
        return stop

    def fit(self) -> dict[str, Any]:
        """Train until max_epochs, max_steps, max_minutes, target_wer or a stop signal; returns the summary:
        the last validation row, counters, and `stopped_by` (null when the planned epochs or steps ran)."""
        t, s, main = self.cfg.trainer, self.state, self.rank == 0
        if main:
            write_run_config(self.out_dir, to_dict(self.cfg), t.out_dir if storage.is_remote(t.out_dir) else None)
        self.strategy.barrier()
        if t.prescan:
            prescan(self)
        runlog = RunLog(self.out_dir) if main else None
        if runlog is not None:
            runlog.write("start", s.step, {"epoch": s.epoch, "samples": s.samples_seen, "world_size": self.world,
                                           "strategy": self.cfg.distributed.strategy, "precision": self.precision.mode,
                                           "resumed_from": self.resumed_from})
        budget = TimeBudget(t.max_minutes)
        self.checkpoints.saved_at = time.monotonic()
        self._resumed_step = s.step
        self.model.train()
        last: dict[str, Any] = {}
        progress = RunProgress(planned_steps(t.max_steps, t.max_epochs, self.schedule.steps_per_epoch, self.world), s,
                               t.max_epochs, budget, show=t.progress and main)
        if main and self.resumed_from and 0 < t.max_epochs <= s.epoch:
            log.warning("%s already ran its %d epochs (step %d): nothing to train; its last validation is in %s",
                        self.resumed_from, t.max_epochs, s.step, self.out_dir / "metrics.jsonl")
        try:
            with StopSignals(announce=main) as signals:
                while t.max_epochs <= 0 or s.epoch < t.max_epochs:
                    cut_short = self._train_epoch(runlog, progress, signals)
                    if self.plan.complete(s.consumed):  # the epoch is complete
                        s.counters["dropped_tail"] += self.plan.dropped
                        s.epoch += 1
                        s.consumed = 0
                    self.precision.check()
                    if self.strategy.any_rank(signals.received is not None):  # save at once, no validation
                        self.sync()
                        saved = self.recovery.stop_checkpoint()
                        if saved:
                            self.save()
                        self.stopped_by = signals.name or "SIGTERM"  # a peer rank's signal
                        if main:
                            log.warning("%s: %s at epoch %s step %d, stopping", self.stopped_by,
                                        "checkpoint written" if saved else "no checkpoint", progress.epoch_label(),
                                        s.step)
                        break
                    last = self._validate(runlog, progress)
                    if self.strategy.any_rank(cut_short and t.max_steps > 0 and s.step >= t.max_steps):  # planned end
                        self._checkpoint(last["wer"], ending=True)
                        break
                    if self.strategy.any_rank(budget.spent()):
                        if self.recovery.stop_checkpoint():
                            self._checkpoint(last["wer"], ending=True)
                        self.stopped_by = "max_minutes"
                        if main:
                            log.warning("trainer.max_minutes=%g reached in epoch %s (step %d of %d): stopped before "
                                        "the planned end, the learning-rate schedule did not complete", t.max_minutes,
                                        progress.epoch_label(), s.step, progress.planned)
                        break
                    self._checkpoint(last["wer"], ending=last["wer"] <= t.target_wer or 0 < t.max_epochs <= s.epoch)
                    if last["wer"] <= t.target_wer:
                        self.stopped_by = "target_wer"
                        break
            self.strategy.finish(self.model, self.optimizer)
        except BaseException as e:  # the run log's stop row says the run did not end as planned
            self.stopped_by = self.stopped_by or f"error: {type(e).__name__}"
            raise
        finally:
            progress.close()
            if runlog is not None:
                runlog.write("stop", s.step, {"epoch": s.epoch, "samples": s.samples_seen,
                                              "stopped_by": self.stopped_by, "minutes": budget.elapsed_minutes(),
                                              **self._shape_counts()})
                runlog.close()
        skipped = self.data.report.skipped + sum(s.counters[r] for r in SKIP_REASONS)
        return {**last, "epoch": s.epoch, "step": s.step, "best_wer": s.best_wer,
                "train_utterances": self.data.utterances, "train_skipped": skipped,
                "minutes": budget.elapsed_minutes(), "precision": self.precision.mode, "device": str(self.device),
                "world_size": self.world, "stopped_by": self.stopped_by, **s.counters, **self.feed.summary(),
                **self._shape_counts()}

    def _shape_counts(self) -> dict[str, int]:
        """Batches that fit no fixed shape (ran eagerly) and CUDA graphs captured, when those are in use."""
        graphs = self.optimizer_step.graphs
        return {**({"unshaped_batches": self.unshaped} if self.shapes is not None else {}),
                **({"graph_captures": graphs.captures} if graphs is not None else {})}


def train(cfg: Config) -> dict[str, Any]:
    """Build a Trainer from `cfg` and run it; leaves the process group when done."""
    trainer = Trainer(cfg)
    try:
        summary = trainer.fit()
    except BaseException:
        trainer.strategy.close(failed=True)
        raise
    trainer.strategy.close()
    return summary
