"""Conformer-CTC (Gulati et al. 2020; NeMo's Conformer-CTC): a 4x conv subsampling front end, then blocks of
macaron feed-forward halves around relative-position self-attention and a depthwise convolution module.

Every block is padding-invariant: attention never looks at padded keys, the depthwise conv sees zeros
beyond each utterance, and its batch norm keeps padded frames out of its statistics, so an utterance gives the
same output alone as in a padded batch.

    >>> m = Conformer(ConformerConfig(d_model=32, layers=1, heads=2, conv_kernel=5, subsampling_channels=8), 40, 29)
    >>> logits, lens = m(torch.randn(2, 40, 101), torch.tensor([101, 57]))
    >>> logits.shape, lens.tolist()
    (torch.Size([2, 26, 29]), [26, 15])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..config import ConfigError
from . import flops as F
from .layers import MaskedBatchNorm, conv_out_length, length_mask


@dataclass
class ConformerConfig:
    """Architecture of a Conformer-CTC model; the defaults are NeMo's Conformer-CTC-Medium (80 log-mel in)."""

    d_model: int = 256
    layers: int = 18
    heads: int = 4
    ff_expansion: int = 4
    conv_kernel: int = 31
    subsampling_channels: int = 256   # channels of the two stride-2 3x3 convolutions
    dropout: float = 0.1              # after each sub-module, on the embedded input, and on attention weights


