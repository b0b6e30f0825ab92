"""The model's forward and backward replayed as CUDA graphs, one per fixed batch shape (`trainer.cuda_graphs`).

On a GPU the eager training step is launch-bound: cuDNN runs every recurrent time step as its own kernels, tens
of thousands a step, and the host cannot issue them as fast as the GPU runs them. A captured graph replays the
whole launch sequence at once. Only the model is captured (its forward and backward, through
`torch.cuda.make_graphed_callables`). After backward, `GraphedUpdate` replays the update as a second graph:
gradient clipping, the non-finite checks and the fused optimizer step, whose hundreds of small per-tensor launches
are otherwise host time (fp16's loss scaling keeps it eager). Log-softmax and CTC stay eager: the native CTC
kernels read the target lengths on the host, which vary from batch to batch.

A graph needs fixed shapes and no host synchronisation: the trainer pads batches to `data.fixed_shapes` shapes
and moves their lengths to the device, where the models take their padded, read-back-free paths. Each shape is
captured the first time it is met (after warm-up on a side stream, which runs the real batch three times);
the warm-up's effect on batch-norm statistics and the random generators is undone, so a graphed run takes the
same steps as an eager one. All shapes share one memory pool. The logits come back (B, T', V), autograd-aware.

    >>> graphs = GraphedModel(model, precision)  # doctest: +SKIP
    >>> logits = graphs(feats_on_gpu, lengths_on_gpu)  # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator

import torch
from torch import nn

from ..config import Config, ConfigError
from ..data.augment import longest_seconds
from ..data.shapes import BatchShapes
from .precision import Precision, clip_and_step, step_if

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
DEFAULT_SHAPES = 8  # data.fixed_shapes when graphs or torch.compile are on and it is 0


def step_shapes(cfg: Config, comps: Any, utts: list[Any], device: torch.device) -> tuple[BatchShapes | None, bool]:
    """The batch shapes training pads to and whether CUDA graphs replay the model (`trainer.cuda_graphs`): auto
    captures on a CUDA device when the training durations are known up front (a manifest) and torch.compile and
    activation checkpointing are off; on insists (a clear error where it cannot); off never. Graphs need fixed
    shapes: data.fixed_shapes=0 then means 8. So does trainer.compile from a manifest, on any device:
    torch.compile specializes its kernels on the frames, and a batch of each new length would compile again."""
    mode, count = cfg.trainer.cuda_graphs, cfg.data.fixed_shapes
    if isinstance(mode, bool):  # YAML reads on/off as booleans
        mode = "on" if mode else "off"
    if mode not in MODES:
        raise ConfigError(f"trainer.cuda_graphs: {mode!r} is unknown; use auto, on or off")
    fixed = getattr(comps.model, "graph_safe", True)  # a model that decides something per batch on the host is not
    recompute = cfg.trainer.activation_checkpointing
    graphs = (mode != "off" and device.type == "cuda" and bool(utts) and not cfg.trainer.compile and fixed
              and not recompute)
    if mode == "on" and not graphs:
        why = ("a CUDA device" if device.type != "cuda" else "trainer.compile=false" if cfg.trainer.compile
               else "trainer.activation_checkpointing=false" if recompute
               else f"a model whose forward is the same every batch ({cfg.model.name} draws one per batch)"
               if not fixed else "the training durations up front (a manifest, not a shard index)")
        raise ConfigError(f"trainer.cuda_graphs=on needs {why}; use trainer.cuda_graphs=auto or off")
    if (graphs or (cfg.trainer.compile and utts)) and not count:
        count = DEFAULT_SHAPES
    return (fixed_shapes(cfg, comps, utts, count) if count else None), graphs


def fixed_shapes(cfg: Config, comps: Any, utts: list[Any], count: int) -> BatchShapes:
    """`count` batch shapes from the training utterances' durations, frames for the longest augmentation makes
    of them (added silence, the slowest speed and tempo) and 2 frames of margin for a manifest's rounded durations."""
    if not utts:
        raise ConfigError("data.fixed_shapes needs the training durations up front: a manifest, not a shard index")
    a, d = cfg.augment, cfg.data
    return BatchShapes.from_durations([u.duration for u in utts], count, d.batch_seconds, d.max_batch_size,
                                      lambda s: comps.features.frames_for_seconds(longest_seconds(a, s)) + 2)


