"""Building blocks shared by the models: masked batch norm, masks, conv length arithmetic."""
from __future__ import annotations

import torch
from torch import nn


def length_mask(lengths: torch.Tensor, max_len: int, device: torch.device | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool on `device` (default: the lengths' own), True on valid frames.

    Models keep lengths on the CPU (cuDNN's packed RNNs and CTC want them there) and build masks on the
    GPU from a non-blocking copy: no host sync per layer."""
    device = device or lengths.device
    return torch.arange(max_len, device=device)[None, :] < lengths.to(device, non_blocking=True)[:, None]


def conv_out_length(lengths: torch.Tensor, conv: nn.Module, dim: int = -1) -> torch.Tensor:
    """Output lengths along `dim` of a Conv1d/Conv2d, read from the layer's own kernel/stride/padding/dilation."""
    k = conv.kernel_size[dim]
    s = conv.stride[dim]
    p = conv.padding[dim]
    d = conv.dilation[dim]
    return torch.div(lengths + 2 * p - d * (k - 1) - 1, s, rounding_mode="floor") + 1


def conv_time_step(conv: nn.Conv1d | nn.Conv2d, x: torch.Tensor, carried: torch.Tensor,
                   consumed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A time convolution (last axis) on new frames as its `forward` computes it, its time padding replaced by the
    carried input frames: x (B, C, [F,] n), carried (B, C, [F,] k - s) -> outputs (B, C', [F',] n / s) and the
    frames to carry next: those before frame `consumed` of x (default n; frames after it are read ahead, and the
    next step starts at it). Other axes are padded as the layer pads them."""
    k, s = conv.kernel_size[-1], conv.stride[-1]
    x = torch.cat([carried, x], dim=-1)  # (..., k - s + n)
    consumed = x.shape[-1] - (k - s) if consumed is None else consumed
    keep = x[..., consumed:consumed + k - s]
    if isinstance(conv, nn.Conv2d):
        y = nn.functional.conv2d(x, conv.weight, conv.bias, conv.stride, (conv.padding[0], 0), conv.dilation,
                                 conv.groups)
    else:
        y = nn.functional.conv1d(x, conv.weight, conv.bias, conv.stride, 0, conv.dilation, conv.groups)
    return y, keep


def conv_time_carry(conv: nn.Conv1d | nn.Conv2d, shape: tuple[int, ...]) -> torch.Tensor:
    """The zero frames conv_time_step carries at a stream's start, for inputs of `shape` (B, C, [F,] any)."""
    k, s = conv.kernel_size[-1], conv.stride[-1]
    return torch.zeros(*shape[:-1], k - s, device=conv.weight.device, dtype=conv.weight.dtype)


def conv_time_delay(conv: nn.Conv1d | nn.Conv2d, delay: int) -> int:
    """The delay (in output frames) of conv_time_step's outputs against `forward`'s, its input delayed by `delay`
    frames: output j is offline output j - D. ValueError when it is not a whole number of outputs."""
    k, s, p = conv.kernel_size[-1], conv.stride[-1], conv.padding[-1]
    if (k - s - p + delay) % s:
        raise ValueError(f"a time convolution (kernel {k}, stride {s}, padding {p}) does not align in steps")
    return (k - s - p + delay) // s


class MaskedBatchNorm(nn.Module):
    """Batch norm over channels (dim 1) whose statistics exclude padded time steps (last dim).

    Works for (B, C, T) and (B, C, F, T). Statistics are computed in fp32. Padded positions come out as 0.
    Padding in the statistics is what made deepspeech.pytorch's eval-mode output disagree with training.
    """

    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_features = num_features
        self.momentum = momentum
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, C, ..., T), mask (B, T) -> same shape as x."""
        shape = [1] * x.dim()
        shape[0], shape[-1] = x.shape[0], x.shape[-1]
        stats = torch.promote_types(x.dtype, torch.float32)  # at least fp32 (float64 stays float64)
        m = mask.view(shape).to(stats)  # (B, 1, [1,] T)
        cshape = [1] * x.dim()
        cshape[1] = self.num_features
        xf = x.to(stats)
        if self.training:
            dims = [d for d in range(x.dim()) if d != 1]
            count = (m.sum() * (xf.numel() // (x.shape[0] * x.shape[1] * x.shape[-1]))).clamp(min=1.0)
            mean = (xf * m).sum(dims) / count  # (C,)
            var = (((xf - mean.view(cshape)) ** 2) * m).sum(dims) / count  # (C,) biased
            with torch.no_grad():
                unbiased = var * count / (count - 1).clamp(min=1.0)
                self.running_mean.lerp_(mean.detach(), self.momentum)
                self.running_var.lerp_(unbiased.detach(), self.momentum)
                self.num_batches_tracked += 1
        else:
            mean, var = self.running_mean, self.running_var
        y = (xf - mean.view(cshape)) * torch.rsqrt(var.view(cshape) + self.eps)
        y = y * self.weight.view(cshape) + self.bias.view(cshape)
        return (y * m).to(x.dtype)


class _Regather(torch.autograd.Function):
    """y[b, t] = x[b, idx[b, t]] where idx maps a row's valid frames one to one onto valid frames (a reversal or a
    shift within each row's length); its gradient is the output gradient gathered back through the inverse map
    `back`, masked by `valid` to the frames that map. Autograd's gather backward would scatter-add instead:
    atomics in bf16, and a sort under deterministic algorithms. Frames outside the map get no gradient."""

    @staticmethod
    def forward(ctx, x, idx, back, valid):  # type: ignore[override]
        ctx.save_for_backward(back, valid)
        return x.gather(1, idx)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        back, valid = ctx.saved_tensors
        return grad.gather(1, back) * valid, None, None, None


def _regather(x: torch.Tensor, idx: torch.Tensor, back: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """x (B, T, H) gathered along time by idx (B, T); see _Regather (plain ops under export's tracing)."""
    idx = idx[..., None].expand(-1, -1, x.shape[2])  # (B, T, H)
    if torch.jit.is_tracing():
        return x.gather(1, idx)
    return _Regather.apply(x, idx, back[..., None].expand_as(idx), valid[..., None].to(x.dtype))


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x (B, T, H), lengths (B,) on x's device -> each row's first `length` frames in reverse order, then frame 0
    repeated over the padding (which callers mask). Applied twice it gives back the valid frames. Frames past
    a row's length get no gradient: whatever reads them must not reach the loss unmasked."""
    steps = torch.arange(x.shape[1], device=x.device)[None]  # (1, T)
    idx = (lengths[:, None] - 1 - steps).clamp(min=0)  # (B, T); the reversal is its own inverse
    return _regather(x, idx, idx, steps < lengths[:, None])


def align_right(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x (B, T, H) with each row's `length` valid frames first -> (B, T, H) with them last (frame t - (T - length)
    at t), frame 0 repeated before them. Frames past a row's length get no gradient, nor do the copies before
    the valid ones: whatever reads those must not reach the loss."""
    t = x.shape[1]
    steps = torch.arange(t, device=x.device)[None]  # (1, T)
    offset = (t - lengths)[:, None]  # (B, 1) padding frames per row
    return _regather(x, (steps - offset).clamp(min=0), (steps + offset).clamp(max=t - 1), steps < lengths[:, None])


def align_left(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The inverse of align_right: x (B, T, H) with each row's `length` valid frames last -> with them first, the
    last frame repeated after them (callers mask it). Frames before a row's valid ones get no gradient."""
    t = x.shape[1]
    steps = torch.arange(t, device=x.device)[None]  # (1, T)
    offset = (t - lengths)[:, None]  # (B, 1)
    return _regather(x, (steps + offset).clamp(max=t - 1), (steps - offset).clamp(min=0), steps >= offset)
