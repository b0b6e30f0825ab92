"""Activation checkpointing (`trainer.activation_checkpointing`): each block of a model's repeated stack keeps only
its inputs in the forward pass and runs again in the backward pass to get what its gradients need.

Memory for the activations of a batch falls from every layer's intermediate tensors to the blocks' inputs, at the
cost of each block's forward run twice. The recomputed forward draws the same dropout masks (the RNG state is kept
with the inputs), so losses and gradients equal those of the plain model: this trades time for memory, nothing
else. The stacks are the conformer's and wav2letter+'s blocks and the recurrent layers of DeepSpeech2 and
LSTM-CTC; parameters and checkpoints are unchanged.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import ConfigError

STACKS = ("blocks", "rnns")  # the ModuleLists whose blocks are recomputed, where a model has them


def recompute_blocks(model: nn.Module) -> int:
    """Make each block of `model`'s repeated stacks recompute its activations in the backward pass (while gradients
    are recorded; evaluation runs as before). Returns how many blocks; ConfigError when the model has none."""
    blocks = [b for name in STACKS if isinstance(stack := getattr(model, name, None), nn.ModuleList) for b in stack]
    if not blocks:
        raise ConfigError(f"trainer.activation_checkpointing: {type(model).__name__} has no stack of blocks "
                          f"({', '.join(STACKS)}) to recompute")
    for block in blocks:
        block.forward = _recomputed(block.forward)  # an instance attribute: the state dict is untouched
    return len(blocks)


def _recomputed(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return run


def saved_bytes(run: Callable[[], Any]) -> int:
    """Bytes of the tensors autograd keeps for the backward pass while `run()` records its graph (their storage
    counted once), the activation memory a training step holds at its peak beside the weights."""
    seen: dict[Any, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())