class _Forward(nn.Module):
    """The model's forward as a module of its own, one per shape: make_graphed_callables replaces a module's
    forward with the graphed one, which must not happen to the model itself (it serves every shape, eagerly too)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.model(feats, lengths)[0]  # (B, T', V)


class GraphedModel:
    """`model`'s training forward+backward captured per input shape, replayed on later batches of that shape.

    Call it with features (B, F, T) and lengths (B,) on the CUDA device, inside the step's autocast region; it
    returns the logits (B, T', V) as an autograd tensor whose backward replays the captured backward. Output
    lengths are the caller's to compute on the host (`model.output_lengths`), so CTC never reads the device."""

    def __init__(self, model: nn.Module, precision: Precision, warmup: int = 3) -> None:
        self.model, self.precision, self.warmup = model, precision, warmup
        self.graphed: dict[tuple[Any, ...], Callable[..., torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.captures = 0

    def key(self, feats: torch.Tensor) -> tuple[Any, ...]:
        return (tuple(feats.shape), feats.dtype, self.precision.mode, torch.backends.cudnn.allow_tf32,
                torch.backends.cuda.matmul.allow_tf32)

    def __call__(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        fn = self.graphed.get(self.key(feats))
        if fn is None:
            fn = self._capture(feats, lengths)
        materialize_grads(self.model)  # every call: anything may have set gradients to None since (zero_grad)
        return fn(feats, lengths)

    def _capture(self, feats: torch.Tensor, lengths: torch.Tensor) -> Callable[..., torch.Tensor]:
        """Capture the forward and backward for this batch's shape, warming up on a copy of the batch itself (real
        lengths and values: no NaN from random inputs), then restore what warm-up changed."""
        sample = (feats.detach().clone(), lengths.detach().clone())  # the graph's static inputs (outside the pool)
        with preserved(self.model, feats.device):
            with self.precision.autocast(cache_enabled=False):
                fn = torch.cuda.make_graphed_callables(_Forward(self.model), sample, num_warmup_iters=self.warmup,
                                                       allow_unused_input=True, pool=self.pool)
        self.graphed[self.key(feats)] = fn
        self.captures += 1
        log.info("captured a CUDA graph for batches of shape %s (%d shape(s) so far)", tuple(feats.shape),
                 self.captures)
        return fn


def materialize_grads(model: nn.Module) -> None:
    """Give every parameter a gradient tensor of its own. A graphed backward returns views of the graph's static
    gradient buffers; autograd would adopt such a view as `.grad` when none exists, and the next replay (a second
    micro-batch) would then overwrite the gradient it accumulates into. The step zeroes gradients in place."""
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


@contextlib.contextmanager
def preserved(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Undo what capture's warm-up runs change: batch-norm statistics (and any other buffer) and the CPU and
    CUDA random generators (dropout masks)."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    cpu_rng, cuda_rng = torch.get_rng_state(), torch.cuda.get_rng_state(device)
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
        torch.set_rng_state(cpu_rng)
        torch.cuda.set_rng_state(cuda_rng, device)


class GraphedUpdate:
    """The update after backward — clip the gradients to `grad_clip`, flag a non-finite loss or gradient, and the
    fused optimizer's step skipped on the device when flagged — captured as one CUDA graph and replayed.

    The first call runs eagerly (it creates the optimizer's state); the next captures and replays. The graph reads
    the parameters, gradients and optimizer state at their addresses, and the learning rates from device scalars
    filled from `param_groups` before each call; the eager calls read the same scalars, so every step takes the
    same kernels (a resumed run stays bit-exact), and the groups keep plain floats, as checkpoints store them.
    Should any of those tensors be replaced (a loaded state, gradients set to None), the call runs eagerly and
    captures again. `supports` says which setups it serves: a fused optimizer on CUDA without fp16's loss scaler,
    whose bookkeeping lives on the host."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float,
                 capture: bool = True) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer, self.grad_clip, self.capture = optimizer, grad_clip, capture  # capture=False: always eager
        self.graph: torch.cuda.CUDAGraph | None = None
        self.captured: list[torch.Tensor] = []  # every tensor the graph reads or writes, in a fixed order
        self.lrs: list[torch.Tensor] = []  # one device scalar per parameter group
        self.calls, self.captures, self.failed = 0, 0, False

    @staticmethod
    def supports(optimizer: torch.optim.Optimizer, precision: Precision, device: torch.device) -> bool:
        return device.type == "cuda" and bool(optimizer.defaults.get("fused")) and not precision.scaling

    def __call__(self, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The update for this step's loss (a device scalar) and gradients; returns (norm, bad loss, bad grad)."""
        if self.failed:
            return self._update(loss)
        groups = self.optimizer.param_groups
        if not self.lrs:
            self.lrs = [torch.zeros((), dtype=torch.float32, device=loss.device) for _ in groups]
        for g, lr in zip(groups, self.lrs):
            lr.fill_(g["lr"])  # a launch, no sync
        self.calls += 1
        if self.graph is not None and not all(a is b for a, b in zip(self._tensors(), self.captured)):
            log.info("the optimizer's tensors changed since the update was captured: capturing it again")
            self.graph, self.calls = None, 1
        if self.calls == 1 or not self.capture:  # eager once, so that the state it creates exists before the capture
            with self._device_lrs(capturing=False):
                return self._update(loss)
        if self.graph is None:
            try:
                self._capture(loss)
            except Exception as e:  # capture is an optimization: a torch that refuses it keeps the eager update
                log.warning("the optimizer step could not be captured as a CUDA graph (%s); it stays eager", e)
                self.graph, self.failed = None, True
                return self._update(loss)
        self.loss.copy_(loss)
        self.graph.replay()  # type: ignore[union-attr]
        return self.outputs

    def _tensors(self) -> list[torch.Tensor]:
        state = self.optimizer.state
        return [t for p in self.params for t in (p, p.grad, *(v for v in state.get(p, {}).values()
                                                              if isinstance(v, torch.Tensor)))]

    def _update(self, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return clip_and_step(self.params, loss, self.grad_clip, lambda skip: step_if(self.optimizer, skip))

    @contextlib.contextmanager
    def _device_lrs(self, capturing: bool) -> Iterator[None]:
        """Inside, the groups' learning rates are the device scalars (and, `capturing`, the groups capturable)."""
        groups = self.optimizer.param_groups
        before = [{k: g[k] for k in ("lr", "capturable") if k in g} for g in groups]
        try:
            for g, lr in zip(groups, self.lrs):
                g["lr"] = lr
                if capturing and "capturable" in g:
                    g["capturable"] = True
            yield
        finally:
            for g, old in zip(groups, before):
                g.update(old)

    def _capture(self, loss: torch.Tensor) -> None:
        """Record the update (not run: the caller replays it) on a copy of the loss as the graph's input."""
        self.loss = loss.detach().clone()
        torch.cuda.synchronize(loss.device)
        graph = torch.cuda.CUDAGraph()
        with self._device_lrs(capturing=True):
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # loader threads may call CUDA meanwhile
                self.outputs = self._update(self.loss)
        self.graph, self.captured = graph, self._tensors()
        self.captures += 1
        log.info("captured the optimizer update as a CUDA graph")
