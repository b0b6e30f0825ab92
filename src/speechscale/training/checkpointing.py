"""A run's checkpoints: its folders checked before any work, the checkpoint to resume found and checked against the
run's config, and writing one (collective: every rank gives its part, rank 0 writes; storage/checkpoints.py holds
the files' layout and state.py the training state's)."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .. import storage
from ..components import components_from_description, describe
from ..config import Config, ConfigError, TrainerConfig, to_dict
from ..storage.cards import build_card, write_card
from ..storage.checkpoints import (
    CheckpointWriteError,
    checkpoints_folder,
    error_line,
    load_checkpoint,
    newest_checkpoint,
    save_checkpoint_in,
)
from .init import resume_differences
from .preflight import check_fresh, check_writable
from .state import TrainingState, checkpoint_dict, rank_part

if TYPE_CHECKING:
    from ..data.batch_plan import BatchPlan
    from ..distributed.strategy import Strategy
    from .ema import WeightAverage
    from .precision import Precision

log = logging.getLogger(__name__)


def run_folders(t: TrainerConfig) -> tuple[str, Path]:
    """The checkpoints' folder (in trainer.out_dir, a folder or any fsspec URL such as s3://...) and the logs' local
    folder (metrics.jsonl, TensorBoard, sample traces: out_dir itself, or trainer.log_dir when out_dir is remote).
    The rank that writes checks both before any process group exists, and removes temp files an interrupted write
    left."""
    ckpt_dir = storage.join(t.out_dir, "checkpoints")
    remote = storage.is_remote(t.out_dir)
    out_dir = Path(t.log_dir or (f"runs/{t.out_dir.rstrip('/').rsplit('/', 1)[-1]}" if remote else t.out_dir))
    if int(os.environ.get("RANK", 0)) == 0:
        check_writable(ckpt_dir, "trainer.out_dir")
        check_fresh(ckpt_dir, t.resume, t.out_dir)
        for name in storage.sweep_temp(ckpt_dir):  # left by a write that a crash or a full disk cut short
            log.info("removed %s/%s, a temp file of an interrupted write", ckpt_dir, name)
        check_writable(out_dir, "trainer.log_dir" if remote else "trainer.out_dir")
    return ckpt_dir, out_dir


def find_resume(where: str, ckpt_dir: str) -> tuple[str, dict[str, Any]] | None:
    """trainer.resume's checkpoint, loaded: the newest in the run's folder for `auto` (None when there is none),
    the newest in another run's folder (or its checkpoints folder) for a folder, else the file named."""
    if where == "auto":
        return newest_checkpoint(ckpt_dir)
    if not storage.is_remote(where) and Path(where).is_dir():
        found = newest_checkpoint(checkpoints_folder(where))
        if found is None:
            raise ConfigError(f"trainer.resume={where}: a folder without a checkpoint to resume from")
        return found
    return where, load_checkpoint(where)


def check_resumable(path: str, ckpt: dict[str, Any], cfg: Config) -> None:
    """A checkpoint resumes only under its own settings, alphabet and word pieces: one line naming what differs."""
    components_from_description(describe(ckpt), where=str(path))  # typed and in range before use
    wrong = resume_differences(ckpt.get("config", {}), cfg)
    if wrong:
        raise ConfigError(f"{path} was trained with {'; '.join(wrong)}: resume it with its own settings, or start "
                          f"a new run from its weights with trainer.init_from")
    saved = ckpt.get("config", {}).get("text", {}).get("alphabet", cfg.text.alphabet)
    if saved != cfg.text.alphabet:
        raise ConfigError(f"{path} spells {saved!r}, this run's text.alphabet is {cfg.text.alphabet!r}: "
                          f"resume with the checkpoint's alphabet (text.alphabet=auto reads the training "
                          "transcripts as they are now)")
    pieces = ckpt.get("config", {}).get("text", {}).get("piece_list", [])
    if pieces != cfg.text.piece_list:
        raise ConfigError(f"{path} spells {len(pieces) or 'no'} word pieces, this run "
                          f"{len(cfg.text.piece_list) or 'none'} (others): resume with the checkpoint's "
                          "text.pieces and leave text.piece_list empty, it is read from the checkpoint")


