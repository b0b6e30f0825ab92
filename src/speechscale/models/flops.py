"""Analytic FLOP counts (2 per multiply-add, matmuls and convolutions only: the convention of
torch.utils.flop_counter, against which the tests check them).

Backward: every layer computes its weight gradient (as many FLOPs as its forward) and, unless its input
needs no gradient (the features, an RNN's zero initial state), its input gradient (as many again).
torch's counter over-counts the weight gradient of grouped convolutions as if ungrouped (seen with the
depthwise lookahead conv); the analytic count does not copy that.
"""
from __future__ import annotations

import math


def conv_flops(c_in: int, c_out: int, kernel: tuple[int, ...] | list[int], out_positions: int, groups: int = 1) -> int:
    """Forward FLOPs of a convolution producing `out_positions` output positions (product over dims)."""
    return 2 * c_out * (c_in // groups) * math.prod(kernel) * out_positions


def linear_flops(d_in: int, d_out: int, rows: int) -> int:
    """Forward FLOPs of a linear layer applied to `rows` vectors."""
    return 2 * d_in * d_out * rows


def train_flops(first_layer: int, rest: int, extra: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """(forward, backward) FLOPs from the forward FLOPs of the first layer (no input gradient), of all other
    plain layers, and `extra` (forward, backward) pairs counted by their own layers (RNNs)."""
    return first_layer + rest + extra[0], first_layer + 2 * rest + extra[1]


def add(pairs: list[tuple[int, int]]) -> tuple[int, int]:
    """Sum of (forward, backward) pairs."""
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)
