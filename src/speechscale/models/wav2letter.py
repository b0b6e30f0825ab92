"""Wav2Letter+ (OpenSeq2Seq): a fully convolutional CTC model of 1-D conv blocks over log-mel features.

Each block is Conv1d (same padding, no bias) -> masked BN -> ReLU -> dropout, repeated; kernels and widths
grow with depth, stride 2 at the front, dilation near the end, a 1x1 conv to the characters.

    >>> m = Wav2LetterPlus(W2LConfig(blocks=[W2LBlock(8, 11, stride=2), W2LBlock(8, 5, dilation=2)]), 64, 29)
    >>> logits, lens = m(torch.randn(2, 64, 101), torch.tensor([101, 77]))
    >>> logits.shape, lens.tolist()
    (torch.Size([2, 51, 29]), [51, 39])
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from . import flops as F
from .layers import MaskedBatchNorm, conv_out_length, length_mask


@dataclass
class W2LBlock:
    channels: int
    kernel: int
    stride: int = 1
    dilation: int = 1
    dropout: float = 0.0
    repeat: int = 1


def _w2lplus_large() -> list[W2LBlock]:
    """OpenSeq2Seq's w2lplus_large: 1 + 5x3 + 2 conv layers, 64 log-mel features in."""
    return [W2LBlock(256, 11, stride=2, dropout=0.2),
            W2LBlock(256, 11, dropout=0.2, repeat=3), W2LBlock(384, 13, dropout=0.2, repeat=3),
            W2LBlock(512, 17, dropout=0.2, repeat=3), W2LBlock(640, 21, dropout=0.3, repeat=3),
            W2LBlock(768, 25, dropout=0.3, repeat=3),
            W2LBlock(896, 29, dilation=2, dropout=0.4), W2LBlock(1024, 1, dropout=0.4)]


@dataclass
class W2LConfig:
    """Architecture of a Wav2Letter+ model; the presets in the registry fill it."""

    blocks: list[W2LBlock] = field(default_factory=_w2lplus_large)
    activation: str = "relu"           # relu | hardtanh (clipped at 20)


class ConvBlock(nn.Module):
    """Conv1d -> masked BN -> activation -> dropout, with output lengths from the conv's own parameters."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, dilation: int, dropout: float,
                 act: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride, padding=dilation * (kernel - 1) // 2,
                              dilation=dilation, bias=False)
        self.norm = MaskedBatchNorm(c_out)
        self.act = act
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, C_in, T) -> (B, C_out, T'), padded frames zero."""
        x = self.conv(x)
        lengths = conv_out_length(lengths, self.conv)
        x = self.drop(self.act(self.norm(x, length_mask(lengths, x.shape[-1], x.device))))
        return x, lengths


class Wav2LetterPlus(nn.Module):
    """Features (B, F, T) and lengths -> logits (B, T', V) and output lengths T'."""

    def __init__(self, cfg: W2LConfig, num_features: int, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        act = nn.ReLU() if cfg.activation == "relu" else nn.Hardtanh(0.0, 20.0)
        self.blocks = nn.ModuleList()
        c_in = num_features
        for spec in cfg.blocks:
            for r in range(spec.repeat):
                stride = spec.stride if r == 0 else 1
                self.blocks.append(ConvBlock(c_in, spec.channels, spec.kernel, stride, spec.dilation,
                                             spec.dropout, act))
                c_in = spec.channels
        self.out = nn.Conv1d(c_in, vocab_size, 1)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames out for frames in, derived from the conv layers' own parameters."""
        for block in self.blocks:
            lengths = conv_out_length(lengths, block.conv)
        return lengths

    def flops(self, frames: int) -> tuple[int, int]:
        """(forward, backward) FLOPs for one utterance of `frames` feature frames (see models.flops)."""
        t = torch.tensor([frames])
        per_layer = []
        for block in self.blocks:
            c = block.conv
            t = conv_out_length(t, c)
            per_layer.append(F.conv_flops(c.in_channels, c.out_channels, c.kernel_size, int(t)))
        rest = sum(per_layer[1:]) + F.conv_flops(self.out.in_channels, self.out.out_channels, (1,), int(t))
        return F.train_flops(per_layer[0], rest)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats * length_mask(lengths, feats.shape[-1], feats.device)[:, None, :].to(feats.dtype)  # (B, F, T)
        for block in self.blocks:
            x, lengths = block(x, lengths)  # (B, C, T')
        return self.out(x).transpose(1, 2), lengths  # (B, T', V)
