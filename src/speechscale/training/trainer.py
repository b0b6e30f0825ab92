"""The training loop: CTC in fp32, AdamW/SGD with warm-up and decay, clipping, validation, checkpoints.

    speechscale train --config configs/yesno.yaml trainer.out_dir=runs/yesno

One batch goes: sampler -> dataset (audio, augment, features) -> collate -> model -> CTC -> optimizer.
A non-finite loss or gradient skips the step (counted); a bad audio file drops the utterance (counted).
"""
from __future__ import annotations

import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..components import build_components
from ..config import Config, to_dict
from ..data.dataset import Batch
from .checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from .data_setup import load_utterances, make_loader
from .evaluate import evaluate
from .optim import build_optimizer, lr_at, set_lr
from .precision import Precision, resolve_device, resolve_precision
from .prescan import prescan

log = logging.getLogger(__name__)


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


class Trainer:
    """Owns the model, data and optimizer of one run; `fit()` trains and returns the final summary."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        t = cfg.trainer
        if t.threads > 0:
            torch.set_num_threads(t.threads)
        seed_everything(t.seed)
        if t.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.out_dir = Path(t.out_dir)
        self.ckpt_dir = self.out_dir / "checkpoints"
        self.device = resolve_device(t.device)
        self.comps = build_components(cfg)
        self.model = self.comps.model.to(self.device)
        self.precision = Precision(resolve_precision(t.precision, self.device), self.device,
                                   init_scale=t.loss_scale_init, min_scale=t.min_loss_scale)
        log.info("device %s, precision %s", self.device, self.precision.mode)
        # The forward used for training steps; compiled on request (conv models), same parameters.
        self.forward = torch.compile(self.model, dynamic=True) if t.compile else self.model
        n_params = sum(p.numel() for p in self.model.parameters())
        log.info("model %s: %d parameters (%.2fM)", cfg.model.name, n_params, n_params / 1e6)
        self.train_utts, self.train_report = load_utterances(cfg.data.train_manifest, self.comps, cfg,
                                                             cfg.data.filter, cfg.data.train_slice)
        self.val_utts, self.val_report = load_utterances(cfg.data.val_manifest, self.comps, cfg,
                                                         cfg.data.val_filter, cfg.data.val_slice)
        pin = self.device.type == "cuda"
        self.loader, self.sampler, self.dataset = make_loader(self.train_utts, self.comps, cfg, train=True,
                                                              pin_memory=pin)
        self.val_loader, _, _ = make_loader(self.val_utts, self.comps, cfg, train=False, pin_memory=pin)
        self.optimizer = build_optimizer(self.model, cfg.optim, fused=self.device.type == "cuda")
        self.ctc = torch.nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
        # Shuffled epochs are the typical length (SortaGrad's epoch 0 may pack differently).
        self.steps_per_epoch = len(self.sampler.batches(1))
        self.total_steps = t.max_steps or t.max_epochs * self.steps_per_epoch
        self.step = 0
        self.epoch = 0
        # Batches of this epoch consumed by the loop. Not the sampler's own position: DataLoader workers
        # prefetch, so the sampler runs ahead of what has been trained on.
        self.consumed = 0
        self.best_wer = math.inf
        self.counters = {"nonfinite_loss": 0, "nonfinite_grad": 0, "bad_audio": 0}
        # Per-step values stay on the device; `sync()` folds them into counters at logging intervals.
        self._pending = torch.zeros(4, device=self.device)  # nonfinite loss, nonfinite grad, loss sum, finite steps
        self._epoch_loss = [0.0, 0]  # synced loss sum and finite-step count since the last validation
        self.history: list[dict[str, float]] = []
        if t.resume:
            self._resume(t.resume)

    # ---- checkpoints -------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "config": to_dict(self.cfg), "meta": self.comps.meta(), "epoch": self.epoch, "step": self.step,
                "sampler": {**self.sampler.state_dict(), "epoch": self.epoch, "position": self.consumed},
                "best_wer": self.best_wer, "counters": dict(self.counters),
                "history": list(self.history), "rng": rng_state(), "precision": self.precision.state_dict()}

    def _resume(self, where: str) -> None:
        path = self.ckpt_dir / "last.pt" if where == "auto" else Path(where)
        if where == "auto" and not path.is_file():
            log.info("resume=auto: no checkpoint in %s, starting fresh", self.ckpt_dir)
            return
        state = load_checkpoint(path, map_location=str(self.device))
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step, self.best_wer = state["epoch"], state["step"], state["best_wer"]
        self.sampler.load_state_dict(state["sampler"])
        self.consumed = self.sampler.position
        self.counters.update(state["counters"])
        self.precision.load_state_dict(state.get("precision", {}))
        self.history = list(state["history"])
        set_rng_state(state["rng"])
        log.info("resumed from %s at epoch %d step %d", path, self.epoch, self.step)

    def save(self, name: str) -> Path:
        path = self.ckpt_dir / name
        save_checkpoint(path, self._state())
        return path

    # ---- one step ----------------------------------------------------------------------------------
    def train_step(self, batch: Batch) -> torch.Tensor:
        """Forward (autocast), CTC (fp32), backward (scaled in fp16), clip, step; no host sync on GPUs.

        Returns the detached loss on the device. A non-finite loss or gradient skips the update (fused
        optimizers and the fp16 scaler decide on the device) and is counted at the next `sync()`."""
        set_lr(self.optimizer, lr_at(self.step, self.total_steps, self.cfg.optim, self.steps_per_epoch))
        batch = batch.to(self.device)
        with self.precision.autocast():
            logits, out_lens = self.forward(batch.feats, batch.feat_lens)  # (B, T, V)
        log_probs = logits.float().log_softmax(-1).transpose(0, 1)  # (T, B, V), fp32 outside autocast
        loss = self.ctc(log_probs, batch.targets, out_lens, batch.target_lens)
        self.optimizer.zero_grad(set_to_none=True)
        self.precision.scale(loss).backward()
        self.precision.unscale_(self.optimizer)
        clip = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        bad_loss = ~torch.isfinite(loss)
        bad_grad = ~torch.isfinite(norm) & ~bad_loss
        self.precision.step(self.optimizer, bad_loss | bad_grad)
        ok = ~(bad_loss | bad_grad)
        self._pending += torch.stack([bad_loss.float(), bad_grad.float(),  # (4,)
                                      torch.where(ok, loss.detach().float(), 0.0), ok.float()])
        self.step += 1
        return loss.detach()

    def sync(self) -> float | None:
        """Fold the device-side counters into `counters` (one host sync); returns the mean loss of the
        finite steps since the last sync, or None when there were none."""
        nl, ng, loss_sum, n = self._pending.tolist()
        self._pending.zero_()
        self.counters["nonfinite_loss"] += int(nl)
        self.counters["nonfinite_grad"] += int(ng)
        self._epoch_loss[0] += loss_sum
        self._epoch_loss[1] += int(n)
        return loss_sum / n if n else None

    def validate(self) -> dict[str, float]:
        res = evaluate(self.model, self.val_loader, self.comps.tokenizer, self.device, self.precision.autocast)
        return {"wer": res.wer, "cer": res.cer, "utterances": res.utterances, "skipped": res.skipped}

    # ---- the loop ----------------------------------------------------------------------------------
    def _out_of_budget(self, started: float) -> bool:
        t = self.cfg.trainer
        if t.max_steps and self.step >= t.max_steps:
            return True
        return bool(t.max_minutes) and (time.time() - started) / 60 >= t.max_minutes

    def _validate_and_save(self, metrics: MetricsLog) -> dict[str, float]:
        self.sync()
        val = self.validate()
        total, n = self._epoch_loss
        self._epoch_loss = [0.0, 0]
        train_loss = total / n if n else math.nan
        row = {"epoch": self.epoch, "step": self.step, "train_loss": train_loss, **val}
        self.history.append(row)
        metrics.write("val", self.step, {**row, **self.counters})
        log.info("epoch %d step %d: train loss %.3f, val WER %.2f%% CER %.2f%% (%d utts)", self.epoch, self.step,
                 train_loss, 100 * val["wer"], 100 * val["cer"], val["utterances"])
        if val["wer"] < self.best_wer or (val["wer"] == self.best_wer and not (self.ckpt_dir / "best.pt").exists()):
            self.best_wer = val["wer"]
            self.save("best.pt")
        self.save("last.pt")
        return row

    def _log_train(self, metrics: MetricsLog, bar: tqdm) -> None:
        """Logging interval: the one host sync of the hot loop, the fp16 watchdog, GPU peak memory."""
        loss = self.sync()
        self.precision.check()
        row: dict[str, Any] = {"epoch": self.epoch, "lr": self.optimizer.param_groups[0]["lr"]}
        if loss is not None:
            row["loss"] = loss
            bar.set_postfix(loss=f"{loss:.3f}", step=self.step)
        if self.precision.scaling:
            row["loss_scale"] = self.precision.loss_scale()
        if self.device.type == "cuda":
            row["peak_mem_mb"] = torch.cuda.max_memory_allocated(self.device) / 2 ** 20
            torch.cuda.reset_peak_memory_stats(self.device)
        metrics.write("train", self.step, row)

    def fit(self) -> dict[str, Any]:
        """Train until max_epochs, max_steps or max_minutes; returns the last validation row and counters."""
        t = self.cfg.trainer
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "config.json").write_text(json.dumps(to_dict(self.cfg), indent=2))
        if t.prescan:
            prescan(self)
        metrics = MetricsLog(self.out_dir)
        started = time.time()
        self.model.train()
        last: dict[str, Any] = {}
        try:
            while t.max_epochs <= 0 or self.epoch < t.max_epochs:
                if self.sampler.epoch != self.epoch:
                    self.sampler.set_epoch(self.epoch)
                    self.consumed = 0
                self.sampler.position = self.consumed
                self.dataset.set_epoch(self.epoch)
                bar = tqdm(self.loader, desc=f"epoch {self.epoch}", disable=not t.progress, leave=False,
                           total=len(self.sampler) - self.consumed, dynamic_ncols=True)
                for batch in bar:
                    self.consumed += 1
                    self.counters["bad_audio"] += batch.bad
                    if len(batch) == 0:
                        continue
                    self.train_step(batch)
                    if self.step % t.log_every == 0:
                        self._log_train(metrics, bar)
                    if t.val_every_steps and self.step % t.val_every_steps == 0:
                        last = self._validate_and_save(metrics)
                    if self._out_of_budget(started):
                        break
                bar.close()
                if self.consumed >= len(self.sampler):  # the epoch is complete
                    self.epoch += 1
                    self.sampler.set_epoch(self.epoch)
                    self.consumed = 0
                self.precision.check()
                last = self._validate_and_save(metrics)
                if self._out_of_budget(started) or last["wer"] <= t.target_wer:
                    break
        finally:
            metrics.close()
        skipped = self.train_report.skipped + self.counters["bad_audio"]
        summary = {**last, "best_wer": self.best_wer, "train_utterances": len(self.train_utts),
                   "train_skipped": skipped, "minutes": (time.time() - started) / 60,
                   "precision": self.precision.mode, "device": str(self.device), **self.counters}
        log.info("done: %s", json.dumps(summary))
        return summary


def train(cfg: Config) -> dict[str, Any]:
    """Build a Trainer from `cfg` and run it."""
    return Trainer(cfg).fit()
