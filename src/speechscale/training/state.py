"""The training state and the checkpoint layout that holds it.

A checkpoint (format 3) is plain data and tensors, loadable with `weights_only=True`:

    format_version  3
    config          the run's config as a dict (the model description: features, text, model, overrides)
    model           the weights used for evaluation and export (the strategy's consensus)
    optimizer       rank 0's optimizer state (shared under allreduce)
    precision       the fp16 loss scaler's state
    training        TrainingState: epoch, step, data position, samples seen, best WER, counters, history
    world_size      ranks that wrote it
    ranks           one dict per rank: its RNG states, its strategy's per-rank state, its data position
                    (asynchronous learners: batches claimed, and its own claimed but untrained ones)
    ema             only with trainer.ema_decay > 0: {decay, weights} of rank 0's moving average (ema.py)

Format 2 (`meta`, `rng_per_rank`, `sampler`) is still read; format 1 only for eval and transcribe.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data.dataset import SKIP_REASONS
from ..storage.checkpoints import CheckpointError, ModelFileError, error_line
from ..storage.seeds import derive_seed, rng_state, seed_everything, set_rng_state

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ..distributed.strategy import Strategy
    from .precision import Precision

FORMAT_VERSION = 3


def _counters() -> dict[str, int]:
    """Every counter a run keeps, at zero: skipped steps, skipped utterances by reason, dropped tails, loader
    restarts after a worker died."""
    return {"nonfinite_loss": 0, "nonfinite_grad": 0, **dict.fromkeys(SKIP_REASONS, 0), "dropped_tail": 0,
            "loader_restarts": 0}


@dataclass
class TrainingState:
    """Where a run is. `consumed` counts samples of the current epoch read by all ranks together (lockstep
    strategies); `samples_seen` counts samples since the start."""

    epoch: int = 0
    step: int = 0
    consumed: int = 0
    samples_seen: int = 0
    best_wer: float = math.inf
    counters: dict[str, int] = field(default_factory=_counters)
    history: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainingState":
        """The state a checkpoint holds, every field typed and in range (ValueError in one line otherwise): the
        positions present and counts from 0, the counters named and counted."""
        from ..config import from_dict

        if not isinstance(d, dict):
            raise ValueError(f"the training state is a {type(d).__name__}, not a mapping")
        missing = [k for k in ("epoch", "step", "consumed", "samples_seen") if k not in d]
        if missing:
            raise ValueError(f"the training state has no {', '.join(missing)}")
        state = from_dict(cls, {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}, where="training")
        if min(state.epoch, state.step, state.consumed, state.samples_seen) < 0 or math.isnan(state.best_wer):
            raise ValueError("the training state's positions must be counts from 0 and its best WER a number")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in state.counters.values()):
            raise ValueError("the training state's counters must be counts")
        state.counters = {**_counters(), **state.counters}  # older checkpoints lack newer counters
        return state


def checkpoint_dict(*, config: dict[str, Any], model: dict[str, Any], optimizer: dict[str, Any],
                    precision: dict[str, Any], training: TrainingState, ranks: list[dict[str, Any]],
                    ema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The format-3 checkpoint of a run (see the module doc)."""
    ckpt = {"format_version": FORMAT_VERSION, "config": config, "model": model, "optimizer": optimizer,
            "precision": precision, "training": training.to_dict(), "world_size": len(ranks), "ranks": ranks}
    if ema is not None:
        ckpt["ema"] = ema
    return ckpt


def read_training(ckpt: dict[str, Any], path: str) -> tuple[TrainingState, list[dict[str, Any]]]:
    """(TrainingState, per-rank parts) of a loaded checkpoint, format 3 or 2; CheckpointError otherwise."""
    version = ckpt.get("format_version", 1)
    if "averaged_from" in ckpt or (version >= 3 and not {"training", "ranks", "optimizer"} <= set(ckpt)):
        raise CheckpointError(f"{path} holds weights only (an averaged or EMA checkpoint), no training state to resume: "
                              f"start a run from its weights with trainer.init_from")
    if version >= 3:
        if not isinstance(ckpt["ranks"], list):
            raise ValueError("its ranks are not the list a run writes")
        return TrainingState.from_dict(ckpt["training"]), list(ckpt["ranks"])
    if version == 2:
        training = TrainingState(epoch=ckpt["epoch"], step=ckpt["step"], consumed=int(ckpt["sampler"]["consumed"]),
                                 samples_seen=int(ckpt["samples_seen"]), best_wer=ckpt["best_wer"],
                                 counters={**_counters(), **ckpt["counters"]}, history=list(ckpt["history"]))
        return training, [{"rng": rng, "strategy": ckpt.get("strategy", {})} for rng in ckpt["rng_per_rank"]]
    raise CheckpointError(f"{path}: checkpoint format {version} predates resumable data positions; it still "
                          f"works for eval and transcribe, not for resume")


