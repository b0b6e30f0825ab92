"""The training loop: CTC in fp32, AdamW/SGD with warm-up and decay, clipping, validation, checkpoints.

    speechscale train --config configs/yesno.yaml trainer.out_dir=runs/yesno
    torchrun --nproc-per-node 2 -m speechscale.cli train --config configs/yesno.yaml   # data parallel

One batch goes: sampler -> dataset (audio, augment, features) -> collate -> model -> CTC -> optimizer.
A non-finite loss or gradient skips the step (counted); a bad audio file drops the utterance (counted).
Under torchrun every rank runs this loop on its share of each round of batches; the strategy
(distributed/strategy.py) combines gradients, metrics and state; rank 0 logs and writes checkpoints.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..components import build_components
from ..config import Config, ConfigError, to_dict
from ..data.dataset import SKIP_REASONS, Batch
from ..data.distributed_sampler import ShardedBatchSampler
from ..distributed import build_strategy
from . import storage
from .checkpoint import (CheckpointError, load_checkpoint, newest_checkpoint, rng_state, save_checkpoint,
                         save_rotating, set_rng_state)
from .data_setup import load_utterances, make_loader
from .evaluate import evaluate
from .optim import build_optimizer, lr_at, set_lr
from .precision import Precision, resolve_device, resolve_precision
from .prescan import prescan

log = logging.getLogger(__name__)


def _check_writable(where: str | Path, key: str) -> None:
    """ConfigError in one line when a local folder cannot be created or written (remote URLs: the first
    write tells)."""
    if storage.is_remote(where):
        return
    try:
        storage.check_writable(where)
    except OSError as e:
        raise ConfigError(f"{key}: cannot write to {where} ({e.strerror or e})") from None


def _check_batch_bound(utts: list[Any], batch_seconds: float) -> None:
    """A batch holds at least one utterance: one longer than data.batch_seconds would break the bound."""
    longest = max(utts, key=lambda u: u.duration)
    if longest.duration > batch_seconds:
        raise ConfigError(f"data.batch_seconds={batch_seconds:g} is shorter than the longest training utterance "
                          f"({longest.duration:g} s, manifest line {longest.line}); raise data.batch_seconds or "
                          f"set data.max_duration={batch_seconds:g} to skip longer ones")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class MetricsLog:
    """Appends JSON lines to OUT/metrics.jsonl and mirrors scalars to TensorBoard when it is installed."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / "metrics.jsonl"
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except Exception as e:  # tensorboard missing or broken: the JSONL log still works
            log.warning("TensorBoard logging off: %s", e)

    def write(self, kind: str, step: int, values: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"kind": kind, "time": time.time(), **values, "step": step}) + "\n")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.tb.add_scalar(f"{kind}/{k}", v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


class _Signals:
    """SIGTERM (a preemption notice), SIGUSR1 (SLURM's --signal) and SIGINT (Ctrl-C) set a flag; the loop
    finishes the step, writes a checkpoint and returns. A second Ctrl-C stops at once (KeyboardInterrupt)."""

    def __init__(self, announce: bool) -> None:
        self.received: int | None = None
        self.announce = announce
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the next Ctrl-C interrupts
            if self.announce:
                log.warning("Ctrl-C: finishing this step and writing a checkpoint (Ctrl-C again stops at once)")

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


class Trainer:
    """Owns the model, data and optimizer of one run (one rank); `fit()` trains and returns the summary."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        t = cfg.trainer
        # Checkpoints go to out_dir, a folder or any fsspec URL (s3://...). Logs (metrics.jsonl,
        # TensorBoard, sample traces) need a local folder: out_dir itself, or trainer.log_dir when remote.
        self.ckpt_dir = storage.join(t.out_dir, "checkpoints")
        self.out_dir = Path(t.log_dir or (f"runs/{t.out_dir.rstrip('/').rsplit('/', 1)[-1]}"
                                          if storage.is_remote(t.out_dir) else t.out_dir))
        for where, key in ((self.ckpt_dir, "trainer.out_dir"), (self.out_dir, "trainer.log_dir")):
            _check_writable(where, key if storage.is_remote(t.out_dir) else "trainer.out_dir")
        if t.threads > 0:
            torch.set_num_threads(t.threads)
        self.strategy = build_strategy(cfg.distributed.strategy)
        self.rank, self.world = self.strategy.rank, self.strategy.world_size
        seed_everything(t.seed)  # the same initial weights on every rank
        if t.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.device = resolve_device(self.strategy.device(t.device))
        self.comps = build_components(cfg)
        self.model = self.comps.model.to(self.device)
        self.precision = Precision(resolve_precision(t.precision, self.device), self.device,
                                   init_scale=t.loss_scale_init, min_scale=t.min_loss_scale)
        n_params = sum(p.numel() for p in self.model.parameters())
        if self.rank == 0:
            log.info("model %s: %d parameters (%.2fM); device %s, precision %s, %d rank(s), strategy %s",
                     cfg.model.name, n_params, n_params / 1e6, self.device, self.precision.mode, self.world,
                     self.strategy.name)
        self.train_utts, self.train_report = load_utterances(cfg.data.train_manifest, self.comps, cfg,
                                                             cfg.data.filter, cfg.data.train_slice)
        _check_batch_bound(self.train_utts, cfg.data.batch_seconds)
        self.val_utts, self.val_report = load_utterances(cfg.data.val_manifest, self.comps, cfg,
                                                         cfg.data.val_filter, cfg.data.val_slice)
        pin = self.device.type == "cuda"
        self.loader, base, self.dataset = make_loader(
            self.train_utts, self.comps, cfg, train=True, pin_memory=pin,
            wrap=lambda b: ShardedBatchSampler(b, self.rank, self.world))
        self.sampler: ShardedBatchSampler = self.loader.batch_sampler  # type: ignore[assignment]
        self.val_loader, _, _ = make_loader(self.val_utts, self.comps, cfg, train=False, pin_memory=pin,
                                            shard=(self.rank, self.world))
        # Compiled (conv models) and/or DDP-wrapped module for training steps; same parameters.
        fwd = torch.compile(self.model, dynamic=True) if t.compile else self.model
        self.forward = self.strategy.wrap(fwd)
        self.optimizer = build_optimizer(self.model, cfg.optim, fused=self.device.type == "cuda")
        # Linear scaling rule for large global batches (with the configured warm-up), on request.
        self.lr_scale = float(self.world) if cfg.distributed.scale_lr else 1.0
        self.ctc = torch.nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
        # The schedule counts samples: one "step" of it is one single-rank batch of an average epoch, so
        # the same run on 1 or N ranks walks the same curve.
        self.epoch_samples = self.sampler.epoch_samples(1)
        self.accum = cfg.trainer.grad_accum
        self.mean_batch = self.epoch_samples / max(1, len(base.batches(1))) * self.accum
        self.total_samples = (t.max_steps * self.world * self.mean_batch if t.max_steps
                              else t.max_epochs * self.epoch_samples)
        self.steps_per_epoch = max(1, round(self.epoch_samples / self.mean_batch))  # optimizer steps
        self.step = 0            # optimizer steps taken (all ranks step together)
        self.epoch = 0
        self.consumed = 0        # samples of this epoch consumed by all ranks together
        self.samples_seen = 0    # samples consumed since the start of training
        self.best_wer = math.inf
        self.counters = {"nonfinite_loss": 0, "nonfinite_grad": 0, **{r: 0 for r in SKIP_REASONS}}
        # Per-step values stay on the device; `sync()` folds them into counters at logging intervals.
        self._pending = torch.zeros(4, device=self.device)  # nonfinite loss, nonfinite grad, loss sum, finite steps
        self._epoch_loss = [0.0, 0]  # synced loss sum and finite-step count since the last validation
        self.history: list[dict[str, float]] = []
        self.resumed_from: str | None = None
        self.stopped_by: str | None = None
        seed_everything(t.seed + 7919 * self.rank)  # dropout and other streams differ per rank
        if t.resume:
            self._resume(t.resume)

    # ---- checkpoints -------------------------------------------------------------------------------
    def _state(self, rngs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "config": to_dict(self.cfg), "meta": self.comps.meta(), "epoch": self.epoch, "step": self.step,
                "sampler": {"epoch": self.epoch, "consumed": self.consumed, "seed": self.cfg.trainer.seed},
                "samples_seen": self.samples_seen, "world_size": self.world,
                "strategy": self.strategy.state_dict(), "best_wer": self.best_wer, "counters": dict(self.counters),
                "history": list(self.history), "rng": rngs[0], "rng_per_rank": rngs,
                "precision": self.precision.state_dict()}

    def _resume(self, where: str) -> None:
        if where == "auto":
            found = newest_checkpoint(self.ckpt_dir)
            if found is None:
                if self.rank == 0:
                    log.info("resume=auto: no checkpoint in %s, starting fresh", self.ckpt_dir)
                return
            path, state = found
        else:
            path, state = Path(where), load_checkpoint(where, map_location=str(self.device))
        version = state.get("format_version", 1)
        if version < 2:
            raise CheckpointError(f"{path}: checkpoint format {version} predates resumable "
                                  f"data positions; it still works for eval and transcribe, not for resume")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step, self.best_wer = state["epoch"], state["step"], state["best_wer"]
        self.consumed = int(state["sampler"]["consumed"])
        self.samples_seen = int(state["samples_seen"])
        self.counters.update(state["counters"])
        self.history = list(state["history"])
        self.precision.load_state_dict(state.get("precision", {}))
        self.strategy.load_state_dict(state.get("strategy", {}))
        rngs = state["rng_per_rank"]
        if len(rngs) == self.world:  # same world size: every rank continues its own streams
            set_rng_state(rngs[self.rank])
        else:  # new world size: fresh per-rank streams derived from the step (data order is unaffected)
            seed_everything(self.cfg.trainer.seed + 7919 * self.rank + 104729 * self.step)
        self.resumed_from = str(path)
        if self.rank == 0:
            log.info("resumed from %s at epoch %d step %d (%d samples into the epoch; saved by %d rank(s), "
                     "now %d)", path, self.epoch, self.step, self.consumed, state["world_size"], self.world)

    def save(self, name: str | None = None) -> str | None:
        """Write a checkpoint (collective: every rank calls it; rank 0 writes). `name` writes that file;
        None writes a rotating `step-N.pt` (keeping trainer.keep_checkpoints), `last.pt` and the pointer."""
        rngs = self.strategy.gather(rng_state())
        path = None
        if self.rank == 0:
            state = self._state(rngs)
            if name is None:
                path = save_rotating(self.ckpt_dir, state, self.step, self.cfg.trainer.keep_checkpoints)
            else:
                path = storage.join(self.ckpt_dir, name)
                save_checkpoint(path, state)
        self.strategy.barrier()
        return path

    # ---- one step ----------------------------------------------------------------------------------
    def train_step(self, batch: Batch | list[Batch]) -> torch.Tensor:
        """One optimizer step over one batch or a list of micro-batches (gradient accumulation; DDP
        communicates on the last only): forward (autocast), CTC (fp32), backward (scaled in fp16), clip,
        step. No host sync on GPUs.

        Returns the detached mean loss on the device. A non-finite loss or gradient skips the update (fused
        optimizers and the fp16 scaler decide on the device) and is counted at the next `sync()`."""
        micro = batch if isinstance(batch, list) else [batch]
        # position in samples: the samples of the batches about to be trained on are already counted
        position = (self.samples_seen - sum(len(b) for b in micro) * self.world) / self.mean_batch
        set_lr(self.optimizer, self.lr_scale * lr_at(max(0.0, position), self.total_samples / self.mean_batch,
                                                     self.cfg.optim, self.steps_per_epoch, self.step))
        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        empty = all(len(b) == 0 for b in micro)
        for j, b in enumerate(micro):
            last = j == len(micro) - 1
            skip_sync = getattr(self.forward, "no_sync", None) if not last else None
            with skip_sync() if skip_sync else contextlib.nullcontext():
                losses.append(self._forward_backward(b, len(micro)))
        loss = torch.stack(losses).sum()  # the mean over micro-batches (each was divided by their count)
        self.strategy.after_backward(self.model)
        self.precision.unscale_(self.optimizer)
        clip = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        bad_loss = ~torch.isfinite(loss)
        bad_grad = ~torch.isfinite(norm) & ~bad_loss
        self.precision.step(self.optimizer, bad_loss | bad_grad)
        self.strategy.after_step(self.model)
        ok = ~(bad_loss | bad_grad) & (not empty)
        self._pending += torch.stack([bad_loss.float(), bad_grad.float(),  # (4,)
                                      torch.where(ok, loss.float(), 0.0), ok.float()])
        self.step += 1
        return loss

    def _forward_backward(self, batch: Batch, parts: int) -> torch.Tensor:
        """Loss of one (micro-)batch, divided by `parts`, back-propagated; returns it detached."""
        empty = len(batch) == 0
        if empty:  # this rank's batch was all unreadable audio: it still joins the gradient allreduce
            batch = self._dummy_batch()
        batch = batch.to(self.device)
        with self.precision.autocast():
            logits, out_lens = self.forward(batch.feats, batch.feat_lens)  # (B, T, V)
        log_probs = logits.float().log_softmax(-1).transpose(0, 1)  # (T, B, V), fp32 outside autocast
        loss = self.ctc(log_probs, batch.targets, out_lens, batch.target_lens) / parts
        if empty:
            loss = loss * 0.0
        self.precision.scale(loss).backward()
        return loss.detach()

    def _dummy_batch(self) -> Batch:
        """One second of silence labelled "a": a real forward/backward whose loss is then zeroed."""
        frames = self.comps.features.frames_for_seconds(1.0)
        return Batch(torch.zeros(1, self.comps.features.num_features, frames), torch.tensor([frames]),
                     torch.tensor([1]), torch.tensor([1]), [""], [], {})

    def sync(self) -> float | None:
        """Fold the device-side counters of all ranks into `counters` (collective; one host sync);
        returns the mean loss of the finite steps since the last sync, or None when there were none."""
        nl, ng, loss_sum, n = self.strategy.all_reduce_sum(self._pending.clone()).tolist()
        self._pending.zero_()
        self.counters["nonfinite_loss"] += int(nl)
        self.counters["nonfinite_grad"] += int(ng)
        self._epoch_loss[0] += loss_sum
        self._epoch_loss[1] += int(n)
        return loss_sum / n if n else None

    def validate(self) -> dict[str, float]:
        """WER/CER on the validation set; each rank scores its share, the counts are summed."""
        res = evaluate(self.model, self.val_loader, self.comps.tokenizer, self.device, self.precision.autocast)
        m = res.metric
        counts = torch.tensor([m.word_errors, m.words, m.char_errors, m.chars, m.utterances, res.skipped],
                              dtype=torch.float64)
        we, w, ce, c, n, skipped = self.strategy.all_reduce_sum(counts).tolist()
        return {"wer": we / w if w else math.nan, "cer": ce / c if c else math.nan, "utterances": int(n),
                "skipped": int(skipped)}

    # ---- the loop ----------------------------------------------------------------------------------
    def _out_of_time(self, started: float) -> bool:
        t = self.cfg.trainer
        return bool(t.max_minutes) and (time.time() - started) / 60 >= t.max_minutes

    def _shown_epoch(self) -> str:
        """The epoch being trained (or just finished), 1-based as in the progress bar: 'k/N'."""
        shown = self.epoch if self.consumed == 0 and self.step > 0 else self.epoch + 1
        return f"{shown}/{self.cfg.trainer.max_epochs}" if self.cfg.trainer.max_epochs else str(shown)

    def _planned_steps(self) -> int:
        """Optimizer steps this rank takes in the whole run (for the progress bar and the ETA)."""
        t = self.cfg.trainer
        by_epochs = math.ceil(t.max_epochs * self.steps_per_epoch / self.world) if t.max_epochs else 0
        return min(x for x in (t.max_steps, by_epochs) if x) or 1

    def _eta(self, started: float) -> str:
        done = self.step - self._resumed_step
        left = self._planned_steps() - self.step
        if done <= 0 or left <= 0:
            return ""
        return f", ETA {(time.time() - started) / done * left / 60:.1f} min"

    def _validate_and_save(self, metrics: MetricsLog | None, started: float) -> dict[str, float]:
        self.sync()
        val = self.validate()
        total, n = self._epoch_loss
        self._epoch_loss = [0.0, 0]
        train_loss = total / n if n else math.nan
        row = {"epoch": self.epoch, "step": self.step, "train_loss": train_loss, **val}
        self.history.append(row)
        if metrics is not None:
            metrics.write("val", self.step, {**row, **self.counters})
            log.info("epoch %s step %d: train loss %.3f, val WER %.2f%% CER %.2f%% (%d utts)%s",
                     self._shown_epoch(), self.step, train_loss, 100 * val["wer"], 100 * val["cer"],
                     val["utterances"], self._eta(started))
        if val["wer"] < self.best_wer or (val["wer"] == self.best_wer
                                          and not storage.exists(storage.join(self.ckpt_dir, "best.pt"))):
            self.best_wer = val["wer"]
            self.save("best.pt")
        self.save()
        return row

    def _log_train(self, metrics: MetricsLog | None, bar: tqdm) -> None:
        """Logging interval: the one host sync of the hot loop, the fp16 watchdog, GPU peak memory."""
        loss = self.sync()
        self.precision.check()
        if metrics is None:
            return
        row: dict[str, Any] = {"epoch": self.epoch, "lr": self.optimizer.param_groups[0]["lr"]}
        if loss is not None:
            row["loss"] = loss
            bar.set_postfix(loss=f"{loss:.3f}")
        if self.precision.scaling:
            row["loss_scale"] = self.precision.loss_scale()
        if self.device.type == "cuda":
            row["peak_mem_mb"] = torch.cuda.max_memory_allocated(self.device) / 2 ** 20
            torch.cuda.reset_peak_memory_stats(self.device)
        metrics.write("train", self.step, row)

    def _trace(self, micro: list[Batch]) -> None:
        """trainer.trace_samples: append this rank's sample ids of the step (tests check exactly-once)."""
        with (self.out_dir / f"samples-rank{self.rank}.jsonl").open("a") as f:
            f.write(json.dumps({"epoch": self.epoch, "step": self.step, "ids": [i for b in micro for i in b.indices],
                                "resumed_at": self._resumed_step, "world": self.world}) + "\n")

    def _train_epoch(self, metrics: MetricsLog | None, bar: tqdm, signals: _Signals, started: float) -> bool:
        """Train on the rest of the current epoch; True when the run must stop before the epoch's end
        (max_steps, max_minutes or a signal, agreed by all ranks)."""
        t = self.cfg.trainer
        self.sampler.resume(self.epoch, self.consumed)
        self.dataset.set_epoch(self.epoch)
        total = f"/{t.max_epochs}" if t.max_epochs else ""
        bar.set_description(f"epoch {self.epoch + 1}{total}")
        micro: list[Batch] = []
        for i, batch in enumerate(self.loader):
            self.consumed += self.sampler.round_samples[i]
            self.samples_seen += self.sampler.round_samples[i]
            for reason, n in batch.skipped.items():
                self.counters[reason] = self.counters.get(reason, 0) + n
            if len(batch) > 0 or self.world > 1:
                micro.append(batch)
            # a step every grad_accum batches, and with what is left at the epoch's end
            if not micro or (len(micro) < self.accum and i < len(self.sampler) - 1):
                continue
            self.train_step(micro)
            bar.update(1)
            if t.trace_samples:
                self._trace(micro)
            micro = []
            logging_step = self.step % t.log_every == 0
            if logging_step:
                self._log_train(metrics, bar)
            if t.val_every_steps and self.step % t.val_every_steps == 0:
                self._validate_and_save(metrics, started)
            elif t.checkpoint_every_steps and self.step % t.checkpoint_every_steps == 0:
                self.save()
            # max_steps is the same on every rank; the clock and signals are not, so ranks agree on
            # those at logging steps (no collective per step)
            if t.max_steps and self.step >= t.max_steps:
                return True
            if (self.world == 1 or logging_step) and self.strategy.any(
                    self._out_of_time(started) or signals.received is not None):
                return True
        return False

    def fit(self) -> dict[str, Any]:
        """Train until max_epochs, max_steps, max_minutes, target_wer or a stop signal; returns the summary:
        the last validation row, counters, and `stopped_by` (null when the planned epochs or steps ran)."""
        t = self.cfg.trainer
        main = self.rank == 0
        if main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            config = json.dumps(to_dict(self.cfg), indent=2)
            (self.out_dir / "config.json").write_text(config)
            if storage.is_remote(t.out_dir):
                storage.write_bytes(storage.join(t.out_dir, "config.json"), config.encode())
        self.strategy.barrier()
        if t.prescan:
            prescan(self)
        metrics = MetricsLog(self.out_dir) if main else None
        started = time.time()
        self._resumed_step = self.step
        self.model.train()
        last: dict[str, Any] = {}
        # One bar for the whole run, and only on a terminal: in a log file bars pile up as carriage returns
        # (the validation log lines carry an ETA instead).
        bar = tqdm(total=self._planned_steps(), initial=self.step, unit="step", dynamic_ncols=True,
                   disable=not (t.progress and main and sys.stderr.isatty()))
        try:
            with _Signals(announce=main) as signals:
                while t.max_epochs <= 0 or self.epoch < t.max_epochs:
                    cut_short = self._train_epoch(metrics, bar, signals, started)
                    if self.consumed >= self.epoch_samples - self.sampler.dropped:  # the epoch is complete
                        self.counters["dropped_tail"] = self.counters.get("dropped_tail", 0) + self.sampler.dropped
                        self.epoch += 1
                        self.consumed = 0
                    self.precision.check()
                    if self.strategy.any(signals.received is not None):  # save at once, no validation
                        self.sync()
                        self.save()
                        self.stopped_by = signal.Signals(signals.received or signal.SIGTERM).name
                        if main:
                            log.warning("%s: checkpoint written at epoch %s step %d, stopping", self.stopped_by,
                                        self._shown_epoch(), self.step)
                        break
                    last = self._validate_and_save(metrics, started)
                    if cut_short and t.max_steps and self.step >= t.max_steps:  # planned end: not a stop
                        break
                    if self.strategy.any(self._out_of_time(started)):
                        self.stopped_by = "max_minutes"
                        if main:
                            log.warning("trainer.max_minutes=%g reached in epoch %s (step %d of %d): stopped "
                                        "before the planned end, the learning-rate schedule did not complete",
                                        t.max_minutes, self._shown_epoch(), self.step, self._planned_steps())
                        break
                    if last["wer"] <= t.target_wer:
                        self.stopped_by = "target_wer"
                        break
        finally:
            bar.close()
            if metrics is not None:
                metrics.close()
        skipped = self.train_report.skipped + sum(self.counters[r] for r in SKIP_REASONS)
        return {**last, "epoch": self.epoch, "step": self.step, "best_wer": self.best_wer,
                "train_utterances": len(self.train_utts), "train_skipped": skipped,
                "minutes": (time.time() - started) / 60, "precision": self.precision.mode,
                "device": str(self.device), "world_size": self.world, "stopped_by": self.stopped_by,
                **self.counters}


def train(cfg: Config) -> dict[str, Any]:
    """Build a Trainer from `cfg` and run it; leaves the process group when done."""
    trainer = Trainer(cfg)
    try:
        return trainer.fit()
    finally:
        trainer.strategy.close()
