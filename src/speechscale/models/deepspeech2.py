"""DeepSpeech2 (Amodei et al. 2016): 2-D conv front end, recurrent stack, lookahead, FC to characters.

    >>> model = DeepSpeech2(DS2Config(), num_features=161, vocab_size=29)
    >>> logits, lens = model(torch.randn(2, 161, 300), torch.tensor([300, 200]))
    >>> logits.shape, lens.tolist()
    (torch.Size([2, 150, 29]), [150, 100])
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .layers import MaskedBatchNorm, conv_out_length, length_mask


@dataclass
class ConvSpec:
    channels: int
    kernel: list[int]   # [freq, time]
    stride: list[int]   # [freq, time]


@dataclass
class DS2Config:
    """Architecture of a DeepSpeech2 model; the presets in the registry fill it."""

    conv: list[ConvSpec] = field(default_factory=lambda: [ConvSpec(32, [41, 11], [2, 2]),
                                                          ConvSpec(32, [21, 11], [2, 1])])
    activation: str = "hardtanh"        # hardtanh (clipped ReLU at 20, as DS2) | relu
    rnn_type: str = "gru"               # gru | lstm
    rnn_layers: int = 5
    rnn_hidden: int = 800
    bidirectional: bool = True
    rnn_merge: str = "sum"              # bidirectional outputs: sum (deepspeech.pytorch) | concat (OpenSeq2Seq)
    lookahead: int = 20                 # future frames of the lookahead conv (unidirectional only)
    fc_hidden: int = 0                  # an extra FC layer before the output (0 = none)
    dropout: float = 0.0                # between recurrent layers


def _activation(name: str) -> nn.Module:
    if name == "hardtanh":
        return nn.Hardtanh(0.0, 20.0)
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unknown activation {name!r}; use hardtanh or relu")


class RecurrentLayer(nn.Module):
    """Masked batch norm (optional) -> packed GRU/LSTM over valid frames -> merged directions."""

    def __init__(self, input_size: int, hidden: int, rnn_type: str, bidirectional: bool, merge: str,
                 norm: bool) -> None:
        super().__init__()
        rnn_cls = {"gru": nn.GRU, "lstm": nn.LSTM}[rnn_type]
        self.norm = MaskedBatchNorm(input_size) if norm else None
        self.rnn = rnn_cls(input_size, hidden, batch_first=True, bidirectional=bidirectional)
        self.bidirectional = bidirectional
        self.merge = merge
        self.hidden = hidden
        # A parameter-less unidirectional twin: runs one direction of `self.rnn` with its weights (CPU path).
        with torch.random.fork_rng(devices=[]):  # its throw-away init must not shift later layers' init
            self._one_way = rnn_cls(input_size, hidden, batch_first=True)
        for name in list(self._one_way._parameters):
            delattr(self._one_way, name)
        self._weight_names = [n for n in self.rnn._flat_weights_names if not n.endswith("_reverse")]

    @property
    def output_size(self) -> int:
        return self.hidden * 2 if self.bidirectional and self.merge == "concat" else self.hidden

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, H_in) -> (B, T, H_out); padded frames are zero."""
        if self.norm is not None:
            x = self.norm(x.transpose(1, 2), mask).transpose(1, 2)  # BN over (B, H, T)
        if x.is_cuda:
            out = self._packed(x, lengths)
        else:
            out = self._unpacked(x, lengths) * mask[..., None].to(x.dtype)
        if self.bidirectional and self.merge == "sum":
            out = out[..., : self.hidden] + out[..., self.hidden:]  # (B, T, 2H) -> (B, T, H)
        return out

    def _packed(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """cuDNN path: packed sequences, both directions in one fused call. (B, T, H_in) -> (B, T, dirs*H)."""
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out

    def _unpacked(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """CPU path, exact for padded batches: the forward direction ignores trailing padding by itself; the
        backward direction runs forward over each utterance reversed within its own length. Packed
        sequences on CPU zero-fill a full gradient buffer per time step (quadratic in T); this does not.
        (B, T, H_in) -> (B, T, dirs*H); padded frames hold garbage (the caller masks)."""
        fw = {n: getattr(self.rnn, n) for n in self._weight_names}
        out, _ = functional_call(self._one_way, fw, (x,))
        if not self.bidirectional:
            return out
        t = x.shape[1]
        idx = (lengths[:, None] - 1 - torch.arange(t, device=x.device)[None]).clamp(min=0)  # (B, T)
        bw = {n: getattr(self.rnn, n + "_reverse") for n in self._weight_names}
        rev, _ = functional_call(self._one_way, bw, (x.gather(1, idx[..., None].expand(-1, -1, x.shape[2])),))
        rev = rev.gather(1, idx[..., None].expand(-1, -1, rev.shape[2]))  # back to time order
        return torch.cat([out, rev], dim=-1)


class Lookahead(nn.Module):
    """Row convolution over `context` future frames (DS2 §3.7), per channel."""

    def __init__(self, channels: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.conv = nn.Conv1d(channels, channels, kernel_size=context + 1, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, H) -> (B, T, H)."""
        x = x.transpose(1, 2)  # (B, H, T)
        x = nn.functional.pad(x, (0, self.context))
        return self.conv(x).transpose(1, 2)


class DeepSpeech2(nn.Module):
    """Features (B, F, T) and lengths -> logits (B, T', V) and output lengths T'."""

    def __init__(self, cfg: DS2Config, num_features: int, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.convs = nn.ModuleList()
        self.conv_norms = nn.ModuleList()
        in_ch, freq = 1, num_features
        for spec in cfg.conv:
            pad = (spec.kernel[0] // 2, spec.kernel[1] // 2)
            conv = nn.Conv2d(in_ch, spec.channels, tuple(spec.kernel), tuple(spec.stride), pad, bias=False)
            self.convs.append(conv)
            self.conv_norms.append(MaskedBatchNorm(spec.channels))
            freq = int(conv_out_length(torch.tensor(freq), conv, dim=0))
            in_ch = spec.channels
        self.act = _activation(cfg.activation)
        self.rnns = nn.ModuleList()
        size = in_ch * freq
        for i in range(cfg.rnn_layers):
            layer = RecurrentLayer(size, cfg.rnn_hidden, cfg.rnn_type, cfg.bidirectional, cfg.rnn_merge,
                                   norm=i > 0)
            self.rnns.append(layer)
            size = layer.output_size
        self.dropout = nn.Dropout(cfg.dropout)
        self.lookahead = None if cfg.bidirectional or cfg.lookahead <= 0 else Lookahead(size, cfg.lookahead)
        self.fc_norm = MaskedBatchNorm(size)
        fc: list[nn.Module] = []
        if cfg.fc_hidden > 0:
            fc += [nn.Linear(size, cfg.fc_hidden), _activation(cfg.activation)]
            size = cfg.fc_hidden
        fc.append(nn.Linear(size, vocab_size))
        self.fc = nn.Sequential(*fc)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames out for frames in, derived from the conv layers' own parameters."""
        for conv in self.convs:
            lengths = conv_out_length(lengths, conv, dim=1)
        return lengths

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats = feats * length_mask(lengths, feats.shape[-1])[:, None, :].to(feats.dtype)  # padding = 0
        x = feats.unsqueeze(1)  # (B, F, T) -> (B, 1, F, T)
        for conv, norm in zip(self.convs, self.conv_norms):
            x = conv(x)  # (B, C, F', T')
            lengths = conv_out_length(lengths, conv, dim=1)
            x = self.act(norm(x, length_mask(lengths, x.shape[-1])))
        b, c, f, t = x.shape
        x = x.reshape(b, c * f, t).transpose(1, 2)  # (B, C*F, T) -> (B, T, C*F)
        mask = length_mask(lengths, t)
        for i, rnn in enumerate(self.rnns):
            if i > 0:
                x = self.dropout(x)
            x = rnn(x, lengths, mask)  # (B, T, H)
        if self.lookahead is not None:
            x = self.act(self.lookahead(x))
        x = self.fc_norm(x.transpose(1, 2), mask).transpose(1, 2)  # (B, T, H)
        return self.fc(x), lengths  # (B, T, V)