def rank_part(strategy: "Strategy", model: "nn.Module", optimizer: "torch.optim.Optimizer",
              data: dict[str, Any]) -> dict[str, Any]:
    """This rank's entry of `ranks`: its RNG states, its strategy's own state and its data position."""
    return {"rng": rng_state(), "strategy": strategy.rank_state(model, optimizer), "data": data}


def data_part(ranks: list[dict[str, Any]], rank: int, world: int) -> dict[str, Any]:
    """Rank `rank`'s data position after asynchronous learners: its own pending batches, or on another
    number of ranks every `world`-th of all learners' pending batches; `all_pending` holds all of them (a
    lockstep strategy resuming such a checkpoint reads them first). Nothing is lost or read twice."""
    parts = [r.get("data") or {} for r in ranks]
    if not parts[0]:
        return {}
    pending = [k for p in parts for k in p.get("pending", [])]
    mine = parts[rank].get("pending", []) if len(parts) == world else pending[rank::world]
    return {**parts[0], "claimed": max(p.get("claimed", 0) for p in parts), "pending": mine, "all_pending": pending}


def restore(ckpt: dict[str, Any], path: str, model: "nn.Module", optimizer: "torch.optim.Optimizer",
            precision: "Precision", strategy: "Strategy", seed: int) -> tuple[TrainingState, int, dict[str, Any]]:
    """Load a checkpoint into this rank's model, optimizer, scaler, strategy and RNG streams; returns the
    training state, the number of ranks that wrote it and this rank's data position. On another number of
    ranks, each rank starts fresh RNG streams derived from the step (the data order does not depend on them)."""
    try:
        training, ranks = read_training(ckpt, path)
        if not ranks or not all(isinstance(r, dict) for r in ranks):
            raise ValueError("its ranks are not the list of mappings a run writes")
        check_optimizer_state(optimizer, ckpt["optimizer"])
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        precision.load_state_dict(ckpt.get("precision") or {})
        same = len(ranks) == strategy.world_size
        mine = ranks[strategy.rank] if same else ranks[0]
        strategy.load_rank_state(mine.get("strategy", {}) if same else {}, model, optimizer)
        if same:
            set_rng_state(mine["rng"])
        else:
            seed_everything(derive_seed(seed, "process", strategy.rank, training.step))
        return training, len(ranks), data_part(ranks, strategy.rank, strategy.world_size)
    except CheckpointError:
        raise
    except Exception as e:  # a field of the wrong kind or shape: a stranger's file, or another run's
        raise ModelFileError(f"{path}: its training state cannot be resumed here ({error_line(e)[:200]})") from None


def check_optimizer_state(optimizer: "torch.optim.Optimizer", state: Any) -> None:
    """ValueError unless `state` is an optimizer state this optimizer can take: the same groups with as many
    parameters, and each parameter's tensors (moments, buffers) of that parameter's shape (torch.optim loads
    mismatched shapes without a word, and the next step fails)."""
    import torch

    if not isinstance(state, dict) or not isinstance(state.get("param_groups"), list) \
            or not isinstance(state.get("state"), dict):
        raise ValueError("its optimizer state is not the mapping of state and param_groups torch writes")
    groups = optimizer.param_groups
    saved = state["param_groups"]
    if len(saved) != len(groups) or any(not isinstance(g, dict) or not isinstance(g.get("params"), list)
                                        or len(g["params"]) != len(own["params"]) for g, own in zip(saved, groups)):
        raise ValueError("its optimizer state is for other parameter groups than this model's")
    shapes = {i: p.shape for g, own in zip(saved, groups) for i, p in zip(g["params"], own["params"])}
    for key, values in state["state"].items():
        if key not in shapes or not isinstance(values, dict):
            raise ValueError(f"its optimizer state names parameter {str(key)[:20]}, which this model does not have")
        for name, value in values.items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != shapes[key]:
                raise ValueError(f"its optimizer's {name} for parameter {key} has shape {list(value.shape)}, the "
                                 f"parameter {list(shapes[key])}")
