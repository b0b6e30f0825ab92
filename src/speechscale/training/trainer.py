"""The training loop: CTC in fp32, AdamW/SGD with warm-up and decay, clipping, validation, checkpoints.

    speechscale train --config configs/yesno.yaml trainer.out_dir=runs/yesno
    torchrun --nproc-per-node 2 -m speechscale.cli train --config configs/yesno.yaml   # data parallel

One batch goes: data plan (data/batch_plan.py) -> dataset (audio, augment, features) -> collate -> model ->
CTC (step.py) -> strategy -> optimizer. A non-finite loss or gradient skips the step (counted); an utterance that cannot
become features is dropped (counted by reason). The strategy (distributed/) owns everything distributed;
rank 0 logs and writes checkpoints (state.py holds their layout).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import torch

from .. import storage
from .._compat import deterministic_algorithms, drop_loader_workers, loader_worker_died
from ..components import build_components, components_from_description, describe
from ..config import Config, ConfigError, to_dict
from ..data.dataset import SKIP_REASONS, Batch
from ..data.features import GLOBAL_STATS_UTTERANCES, WITH_TRAINING_SET_STATS, pooled_prior
from ..data.loading import training_data
from ..distributed import build_strategy
from ..distributed.straggler import Straggler
from ..storage.cards import build_card, data_summary, write_card
from ..storage.checkpoints import (
    CheckpointWriteError,
    checkpoints_folder,
    error_line,
    load_checkpoint,
    newest_checkpoint,
    save_checkpoint_in,
)
from ..storage.seeds import derive_seed, seed_everything
from .ema import WeightAverage
from .evaluate import validate
from .feeding import FeedMeter
from .graphs import step_shapes
from .init import freeze, init_weights, resume_differences
from .optim import SampleSchedule, build_optimizer, set_lr
from .precision import Precision, resolve_device, resolve_precision
from .preflight import check_fresh, check_writable, resolve_alphabet, resolve_pieces
from .prescan import prescan
from .progress import RunProgress, planned_steps
from .recompute import recompute_blocks
from .runlog import RunLog, trace_samples, train_row, write_run_config
from .state import TrainingState, checkpoint_dict, rank_part, restore
from .step import StepTally, build_train_step, placeholder_batch
from .stop import StopSignals, TimeBudget

log = logging.getLogger(__name__)
LOADER_RESTARTS = 3  # new loader workers started at one position before the run stops


class LoaderFailed(RuntimeError):
    """The data loader's workers kept dying at one position; the message says where and what may help."""


class DataUnreadable(RuntimeError):
    """data.max_unreadable_batches batches in a row had no utterance that could be read."""


class Diverged(RuntimeError):
    """trainer.max_skipped_steps steps in a row were skipped for a non-finite loss or gradient."""


class Position(NamedTuple):
    """Where a failing run goes back to (Trainer._position): counts of what the data gave, not of events."""
    epoch: int
    consumed: int
    samples_seen: int
    counts: dict[str, int]
    step: int


