"""LSTM-CTC: the acoustic model family of the ADPSGD papers (IBM, Switchboard-2000), with characters.

Log-mel features (+ deltas), frames stacked and subsampled, a stack of bidirectional LSTMs, a linear
bottleneck, and a linear layer to the characters.

    >>> m = LSTMCTC(LSTMConfig(layers=1, hidden=8, projection=4), num_features=40, vocab_size=29)
    >>> logits, lens = m(torch.randn(2, 40, 31), torch.tensor([31, 20]))
    >>> logits.shape, lens.tolist()
    (torch.Size([2, 11, 29]), [11, 7])
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import ConfigError
from . import flops as F
from .layers import length_mask
from .rnn import RecurrentLayer


@dataclass
class LSTMConfig:
    """Architecture of an LSTM-CTC model; the presets in the registry fill it."""

    deltas: bool = True                # append first and second time differences of the features
    stack: int = 3                     # frames concatenated into one input vector
    stride: int = 3                    # keep every stride-th stacked vector (3: 30 ms output frames)
    layers: int = 6
    hidden: int = 512                  # cells per direction (1024 per layer in both directions)
    bias: bool = True                  # the LSTMs' biases; false lets a graphed GPU step run one exact fused call
    projection: int = 256              # linear bottleneck before the output (0 = none)
    dropout: float = 0.1               # between LSTM layers


def deltas(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Regression deltas over +-2 frames, each utterance edge-padded at its own ends (so a padded batch
    gives what each utterance alone gives). (B, F, T) -> (B, F, T)."""
    t = x.shape[-1]
    pos = torch.arange(t, device=x.device)[None, :]  # (1, T)
    last = (lengths[:, None] - 1).clamp(min=0)  # (B, 1)

    def shifted(o: int) -> torch.Tensor:  # x at frame t+o, clamped into [0, length-1]
        idx = torch.minimum((pos + o).clamp(min=0), last).expand(x.shape[0], t)  # (B, T)
        return x.gather(2, idx[:, None, :].expand_as(x))

    return ((shifted(1) - shifted(-1)) + 2 * (shifted(2) - shifted(-2))) / 10.0


class LSTMCTC(nn.Module):
    """Features (B, F, T) and lengths -> logits (B, T', V) and output lengths T'."""

    def __init__(self, cfg: LSTMConfig, num_features: int, vocab_size: int) -> None:
        super().__init__()
        if cfg.stack < 1 or cfg.stride < 1:
            raise ConfigError("model.overrides: lstm-ctc stack and stride must be at least 1")
        self.cfg = cfg
        size = num_features * (3 if cfg.deltas else 1) * cfg.stack
        self.rnns = nn.ModuleList()
        for _ in range(cfg.layers):
            layer = RecurrentLayer(size, cfg.hidden, "lstm", bidirectional=True, merge="concat", norm=False,
                                   bias=cfg.bias)
            self.rnns.append(layer)
            size = layer.output_size
        self.dropout = nn.Dropout(cfg.dropout)
        self.proj = nn.Linear(size, cfg.projection) if cfg.projection > 0 else None
        self.out = nn.Linear(cfg.projection or size, vocab_size)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Stacked frames start at every stride-th input frame: ceil(T / stride)."""
        return torch.div(lengths + self.cfg.stride - 1, self.cfg.stride, rounding_mode="floor")

    def flops(self, frames: int) -> tuple[int, int]:
        """(forward, backward) FLOPs for one utterance of `frames` feature frames (see models.flops)."""
        n = int(self.output_lengths(torch.tensor([frames])))
        rnn = F.add([r.flops(n, first=(i == 0)) for i, r in enumerate(self.rnns)])
        rest = sum(F.linear_flops(m.in_features, m.out_features, n) for m in (self.proj, self.out) if m is not None)
        return F.train_flops(0, rest, rnn)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats * length_mask(lengths, feats.shape[-1], feats.device)[:, None, :].to(feats.dtype)  # (B, F, T)
        if self.cfg.deltas:
            dev_lengths = lengths.to(x.device, non_blocking=True)
            d = deltas(x, dev_lengths)
            x = torch.cat([x, d, deltas(d, dev_lengths)], dim=1)  # (B, 3F, T)
            # stacks read zeros past the end
            x = x * length_mask(lengths, x.shape[-1], x.device)[:, None, :].to(x.dtype)
        b, f, t = x.shape
        k, s = self.cfg.stack, self.cfg.stride
        x = nn.functional.pad(x, (0, k - 1))  # (B, F, T + k - 1): the last stacks read zeros
        # frame j of each stack is the input shifted by j: x.unfold(2, k, 1), written so that it exports
        x = torch.stack([x[:, :, j:j + t] for j in range(k)], dim=-1)[:, :, ::s]  # (B, F, T', k)
        x = x.permute(0, 2, 3, 1).reshape(b, x.shape[2], k * f)  # (B, T', k*F), frame-major
        lengths = self.output_lengths(lengths)
        mask = length_mask(lengths, x.shape[1], x.device)
        x = x * mask[..., None].to(x.dtype)
        for i, rnn in enumerate(self.rnns):
            if i > 0:
                x = self.dropout(x)
            x = rnn(x, lengths, mask)  # (B, T', 2H)
        if self.proj is not None:
            x = self.proj(x)
        return self.out(x), lengths  # (B, T', V)
