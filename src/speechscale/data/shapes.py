"""Fixed batch shapes: every training batch padded to one of a few (batch size, frames) shapes, so that a GPU can
replay one captured graph per shape instead of launching every kernel of every step (`data.fixed_shapes`).

The sampler is untouched: its batches (which utterances, in which order, exactly once, resumable, any world size)
are the same; only their padding changes. Frame bounds are quantiles of the training durations (in frames for
the longest augmentation makes them), and a shape's batch size is the most utterances a batch of that bound can
hold under `data.batch_seconds` and `data.max_batch_size`. The rows added to fill a batch are zero-weight
fillers of length 0: masked batch norm leaves them out of its statistics, the models zero their outputs, and
the loss weights them 0, so the real rows' outputs and gradients are those of the unpadded batch.

    >>> shapes = BatchShapes.from_durations([1.0, 2.0, 3.0, 4.0], count=2, batch_seconds=8.0, max_batch_size=8,
    ...                                     frames=lambda s: int(100 * s))
    >>> shapes.shapes
    [(8, 200), (4, 400)]
    >>> shapes.shape_for(3, 150), shapes.shape_for(2, 390), shapes.shape_for(9, 150)
    ((8, 200), (4, 400), None)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import torch

from .dataset import Batch


@dataclasses.dataclass
class BatchShapes:
    """The (batch size, frames) shapes batches are padded to, smallest frames first."""

    shapes: list[tuple[int, int]]

    @classmethod
    def from_durations(cls, durations: Sequence[float], count: int, batch_seconds: float, max_batch_size: int,
                       frames: Callable[[float], int]) -> "BatchShapes":
        """`count` frame bounds at equal quantiles of `durations` (seconds; the last bound is the longest), each
        in frames as `frames(seconds)` (which counts what augmentation adds); a bound's
        batch size is min(max_batch_size, batch_seconds // the previous bound), the most a batch whose longest
        utterance lies above the previous bound can hold."""
        ordered = sorted(durations)
        if not ordered or count < 1:
            raise ValueError("fixed shapes need at least one duration and one shape")
        bounds = sorted({ordered[min(len(ordered) - 1, math.ceil(len(ordered) * (k + 1) / count) - 1)]
                         for k in range(count)})
        shapes, below = [], ordered[0]
        for bound in bounds:
            size = max(1, min(max_batch_size, int(batch_seconds // below) if below > 0 else max_batch_size))
            shapes.append((size, frames(bound)))
            below = bound
        return cls(shapes)

    def shape_for(self, size: int, frames: int) -> tuple[int, int] | None:
        """The first shape that holds `size` utterances of at most `frames` frames, or None (the batch then runs
        as it is: eager on a GPU)."""
        return next(((b, t) for b, t in self.shapes if b >= size and t >= frames), None)

    def pad(self, batch: Batch) -> tuple[Batch, bool]:
        """`batch` padded to its shape with zero-weight fillers, and whether it had one."""
        shape = self.shape_for(len(batch), batch.feats.shape[-1]) if len(batch) else None
        if shape is None:
            return batch, False
        return pad_to(batch, *shape), True


def pad_to(batch: Batch, size: int, frames: int) -> Batch:
    """`batch` (B rows, T frames) as `size` rows of `frames` frames: features zero-padded, the added rows of length
    0 with no targets, and `weights` 1 on the real rows, 0 on the fillers. len() still counts the real rows."""
    b, f, t = batch.feats.shape
    # page-locked when the loader's batch was (pin_memory on a GPU): its copy to the device must not block the host
    feats = torch.zeros(size, f, frames, dtype=batch.feats.dtype, device=batch.feats.device,
                        pin_memory=batch.feats.is_pinned())  # (size, F, T), where the features are
    feats[:b, :, :t] = batch.feats
    fill = size - b
    lens = torch.cat([batch.feat_lens, torch.zeros(fill, dtype=batch.feat_lens.dtype)])
    target_lens = torch.cat([batch.target_lens, torch.zeros(fill, dtype=batch.target_lens.dtype)])
    weights = torch.cat([torch.ones(b), torch.zeros(fill)])
    return dataclasses.replace(batch, feats=feats, feat_lens=lens, target_lens=target_lens, weights=weights)
