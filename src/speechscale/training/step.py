"""The CTC training step, one object shared by the trainer, the memory pre-scan and the benchmarks.

The model's forward pass runs in the precision's autocast region; log-softmax and CTC run in fp32 outside
it (CTC in half precision turns NaN); fp16 scales the loss before backward.

    >>> step = EagerStep(model, model, optimizer, Precision("fp32", cpu), LocalStrategy(), 5.0, cpu)  # doctest: +SKIP
    >>> loss, flags = step([batch])  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from ..data.dataset import Batch
from ..models.ctc import ctc_criterion
from ..models.rnn import set_capturable
from .graphs import GraphedModel, GraphedUpdate
from .precision import Precision, clip_and_step

if TYPE_CHECKING:
    from ..distributed.strategy import Strategy

Forward = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def placeholder_batch(num_features: int, frames: int) -> Batch:
    """Silence labelled "a": a real forward/backward whose loss is zeroed (keeps ranks' steps matched)."""
    return Batch(torch.zeros(1, num_features, frames), torch.tensor([frames]), torch.tensor([1]), torch.tensor([1]),
                 [""], [], {})


def running_stats(model: nn.Module) -> list[torch.Tensor]:
    """The buffers a forward pass in training mode changes: the running statistics of normalization layers."""
    return [b for m in model.modules() for name, b in m.named_buffers(recurse=False)
            if name in ("running_mean", "running_var", "num_batches_tracked")]


def _no_clock(phase: str) -> None:
    """The trainer's clock: phases are not timed."""


class TrainStep(ABC):
    """One optimizer step: the trainer, the memory pre-scan and the throughput and scaling benches run this.

    `clock(phase)` is called as "forward", "backward" and "optimizer" end (the benches pass one that syncs the
    device and reads the time). A non-finite loss or gradient skips the update without a host sync (fused
    optimizers and the fp16 scaler decide on the device).

    Graphed or eager is decided once, by the class (`build_train_step` picks it for the trainer): `EagerStep` or
    `GraphedStep`. Each says in one place how its forward runs (`logits`), how gradients are zeroed, accumulated
    over micro-batches and reduced over ranks (`_zero_grads`, `_accumulating`, `_reduce`), and how the update
    after backward runs (`_update`); this class holds what they share.
    """

    graphs: GraphedModel | None = None  # the captured shapes (GraphedStep)

    def __init__(self, model: nn.Module, forward: Forward, optimizer: torch.optim.Optimizer, precision: Precision,
                 strategy: "Strategy", grad_clip: float, device: torch.device, placeholder: Batch | None = None,
                 clock: Callable[[str], None] = _no_clock) -> None:
        self.model, self.forward, self.optimizer = model, forward, optimizer
        self.precision, self.strategy, self.device = precision, strategy, device
        self.grad_clip = grad_clip if grad_clip > 0 else math.inf
        self.placeholder, self.clock = placeholder, clock
        self.ctc, self.ctc_rows = ctc_criterion(), ctc_criterion("none")
        self.stats = running_stats(model)

    def logits(self, batch: Batch, host_lens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's output (B, T', V) and output lengths, the forward in the precision's autocast region."""
        with self.precision.autocast():
            return self.forward(batch.feats, batch.feat_lens)

    def loss(self, batch: Batch, host_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Mean CTC loss of a batch on the device: the forward pass autocast, log-softmax and CTC in fp32. In a
        batch of a fixed shape the fillers weigh 0: the mean over the real rows, as of the unpadded batch.
        `host_lens`: the batch's lengths on the CPU, for a graphed forward (its output lengths are computed
        there, so CTC reads nothing back from the device)."""
        logits, out_lens = self.logits(batch, host_lens)  # (B, T', V)
        log_probs = logits.float().log_softmax(-1).transpose(0, 1)  # (T', B, V), fp32 outside autocast
        pairs = bool(getattr(self.model, "trains_pairs", False))  # (T', 2B, V): full context, then a chunk
        targets, target_lens, weights = batch.targets, batch.target_lens, batch.weights
        if pairs:
            targets, target_lens = torch.cat([targets, targets]), torch.cat([target_lens, target_lens])
            weights = None if weights is None else torch.cat([weights, weights])
        if weights is None:
            loss = self.ctc(log_probs, targets, out_lens, target_lens)
        else:  # CTCLoss's "mean": each row's loss over its target length, averaged; here averaged over the real rows
            rows = self.ctc_rows(log_probs, targets, out_lens, target_lens)  # (B,)
            loss = row_mean(rows / target_lens.to(rows.device).clamp(min=1), weights)
        if pairs and self.model.cfg.distill > 0:  # type: ignore[union-attr]
            loss = loss + self.model.cfg.distill * chunk_divergence(log_probs, out_lens, batch.target_lens,
                                                                    batch.weights)  # type: ignore[union-attr]
        return loss

    def forward_backward(self, batch: Batch, parts: int = 1, weight: float = 1.0,
                         host_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Loss of one (micro-)batch on the device, divided by `parts` and multiplied by `weight` (0 keeps a
        placeholder batch out of the gradient), back-propagated (scaled in fp16); returns it detached."""
        loss = self.loss(batch, host_lens) / parts * weight
        self.clock("forward")
        self.precision.scale(loss).backward()
        out = loss.detach()
        del loss  # the autograd graph is torn down here, inside the backward phase
        self.clock("backward")
        return out

    @abstractmethod
    def _zero_grads(self) -> None:
        """Before the step's first micro-batch."""

    @abstractmethod
    def _accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        """Around a micro-batch's forward and backward."""

    @abstractmethod
    def _reduce(self) -> None:
        """After the last micro-batch's backward."""

    def _update(self, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscale, clip, the strategy's hook and the optimizer step unless non-finite; (bad loss, bad gradient)."""
        self.precision.unscale_(self.optimizer)
        _, bad_loss, bad_grad = clip_and_step(list(self.model.parameters()), loss, self.grad_clip, self._step)
        return bad_loss, bad_grad

    def _step(self, skip: torch.Tensor) -> None:
        """The eager optimizer step after clipping: the strategy's hook, then the step unless `skip`."""
        self.strategy.before_step(self.model, self.optimizer)
        self.precision.step(self.optimizer, skip)

    def __call__(self, micro: list[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        """One step over micro-batches (gradient accumulation). Returns the detached mean loss and (4,) flags on
        the device: non-finite loss, non-finite gradient, loss if the step counted else 0, counted."""
        self._zero_grads()
        kept = [b.clone() for b in self.stats]  # a step that is not taken leaves them as they were
        losses = []
        for j, b in enumerate(micro):
            weight = 1.0
            if len(b) == 0:  # all of this rank's batch was skipped: a placeholder keeps the ranks matched
                assert self.placeholder is not None, "an empty batch needs the placeholder"
                b, weight = self.placeholder, 0.0
            with self._accumulating(last=j == len(micro) - 1):
                losses.append(self.forward_backward(b.to(self.device), len(micro), weight, b.feat_lens))
        self._reduce()
        loss = torch.stack(losses).sum()  # the mean over micro-batches (each was divided by their count)
        bad_loss, bad_grad = self._update(loss)
        self.strategy.after_step(self.model, self.optimizer)
        ok = ~(bad_loss | bad_grad) & any(len(b) > 0 for b in micro)
        for b, k in zip(self.stats, kept):  # on the device, no sync: a non-finite forward's inf or NaN, or a
            b.copy_(torch.where(ok, b, k))  # placeholder's silence, would stay in the statistics eval uses
        flags = torch.stack([bad_loss.float(), bad_grad.float(), torch.where(ok, loss.float(), 0.0), ok.float()])
        self.clock("optimizer")
        return loss, flags


class EagerStep(TrainStep):
    """The step run op by op: `forward` is the model or its strategy's wrapper (DDP), compiled or not. Gradients
    are set to None, the wrapper reduces them in the last micro-batch's backward and the others skip it
    (`Strategy.accumulating`, DDP's no_sync)."""

    def _zero_grads(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if last else self.strategy.accumulating(self.forward)

    def _reduce(self) -> None:
        pass


class GraphedStep(TrainStep):
    """The step with the model's forward and backward replayed as CUDA graphs (trainer.cuda_graphs, a CUDA device):
    batches of a fixed shape replay their captured graph, the model's recurrent layers made capturable; the
    placeholder batch, which no shape was captured for, runs the bare model eagerly (never DDP's wrapper). The
    update after it (clipping, checks, a fused optimizer's step) replays as a graph of its own (`GraphedUpdate`)
    except under fp16's loss scaler. Gradients are zeroed in place (a graphed backward returns views of its static
    buffers), no hooks run, and the strategy averages them after the last micro-batch, outside the captured
    region (`Strategy.reduce_gradients`)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, precision: Precision, strategy: "Strategy",
                 grad_clip: float, device: torch.device, placeholder: Batch | None = None,
                 clock: Callable[[str], None] = _no_clock, graphs: GraphedModel | None = None) -> None:
        _check_graphed(device)  # before GraphedModel, which needs CUDA to exist
        super().__init__(model, model, optimizer, precision, strategy, grad_clip, device, placeholder, clock)
        self.graphs: GraphedModel = graphs if graphs is not None else GraphedModel(model, precision)
        set_capturable(model)
        self.update = (GraphedUpdate(model, optimizer, self.grad_clip)
                       if GraphedUpdate.supports(optimizer, precision, device) else None)

    def logits(self, batch: Batch, host_lens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if batch.weights is None or host_lens is None:  # the placeholder: no shape captured for it
            return super().logits(batch, host_lens)
        logits = self.graphs(batch.feats, batch.feat_lens)  # (B, T', V), replayed (captured in autocast)
        return logits, self.model.output_lengths(host_lens)  # type: ignore[operator]

    def _zero_grads(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)

    def _accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def _reduce(self) -> None:
        self.strategy.reduce_gradients(self.model)

    def _update(self, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.update is None:
            return super()._update(loss)
        # clip, checks and step replayed (before_step changes weights, not gradients)
        self.strategy.before_step(self.model, self.optimizer)
        _, bad_loss, bad_grad = self.update(loss)
        return bad_loss, bad_grad


def chunk_divergence(log_probs: torch.Tensor, out_lens: torch.Tensor, target_lens: torch.Tensor,
                     weights: torch.Tensor | None = None) -> torch.Tensor:
    """In-place distillation of a pair of passes: log_probs (T', 2B, V), the full context's B rows first (the
    teacher, detached) and the chunk's after; out_lens (2B,), target_lens (B,). Each row's KL(full || chunk) summed
    over its frames and divided by its target length (CTC's own normalization), averaged over the (real) rows."""
    b = log_probs.shape[1] // 2
    full, chunk = log_probs[:, :b].detach(), log_probs[:, b:]  # (T', B, V) each
    frames = (full.exp() * (full - chunk)).sum(-1)  # (T', B)
    valid = torch.arange(frames.shape[0], device=frames.device)[:, None] < out_lens[:b].to(frames.device)[None, :]
    rows = torch.where(valid, frames, 0.0).sum(0) / target_lens.to(frames.device).clamp(min=1)  # (B,)
    return rows.mean() if weights is None else row_mean(rows, weights)


def row_mean(rows: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The mean of per-row losses (B,) over the real rows of a batch padded to a fixed shape (weights (B,): 1 real,
    0 filler; a filler's loss, even a non-finite one, counts for nothing)."""
    w = weights.to(rows.device)
    return torch.where(w > 0, rows, 0.0).mul(w).sum() / w.sum()


def _check_graphed(device: torch.device) -> None:
    if device.type != "cuda":
        raise ValueError("a graphed step runs the bare model (no wrapper's hooks) on a CUDA device")


def build_train_step(model: nn.Module, optimizer: torch.optim.Optimizer, precision: Precision, strategy: "Strategy",
                     grad_clip: float, device: torch.device, placeholder: Batch, graphed: bool,
                     compile_model: bool = False) -> TrainStep:
    """The trainer's step, graphed or eager as decided once at set-up: `GraphedStep` runs the bare model (gradients
    reduced by the strategy after the step's backward); `EagerStep` runs it (compiled when asked) inside the
    strategy's wrapper (DDP's hooks reduce them)."""
    if graphed:
        return GraphedStep(model, optimizer, precision, strategy, grad_clip, device, placeholder)
    forward = strategy.wrap(torch.compile(model, dynamic=True) if compile_model else model)
    return EagerStep(model, forward, optimizer, precision, strategy, grad_clip, device, placeholder)


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
