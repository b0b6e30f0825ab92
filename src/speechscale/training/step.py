"""The CTC step shared by the trainer, the memory pre-scan and the benchmarks.

The model's forward pass runs in the precision's autocast region; log-softmax and CTC run in fp32 outside
it (CTC in half precision turns NaN); fp16 scales the loss before backward.

    >>> loss = forward_backward(model, batch, Precision("fp32", torch.device("cpu")), ctc_criterion())  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from ..data.dataset import Batch
from ..models.ctc import ctc_criterion  # noqa: F401 (the training step's criterion, re-exported)
from .precision import Precision

if TYPE_CHECKING:
    from ..distributed.strategy import Strategy

Forward = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def ctc_loss(forward: Forward, feats: torch.Tensor, feat_lens: torch.Tensor, targets: torch.Tensor,
             target_lens: torch.Tensor, precision: Precision, ctc: torch.nn.CTCLoss) -> torch.Tensor:
    """Mean CTC loss of a batch: feats (B, F, T) and lengths on the CPU -> scalar fp32 loss."""
    with precision.autocast():
        logits, out_lens = forward(feats, feat_lens)  # (B, T', V)
    log_probs = logits.float().log_softmax(-1).transpose(0, 1)  # (T', B, V), fp32 outside autocast
    return ctc(log_probs, targets, out_lens, target_lens)


def forward_backward(forward: Forward, batch: Batch, precision: Precision, ctc: torch.nn.CTCLoss,
                     parts: int = 1, weight: float = 1.0) -> torch.Tensor:
    """Loss of one (micro-)batch already on the device, divided by `parts` and multiplied by `weight`
    (0 keeps a placeholder batch out of the gradient), back-propagated (scaled in fp16); returns it
    detached."""
    loss = ctc_loss(forward, batch.feats, batch.feat_lens, batch.targets, batch.target_lens, precision, ctc)
    loss = loss / parts * weight
    precision.scale(loss).backward()
    return loss.detach()


def placeholder_batch(num_features: int, frames: int) -> Batch:
    """Silence labelled "a": a real forward/backward whose loss is zeroed (keeps ranks' steps matched)."""
    return Batch(torch.zeros(1, num_features, frames), torch.tensor([frames]), torch.tensor([1]), torch.tensor([1]),
                 [""], [], {})


def optimizer_step(model: nn.Module, forward: Forward, micro: list[Batch], optimizer: torch.optim.Optimizer,
                   precision: Precision, ctc: torch.nn.CTCLoss, strategy: "Strategy", grad_clip: float,
                   placeholder: Batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over micro-batches (gradient accumulation): forward/backward each, strategy
    hooks, unscale, clip, step. Returns the detached loss and (4,) flags on the device: non-finite loss,
    non-finite gradient, loss if the step counted else 0, counted. A non-finite step is skipped without a
    host sync (fused optimizers and the fp16 scaler decide on the device)."""
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for j, b in enumerate(micro):
        weight = 1.0
        if len(b) == 0:  # all of this rank's batch was skipped: a placeholder keeps the ranks matched
            b, weight = placeholder, 0.0
        with strategy.accumulating(forward) if j < len(micro) - 1 else contextlib.nullcontext():
            losses.append(forward_backward(forward, b.to(device), precision, ctc, len(micro), weight))
    loss = torch.stack(losses).sum()  # the mean over micro-batches (each was divided by their count)
    strategy.after_backward(model)
    precision.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf)
    bad_loss = ~torch.isfinite(loss)
    bad_grad = ~torch.isfinite(norm) & ~bad_loss
    strategy.before_step(model, optimizer)
    precision.step(optimizer, bad_loss | bad_grad)
    strategy.after_step(model, optimizer)
    ok = ~(bad_loss | bad_grad) & any(len(b) > 0 for b in micro)
    return loss, torch.stack([bad_loss.float(), bad_grad.float(), torch.where(ok, loss.float(), 0.0), ok.float()])


class StepTally:
    """Per-step flags and losses summed on the device (no host sync in the hot loop); `sync` folds all
    ranks' sums into the run's counters at logging intervals."""

    def __init__(self, device: torch.device) -> None:
        self.pending = torch.zeros(4, device=device)  # non-finite loss, non-finite gradient, loss sum, counted steps
        self.unshared = torch.zeros(4, dtype=torch.float64)  # on the host, not yet summed over ranks
        self.loss_sum, self.steps = 0.0, 0  # synced, since the last `take_mean_loss`

    def add(self, flags: torch.Tensor) -> None:
        self.pending += flags

    def sync(self, strategy: "Strategy", counters: dict[str, int], collective: bool = True) -> float | None:
        """One host sync; returns the mean loss of the counted steps since the last sync. `collective`: of
        all ranks, and the counters take their sums; otherwise (asynchronous learners between sync points)
        of this rank alone, its flags kept for the next collective sync."""
        local = self.pending.double().cpu()
        self.pending.zero_()
        self.unshared += local
        if not collective:
            return float(local[2] / local[3]) if local[3] else None
        nl, ng, loss_sum, n = strategy.all_reduce_sum(self.unshared).tolist()
        self.unshared.zero_()
        counters["nonfinite_loss"] += int(nl)
        counters["nonfinite_grad"] += int(ng)
        self.loss_sum += loss_sum
        self.steps += int(n)
        return loss_sum / n if n else None

    def take_mean_loss(self) -> float:
        """Mean loss of the counted steps since the last call (NaN when none), and start over."""
        mean = self.loss_sum / self.steps if self.steps else math.nan
        self.loss_sum, self.steps = 0.0, 0
        return mean
