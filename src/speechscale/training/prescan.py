"""Memory pre-scan: forward+backward on the worst-case batch before training, with its peak memory.

The worst case is the longest training utterances, as many as the batch limits allow, padded to the
longest duration speed perturbation can produce. On out-of-memory (or above `trainer.memory_budget_mb`)
the run stops before any work with one line naming the limit to lower. Weights, BN statistics, gradients
and RNG streams are restored afterwards, so a pre-scanned run trains exactly like one without.
"""
from __future__ import annotations

import copy
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..data.augment import longest_seconds
from ..data.dataset import collate

if TYPE_CHECKING:
    from .trainer import Trainer

log = logging.getLogger(__name__)


class PrescanError(RuntimeError):
    """The worst-case batch does not fit; the message says which limit to lower."""


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:  # Linux: writing 5 to clear_refs resets the process's peak resident set (VmHWM)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_mb(device: torch.device) -> float:
    """Peak memory since `_reset_peak`: allocated GPU memory, or the process's peak resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def worst_case_batch(trainer: "Trainer") -> tuple[Any, float]:
    """The longest utterances, as many as a batch can hold, padded to the longest augmentation makes them (added
    silence, the slowest speed and tempo). Returns (batch, padded seconds per utterance)."""
    d = trainer.cfg.data
    longest = [i for _, i in trainer.data.longest]
    nominal = trainer.data.longest[0][0]
    seconds = longest_seconds(trainer.cfg.augment, nominal)
    # as many as the sampler packs (it bounds nominal padded seconds), then slowed down by augmentation
    n = max(1, min(d.max_batch_size, int(d.batch_seconds // nominal), len(longest)))
    plain = trainer.data.plain  # no augmentation
    items = []
    for i in longest[: n * 2]:  # a few spares for unreadable files
        item = plain[i]
        if "skip" not in item:
            items.append(item)
        if len(items) == n:
            break
    batch = collate(items)
    frames = math.ceil(trainer.comps.features.frames_for_seconds(seconds))
    pad = frames - batch.feats.shape[-1]
    if pad > 0:
        batch.feats = torch.nn.functional.pad(batch.feats, (0, pad))  # (B, F, T_worst)
    batch.feat_lens = torch.full_like(batch.feat_lens, batch.feats.shape[-1])
    return batch, seconds


def prescan(trainer: "Trainer") -> dict[str, Any]:
    """Run one forward+backward of the worst-case batch in the run's precision; log and return
    {utterances, seconds, peak_mb}; raise PrescanError when it does not fit."""
    d, t = trainer.cfg.data, trainer.cfg.trainer
    batch, seconds = worst_case_batch(trainer)
    model, device = trainer.model, trainer.device
    saved = copy.deepcopy(model.state_dict())
    advice = (f"lower data.batch_seconds (now {d.batch_seconds:g}) or data.max_duration (now {d.max_duration:g})"
              f"{'' if trainer.precision.mode != 'fp32' else ', or train in trainer.precision=bf16'}"
              f"{'' if t.activation_checkpointing else ', or set trainer.activation_checkpointing=true'}")
    what = f"pre-scan: a batch of {len(batch)} x {seconds:.1f} s on {device}"
    _reset_peak(device)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            trainer.optimizer_step.forward_backward(batch.to(device))  # as a step
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        peak = _peak_mb(device)
    except Exception as e:
        if _is_oom(e):
            raise PrescanError(f"{what} ran out of memory; {advice}") from e
        raise
    finally:
        model.zero_grad(set_to_none=True)
        model.load_state_dict(saved)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result = {"utterances": len(batch), "seconds": round(seconds, 2), "peak_mb": round(peak, 1)}
    log.info("%s: peak memory %.0f MB", what, peak)
    if t.memory_budget_mb and peak > t.memory_budget_mb:
        raise PrescanError(f"{what} peaks at {peak:.0f} MB, over trainer.memory_budget_mb={t.memory_budget_mb:g}; "
                           f"{advice}")
    return result