class CheckpointWriter:
    """Writes the run's checkpoints into `ckpt_dir`: the model (the strategy's consensus weights), the optimizer,
    the precision's scaler, the training state, every rank's part (its data position and generators), the weight
    average and a model card (build_card's parameter count, data summary and streaming part)."""

    def __init__(self, cfg: Config, ckpt_dir: str, strategy: "Strategy", model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, precision: "Precision", plan: "BatchPlan", state: TrainingState,
                 ema: "WeightAverage | None", n_params: int, card_data: dict[str, Any],
                 card_streaming: dict[str, Any] | None) -> None:
        self.cfg, self.ckpt_dir, self.strategy, self.model, self.optimizer = cfg, ckpt_dir, strategy, model, optimizer
        self.precision, self.plan, self.state, self.ema = precision, plan, state, ema
        self.n_params, self.card_data, self.card_streaming = n_params, card_data, card_streaming
        self.saved_at = time.monotonic()  # the last checkpoint's time (trainer.checkpoint_every_minutes)

    def due(self, check: bool) -> bool:
        """Whether trainer.checkpoint_every_minutes have passed since the last checkpoint on any rank (collective when
        `check`, which must be the same on every rank: the ranks' clocks are not)."""
        minutes = self.cfg.trainer.checkpoint_every_minutes
        if not minutes or not check:
            return False
        return self.strategy.any_rank(time.monotonic() - self.saved_at >= 60 * minutes)

    def after_validation(self, wer: float | None) -> None:
        """A checkpoint, also written as best.pt when validation `wer` is the best so far (or ties it with no best.pt
        yet)."""
        s = self.state
        best = wer is not None and (wer < s.best_wer or (wer == s.best_wer and not storage.exists(
            storage.join(self.ckpt_dir, "best.pt"))))
        if wer is not None:
            s.best_wer = min(s.best_wer, wer)
        self.save(best=best)

    def save(self, name: str | None = None, best: bool = False) -> str | None:
        """Write a checkpoint (collective: every rank calls it; rank 0 writes). `name` writes that file;
        None writes a rotating `step-N.pt` (keeping trainer.keep_checkpoints), `last.pt` and the pointer;
        `best` also writes the same checkpoint as best.pt."""
        self.saved_at = time.monotonic()
        s, strategy = self.state, self.strategy
        ranks = strategy.gather(rank_part(strategy, self.model, self.optimizer, self.plan.rank_state()))
        path, failure = None, None
        with strategy.consensus(self.model) as model:
            if strategy.rank == 0:
                ckpt = checkpoint_dict(config=to_dict(self.cfg), model=model.state_dict(),
                                       optimizer=self.optimizer.state_dict(), precision=self.precision.state_dict(),
                                       training=s, ranks=ranks,
                                       ema=self.ema.state_dict() if self.ema is not None else None)
                ckpt["card"] = build_card(ckpt["config"], self.n_params, self.card_data, (s.history or [{}])[-1],
                                          s.step, s.epoch, self.card_streaming)
                try:
                    write_card(self.ckpt_dir, {**ckpt["card"], "file": "last.pt (best.pt carries a card of its own)"})
                    if best:
                        save_checkpoint_in(self.ckpt_dir, ckpt, "best.pt", s.step, 1)
                    path = save_checkpoint_in(self.ckpt_dir, ckpt, name, s.step, self.cfg.trainer.keep_checkpoints)
                except Exception as e:  # every rank must learn of it, or the others wait in the next collective
                    failure = error_line(e)
        if strategy.any_rank(failure is not None):  # also the barrier that ends every save
            raise CheckpointWriteError(
                f"writing the checkpoint of step {s.step} to {self.ckpt_dir} failed"
                f"{f' ({failure})' if failure else ' on rank 0'}; the run stopped on every rank. Free space (or fix the "
                f"storage) and continue it with trainer.resume=auto from the last checkpoint that was written")
        return path