class Trainer:
    """Owns the model, data and optimizer of one run (one rank); `fit()` trains and returns the summary."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        t = cfg.trainer
        # Checkpoints go to out_dir, a folder or any fsspec URL (s3://...). Logs (metrics.jsonl,
        # TensorBoard, sample traces) need a local folder: out_dir itself, or trainer.log_dir when remote.
        self.ckpt_dir = storage.join(t.out_dir, "checkpoints")
        remote = storage.is_remote(t.out_dir)
        self.out_dir = Path(t.log_dir or (f"runs/{t.out_dir.rstrip('/').rsplit('/', 1)[-1]}" if remote else t.out_dir))
        if int(os.environ.get("RANK", 0)) == 0:  # the rank that writes checks, before any process group exists
            check_writable(self.ckpt_dir, "trainer.out_dir")
            check_fresh(self.ckpt_dir, t.resume, t.out_dir)
            for name in storage.sweep_temp(self.ckpt_dir):  # left by a write that a crash or a full disk cut short
                log.info("removed %s/%s, a temp file of an interrupted write", self.ckpt_dir, name)
            check_writable(self.out_dir, "trainer.log_dir" if remote else "trainer.out_dir")
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
        resuming = self._checkpoint_to_resume(t.resume) if t.resume else None  # read once; its word pieces hold
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
        self.card_streaming = self.comps.streaming_card()
        self.card_data = data_summary(cfg.data.mix or [cfg.data.train_manifest], utts, data.seconds)
        if not utts:
            self.card_data.update(utterances=data.utterances, hours=None)
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
        self._unreadable = 0  # batches in a row with no utterance read
        self._gone: DataUnreadable | None = None  # ranks in step: this one's reason to stop with the others
        self._saved_at = time.monotonic()  # the last checkpoint's time (trainer.checkpoint_every_minutes)
        self.ema = WeightAverage(self.model, t.ema_decay) if t.ema_decay > 0 else None
        seed_everything(derive_seed(t.seed, "process", self.rank))  # dropout and other streams differ per rank
        if resuming:
            self._resume(*resuming)
        elif t.resume and self.rank == 0:
            log.info("resume=auto: no checkpoint in %s, starting fresh", self.ckpt_dir)
        self._resumed_step = self.state.step
        self._mark = self._position()  # see _save_before_failing
        self._synced_step, self._skipped_run = self.state.step, 0  # steps in a row skipped, as of the last sync

    # ---- checkpoints -------------------------------------------------------------------------------
    def _checkpoint_to_resume(self, where: str) -> tuple[str, dict[str, Any]] | None:
        """trainer.resume's checkpoint, loaded: the newest in the run's folder for `auto` (None when there is none),
        the newest in another run's folder (or its checkpoints folder) for a folder."""
        if where == "auto":
            return newest_checkpoint(self.ckpt_dir)
        if not storage.is_remote(where) and Path(where).is_dir():
            found = newest_checkpoint(checkpoints_folder(where))
            if found is None:
                raise ConfigError(f"trainer.resume={where}: a folder without a checkpoint to resume from")
            return found
        return where, load_checkpoint(where)

    def _resume(self, path: str, ckpt: dict[str, Any]) -> None:
        components_from_description(describe(ckpt), where=str(path))  # typed and in range before use
        wrong = resume_differences(ckpt.get("config", {}), self.cfg)
        if wrong:
            raise ConfigError(f"{path} was trained with {'; '.join(wrong)}: resume it with its own settings, or start "
                              f"a new run from its weights with trainer.init_from")
        saved = ckpt.get("config", {}).get("text", {}).get("alphabet", self.cfg.text.alphabet)
        if saved != self.cfg.text.alphabet:
            raise ConfigError(f"{path} spells {saved!r}, this run's text.alphabet is {self.cfg.text.alphabet!r}: "
                              f"resume with the checkpoint's alphabet (text.alphabet=auto reads the training "
                              "transcripts as they are now)")
        pieces = ckpt.get("config", {}).get("text", {}).get("piece_list", [])
        if pieces != self.cfg.text.piece_list:
            raise ConfigError(f"{path} spells {len(pieces) or 'no'} word pieces, this run "
                              f"{len(self.cfg.text.piece_list) or 'none'} (others): resume with the checkpoint's "
                              "text.pieces and leave text.piece_list empty, it is read from the checkpoint")
        self.state, saved_by, self.data_part = restore(ckpt, str(path), self.model, self.optimizer, self.precision,
                                                       self.strategy, self.cfg.trainer.seed)
        if self.ema is not None:
            self.ema.load_state_dict(ckpt.get("ema"), self.model)
        self.resumed_from = str(path)
        if self.rank == 0:
            log.info("resumed from %s at epoch %d step %d (%d samples into the epoch; saved by %d rank(s), now %d)",
                     path, self.state.epoch, self.state.step, self.state.consumed, saved_by, self.world)

    def save(self, name: str | None = None, best: bool = False) -> str | None:
        """Write a checkpoint (collective: every rank calls it; rank 0 writes). `name` writes that file;
        None writes a rotating `step-N.pt` (keeping trainer.keep_checkpoints), `last.pt` and the pointer;
        `best` also writes the same checkpoint as best.pt."""
        self._saved_at = time.monotonic()
        ranks = self.strategy.gather(rank_part(self.strategy, self.model, self.optimizer, self.plan.rank_state()))
        path, failure = None, None
        with self.strategy.consensus(self.model) as model:
            if self.rank == 0:
                ckpt = checkpoint_dict(config=to_dict(self.cfg), model=model.state_dict(),
                                       optimizer=self.optimizer.state_dict(), precision=self.precision.state_dict(),
                                       training=self.state, ranks=ranks,
                                       ema=self.ema.state_dict() if self.ema is not None else None)
                ckpt["card"] = build_card(ckpt["config"], self.n_params, self.card_data,
                                          (self.state.history or [{}])[-1], self.state.step, self.state.epoch,
                                          self.card_streaming)
                try:
                    write_card(self.ckpt_dir, {**ckpt["card"], "file": "last.pt (best.pt carries a card of its own)"})
                    if best:
                        save_checkpoint_in(self.ckpt_dir, ckpt, "best.pt", self.state.step, 1)
                    path = save_checkpoint_in(self.ckpt_dir, ckpt, name, self.state.step,
                                              self.cfg.trainer.keep_checkpoints)
                except Exception as e:  # every rank must learn of it, or the others wait in the next collective
                    failure = error_line(e)
        if self.strategy.any_rank(failure is not None):  # also the barrier that ends every save
            raise CheckpointWriteError(
                f"writing the checkpoint of step {self.state.step} to {self.ckpt_dir} failed"
                f"{f' ({failure})' if failure else ' on rank 0'}; the run stopped on every rank. Free space (or fix the "
                f"storage) and continue it with trainer.resume=auto from the last checkpoint that was written")
        return path

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
        if collective and self.strategy.lockstep and s.step > self._synced_step:
            steps, self._synced_step = s.step - self._synced_step, s.step
            # a skipped step is flagged once on every rank (a bad loss on one makes the others' gradient bad)
            every = s.counters["nonfinite_loss"] + s.counters["nonfinite_grad"] - flagged >= steps * self.world
            self._skipped_run = self._skipped_run + steps if every else 0
        return loss

    def _stop_if_diverged(self) -> None:
        """Diverged, the same on every rank, once trainer.max_skipped_steps steps in a row were all skipped (as
        seen at the syncs: every step since one skipped, on every rank)."""
        limit = self.cfg.trainer.max_skipped_steps
        if limit and self._skipped_run >= limit:
            raise Diverged(
                f"the last {self._skipped_run} steps (to step {self.state.step}) were all skipped for a non-finite "
                f"loss or gradient: the run diverged, and training on would change nothing. Try a lower optim.lr, "
                f"a longer optim.warmup_steps or a smaller optim.grad_clip; the weights are those of step "
                f"{self.state.step - self._skipped_run}, as in {self.ckpt_dir} (trainer.max_skipped_steps=0 trains on)")

    def validate(self) -> dict[str, float]:
        """WER/CER of the consensus weights on the validation set."""
        return validate(self.model, self.val_loader, self.comps.tokenizer, self.strategy, self.device,
                        self.precision.autocast)

    # ---- the loop ----------------------------------------------------------------------------------
    def _checkpoint_due(self, check: bool) -> bool:
        """Whether trainer.checkpoint_every_minutes have passed since the last checkpoint on any rank (collective when
        `check`, which must be the same on every rank: the ranks' clocks are not)."""
        minutes = self.cfg.trainer.checkpoint_every_minutes
        if not minutes or not check:
            return False
        return self.strategy.any_rank(time.monotonic() - self._saved_at >= 60 * minutes)

    def _validate_and_save(self, runlog: RunLog | None, progress: RunProgress) -> None:
        """Validate, log the row and write a checkpoint (mid-epoch: trainer.val_every_steps)."""
        self._checkpoint(self._validate(runlog, progress)["wer"])

    def _checkpoint(self, wer: float | None = None, ending: bool = False) -> None:
        """A checkpoint (also best.pt when validation `wer` is the best so far), unless some rank is amid batches
        it could not read and the run goes on (collective): one written there would resume past them, and if the
        data is gone the run stops in a few batches anyway."""
        s = self.state
        if not ending and self.strategy.any_rank(self._unreadable > 0):
            if self.rank == 0:
                log.warning("no checkpoint at step %d: batches with no utterance read since step %d (the data may be "
                            "gone); the last checkpoint stays the one to resume from", s.step, self._mark.step)
            return
        best = wer is not None and (wer < s.best_wer or (wer == s.best_wer and not storage.exists(
            storage.join(self.ckpt_dir, "best.pt"))))
        if wer is not None:
            s.best_wer = min(s.best_wer, wer)
        self.save(best=best)

    def _validate(self, runlog: RunLog | None, progress: RunProgress) -> dict[str, float]:
        """The validation row, logged."""
        s = self.state
        self.sync()
        self._stop_if_diverged()
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
        self._stop_if_diverged()
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
        if not self._unreadable:  # else the position before the unreadable batches stays the one to go back to
            self._mark = self._position()
        micro: list[Batch] = []
        batches = self._epoch_batches()
        while True:
            try:
                i, batch = next(batches)
            except StopIteration:
                break
            except Exception as e:  # between steps: the model and optimizer are whole
                self._save_before_failing(e)
                raise
            n = self.plan.advance(i)
            s.consumed += n
            s.samples_seen += n
            for reason, k in batch.skipped.items():
                s.counters[reason] += k
            self._check_readable(batch)
            if len(batch) > 0 or self.strategy.matched_steps:
                micro.append(batch)
            if len(micro) == t.grad_accum:  # a step every grad_accum batches, and with the epoch's rest below
                if self._step(micro, runlog, progress, signals):
                    return True
                micro = []
        return bool(micro) and self._step(micro, runlog, progress, signals)

    def _position(self) -> Position:
        """Where a failing run goes back to, taken after each step that read data. Counts of events (steps skipped,
        loader restarts) are not taken back."""
        s = self.state
        return Position(s.epoch, s.consumed, s.samples_seen,
                        {k: s.counters[k] for k in (*SKIP_REASONS, "dropped_tail")}, s.step)

    def _check_readable(self, batch: Batch) -> None:
        """Count batches in a row of which every utterance was unreadable; at data.max_unreadable_batches the run
        stops (DataUnreadable), going back to before them: training on would use up the planned epochs on
        nothing, and a resumed run reads those batches again."""
        if len(batch) > 0:
            self._unreadable = 0
            return
        if not batch.skipped.get("bad_audio"):
            return
        self._unreadable += 1
        limit = self.cfg.data.max_unreadable_batches
        if limit and self._unreadable >= limit:
            mark = self._mark
            error = DataUnreadable(
                f"{self._unreadable} batches in a row had no utterance that could be read (after step {mark.step}, "
                f"epoch {mark.epoch} sample {mark.consumed}; the log names each file and why): the "
                f"data is gone - a store down past its retries, expired credentials, an unmounted disk? Continue with "
                f"trainer.resume=auto once it is back (data.max_unreadable_batches=0 skips and counts them instead)")
            if self.world > 1 and self.strategy.lockstep:  # all ranks stop after this step (_step), none waiting
                self._gone = self._gone or error
                return
            self._save_before_failing(error)
            raise error

    def _save_before_failing(self, error: Exception) -> None:
        """The data failed for good: a one-process run goes back to its last step (the batches read since then
        are given back) and writes a checkpoint, so that trainer.resume=auto continues from there; ranks in step
        with others cannot (a checkpoint is collective, and the others wait in the next step)."""
        s = self.state
        if not self._alone:
            log.error("rank %d: stopped at epoch %d step %d (%s); the run continues from its last checkpoint with "
                      "trainer.resume=auto", self.rank, s.epoch, s.step, error_line(error))
            return
        self._go_back()
        try:
            self.sync()
            self.save()
        except Exception as e:  # the data's error is the one to report
            log.error("stopped at epoch %d step %d, and no checkpoint could be written: %s", s.epoch, s.step,
                      error_line(e))
            return
        log.error("stopped at epoch %d step %d (%s): checkpoint written; continue with trainer.resume=auto",
                  s.epoch, s.step, error_line(error))

    @property
    def _alone(self) -> bool:
        """One process in step with no other: it alone decides where its checkpoint resumes."""
        return self.world == 1 and self.strategy.lockstep

    def _go_back(self) -> None:
        """Back to the last step that read data (no step since: empty batches take none); the batches read since
        are given back."""
        s, mark = self.state, self._mark
        s.epoch, s.consumed, s.samples_seen = mark.epoch, mark.consumed, mark.samples_seen
        s.counters.update(mark.counts)

    def _stop_checkpoint(self) -> bool:
        """Before the checkpoint of a run cut short (a signal, its time budget), whether to write it (collective). A
        one-process run amid batches it could not read goes back before them, so that a resume reads them again
        rather than starting past them. Ranks with others cannot go back alone (each rank's last step with data
        differs): while any is amid such batches none is written, and the last checkpoint, from before them, stays
        the one to resume from (as for the checkpoints on the way)."""
        if self._alone:
            if self._unreadable:
                log.warning("%d batches with no utterance read since step %d: the checkpoint resumes before them",
                            self._unreadable, self._mark.step)
                self._go_back()
            return True
        if self.strategy.any_rank(self._unreadable > 0):
            if self.rank == 0:
                log.warning("no checkpoint at the stop (step %d): some rank has read no utterance since step %d (the "
                            "data may be gone); the last checkpoint, from before that, stays the one to resume from",
                            self.state.step, self._mark.step)
            return False
        return True

    def _epoch_batches(self) -> Iterator[tuple[int, Batch]]:
        """(index in the loader's pass, batch) for the rest of the epoch. A loader worker that dies (the kernel's OOM
        killer, say) is replaced: the loader starts again where this rank's trained batches end (BatchPlan.restart:
        a lockstep position, or an asynchronous learner's claimed batches); LOADER_RESTARTS times in a row without
        a batch between them, and the run stops (LoaderFailed)."""
        failed = 0
        while True:
            try:
                for i, batch in enumerate(self.feed.timed(self.loader)):
                    failed = 0
                    yield i, batch
                return
            except Exception as e:  # a dead worker comes as several types: _compat.loader_worker_died
                if not loader_worker_died(e):
                    raise
                if failed >= LOADER_RESTARTS:
                    raise LoaderFailed(f"data loader workers died {failed + 1} times in a row at sample {self.state.consumed} "
                                       f"of epoch {self.state.epoch} ({error_line(e)}): the kernel's OOM killer? fewer "
                                       f"data.num_workers or a smaller data.batch_seconds need less memory") from e
                failed += 1
                self.state.counters["loader_restarts"] += 1
                log.warning("rank %d: %s; the loader starts again at sample %d of epoch %d", self.rank, e,
                            self.state.consumed, self.state.epoch)
                drop_loader_workers(self.loader)
                self.plan.restart(self.state.consumed)

    def _step(self, micro: list[Batch], runlog: RunLog | None, progress: RunProgress, signals: StopSignals) -> bool:
        """One optimizer step and what follows it (log, validation, checkpoint); True to stop."""
        t, s = self.cfg.trainer, self.state
        self.train_step(micro)
        if any(len(b) for b in micro):  # not a step of placeholders (this rank's batches all skipped)
            self._mark = self._position()
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
                           or self._checkpoint_due(logging_step or self._alone)):
            self._checkpoint()
        # max_steps is the same on every lockstep rank; the clock and signals are not, so ranks agree on those
        # at every step (a preemption notice gives about 30-120 s: it is acted on at the next step boundary)
        done = bool(t.max_steps and s.step >= t.max_steps)
        if done and lockstep:
            return True
        stop = self.strategy.agree_stop(done or progress.budget.spent() or signals.received is not None
                                        or self._gone is not None)
        if stop and lockstep and self.strategy.any_rank(self._gone is not None):  # all ranks agreed on `stop`
            error = self._gone or DataUnreadable(
                f"another rank had {self.cfg.data.max_unreadable_batches} batches in a row with no utterance that "
                f"could be read (its log names each file and why): the data is gone? Continue with "
                f"trainer.resume=auto once it is back")
            self._save_before_failing(error)
            raise error
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
        self._saved_at = time.monotonic()
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
                        saved = self._stop_checkpoint()
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
                        if self._stop_checkpoint():
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