class ConvSubsampling(nn.Module):
    """Features (B, F, T) -> (B, T/4, d): two Conv2d 3x3 stride 2 (+ReLU) over (F, T), then a linear map."""

    def __init__(self, num_features: int, channels: int, d_model: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.freq = (((num_features + 1) // 2) + 1) // 2  # (n + 2*1 - 3) // 2 + 1, twice: plain ints (meta-safe)
        self.out = nn.Linear(channels * self.freq, d_model)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return conv_out_length(conv_out_length(lengths, self.conv1), self.conv2)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats.unsqueeze(1)  # (B, 1, F, T)
        for conv in (self.conv1, self.conv2):
            x = torch.relu(conv(x))  # (B, C, F', T')
            lengths = conv_out_length(lengths, conv)
            x = x * length_mask(lengths, x.shape[-1], x.device)[:, None, None, :].to(x.dtype)
        return self.out(x.permute(0, 3, 1, 2).flatten(2)), lengths  # (B, T', C*F') -> (B, T', d)


class FeedForward(nn.Module):
    """LayerNorm -> Linear(d, e*d) -> SiLU -> dropout -> Linear(e*d, d) -> dropout."""

    def __init__(self, d: int, expansion: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, expansion * d), nn.SiLU(), nn.Dropout(dropout),
                                 nn.Linear(expansion * d, d), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def relative_positions(frames: torch.Tensor) -> torch.Tensor:
    """(T,) arange -> (2T-1,) relative positions T-1, ..., 1, 0, -1, ..., -(T-1) (tensor ops only, so a traced
    export keeps the time axis dynamic)."""
    return torch.cat([frames.flip(0)[:-1], -frames])


def sinusoid(positions: torch.Tensor, d: int) -> torch.Tensor:
    """(N,) positions -> (N, d) sinusoidal embeddings (sin on even, cos on odd channels)."""
    inv = torch.exp(torch.arange(0, d, 2, device=positions.device, dtype=torch.float32) * (-math.log(10000.0) / d))
    angle = positions.to(torch.float32)[:, None] * inv[None, :]  # (N, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (N, d)


def rel_shift(scores: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """(B, H, T, 2T-1) scores against relative positions T-1..-(T-1) -> (B, H, T, T) where [i, j] is the score
    of relative position i - j (Transformer-XL's shift, written as a gather)."""
    index = frames[None, :] - frames[:, None] + frames[-1]  # (T, T): (T-1) - i + j
    return scores.gather(-1, index.expand(scores.shape[0], scores.shape[1], -1, -1))


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (content and position biases u, v)."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        if d % heads:
            raise ConfigError(f"model.overrides: d_model {d} is not divisible by heads {heads}")
        self.heads, self.d_k = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.pos = nn.Linear(d, d, bias=False)
        self.bias_u = nn.Parameter(torch.zeros(heads, self.d_k))
        self.bias_v = nn.Parameter(torch.zeros(heads, self.d_k))
        nn.init.xavier_uniform_(self.bias_u)
        nn.init.xavier_uniform_(self.bias_v)
        self.drop = nn.Dropout(dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, H, d_k). A view with explicit sizes: a traced unflatten fixes the batch size
        in an ONNX export."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_k)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """x (B, T, d), mask (B, T) True on valid frames, pos (2T-1, d) embeddings -> (B, T, d)."""
        q = self._heads(self.q(x))  # (B, T, H, d_k)
        k, v = self._heads(self.k(x)).transpose(1, 2), self._heads(self.v(x)).transpose(1, 2)  # (B, H, T, d_k)
        p = self.pos(pos.to(x.dtype)).view(-1, self.heads, self.d_k).permute(1, 2, 0)  # (H, d_k, 2T-1)
        content = (q + self.bias_u.to(q.dtype)).transpose(1, 2) @ k.transpose(-2, -1)  # (B, H, T, T)
        position = rel_shift((q + self.bias_v.to(q.dtype)).transpose(1, 2) @ p, frames)  # (B, H, T, T)
        scores = (content.float() + position.float()) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(torch.float32).min)
        weights = self.drop(scores.softmax(-1)).to(v.dtype)  # (B, H, T, T), softmax in fp32
        return self.o((weights @ v).transpose(1, 2).flatten(2))  # (B, T, d)


class ConvModule(nn.Module):
    """LayerNorm -> pointwise conv (2d) -> GLU -> depthwise conv -> masked BN -> SiLU -> pointwise conv -> dropout."""

    def __init__(self, d: int, kernel: int, dropout: float) -> None:
        super().__init__()
        if kernel % 2 == 0:
            raise ConfigError(f"model.overrides: conv_kernel must be odd (same padding), got {kernel}")
        self.norm = nn.LayerNorm(d)
        self.pointwise1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = MaskedBatchNorm(d)
        self.pointwise2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, d), mask (B, T) -> (B, T, d)."""
        y = nn.functional.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1)  # (B, d, T)
        y = self.depthwise(y * mask[:, None, :].to(y.dtype))  # zeros beyond each utterance
        y = self.pointwise2(nn.functional.silu(self.bn(y, mask)))
        return self.drop(y.transpose(1, 2))


class ConformerBlock(nn.Module):
    """x + FF/2, + attention, + conv, + FF/2, then LayerNorm."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.ff1 = FeedForward(d, cfg.ff_expansion, cfg.dropout)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = RelPositionAttention(d, cfg.heads, cfg.dropout)
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.conv = ConvModule(d, cfg.conv_kernel, cfg.dropout)
        self.ff2 = FeedForward(d, cfg.ff_expansion, cfg.dropout)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn_drop(self.attn(self.attn_norm(x), mask, pos, frames))
        x = x + self.conv(x, mask)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)


class Conformer(nn.Module):
    """Features (B, F, T) and lengths -> logits (B, T', V) and output lengths T' (T' = ceil(ceil(T/2)/2))."""

    def __init__(self, cfg: ConformerConfig, num_features: int, vocab_size: int) -> None:
        super().__init__()
        self.cfg, self.num_features = cfg, num_features
        self.subsampling = ConvSubsampling(num_features, cfg.subsampling_channels, cfg.d_model)
        self.in_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(ConformerBlock(cfg) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.d_model, vocab_size)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames out for frames in, from the subsampling convolutions' own parameters."""
        return self.subsampling.output_lengths(lengths)

    def flops(self, frames: int) -> tuple[int, int]:
        """(forward, backward) FLOPs for one utterance of `frames` feature frames (see models.flops). The
        relative-position projection's input is constant: it gets a weight gradient only."""
        s, d, e = self.subsampling, self.cfg.d_model, self.cfg.ff_expansion
        t1 = (frames + 1) // 2  # each 3x3 stride-2 conv with padding 1 halves, rounding up
        t = int(self.output_lengths(torch.tensor(frames)))
        first = F.conv_flops(1, s.conv1.out_channels, (3, 3), (self.num_features + 1) // 2 * t1)
        rest = F.conv_flops(s.conv2.in_channels, s.conv2.out_channels, (3, 3), s.freq * t)
        rest += F.linear_flops(s.out.in_features, d, t) + F.linear_flops(d, self.out.out_features, t)
        per_block = (2 * (F.linear_flops(d, e * d, t) + F.linear_flops(e * d, d, t))  # two feed-forward halves
                     + 4 * F.linear_flops(d, d, t)                                   # q, k, v, out
                     + 2 * t * t * d + 2 * t * (2 * t - 1) * d + 2 * t * t * d       # content, position, values
                     + F.conv_flops(d, 2 * d, (1,), t) + F.conv_flops(d, d, (1,), t)
                     + F.conv_flops(d, d, (self.cfg.conv_kernel,), t, groups=d))
        pos = F.linear_flops(d, d, 2 * t - 1)
        n = len(self.blocks)
        return F.train_flops(first, rest + n * per_block, (n * pos, n * pos))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats * length_mask(lengths, feats.shape[-1], feats.device)[:, None, :].to(feats.dtype)  # (B, F, T)
        x, lengths = self.subsampling(x, lengths)  # (B, T', d)
        mask = length_mask(lengths, x.shape[1], x.device)  # (B, T')
        frames = torch.arange(x.shape[1], device=x.device)
        pos = sinusoid(relative_positions(frames), self.cfg.d_model)  # (2T'-1, d)
        x = self.in_drop(x)
        for block in self.blocks:
            x = block(x, mask, pos, frames)
        x = x * mask[..., None].to(x.dtype)
        return self.out(x), lengths  # (B, T', V)
