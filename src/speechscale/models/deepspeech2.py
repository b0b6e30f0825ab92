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

from ..config import ConfigError
from . import flops as F
from .layers import MaskedBatchNorm, conv_out_length, conv_time_carry, conv_time_delay, conv_time_step, length_mask
from .rnn import RecurrentLayer
from .streaming import decided


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
    rnn_bias: bool = True               # recurrent biases; false (DS2's own form: BN supplies the input's shift) lets
                                        # a graphed GPU step run each layer as one exact fused bidirectional call
    lookahead: int = 20                 # future frames of the lookahead conv (unidirectional only)
    fc_hidden: int = 0                  # an extra FC layer before the output (0 = none)
    fc_bias: bool = True                # the output layer's bias (deepspeech.pytorch's has none: its norm shifts)
    dropout: float = 0.0                # between recurrent layers


def _activation(name: str) -> nn.Module:
    if name == "hardtanh":
        return nn.Hardtanh(0.0, 20.0)
    if name == "relu":
        return nn.ReLU()
    raise ConfigError(f"model.overrides: activation {name!r} is unknown; use hardtanh or relu")


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

    def step(self, x: torch.Tensor, carried: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, H) new frames, carried (B, H, context) -> (B, T, H) outputs `context` frames behind, the frames to
        carry next."""
        y, keep = conv_time_step(self.conv, x.transpose(1, 2), carried)  # (B, H, T)
        return y.transpose(1, 2), keep


class DeepSpeech2(nn.Module):
    """Features (B, F, T) and lengths -> logits (B, T', V) and output lengths T'."""

    def __init__(self, cfg: DS2Config, num_features: int, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.num_features = num_features
        self.convs = nn.ModuleList()
        self.conv_norms = nn.ModuleList()
        in_ch, freq = 1, num_features
        for spec in cfg.conv:
            pad = (spec.kernel[0] // 2, spec.kernel[1] // 2)
            conv = nn.Conv2d(in_ch, spec.channels, tuple(spec.kernel), tuple(spec.stride), pad, bias=False)
            self.convs.append(conv)
            self.conv_norms.append(MaskedBatchNorm(spec.channels))
            freq = int(conv_out_length(torch.tensor(freq, device="cpu"), conv, dim=0))  # also under meta
            if freq < 1:
                raise ConfigError(f"model.overrides: the conv front end leaves no frequency bins of the "
                                  f"{num_features} features; use smaller kernels or strides")
            in_ch = spec.channels
        self.act = _activation(cfg.activation)
        self.rnns = nn.ModuleList()
        size = in_ch * freq
        for i in range(cfg.rnn_layers):
            layer = RecurrentLayer(size, cfg.rnn_hidden, cfg.rnn_type, cfg.bidirectional, cfg.rnn_merge,
                                   norm=i > 0, bias=cfg.rnn_bias)
            self.rnns.append(layer)
            size = layer.output_size
        self.dropout = nn.Dropout(cfg.dropout)
        self.lookahead = None if cfg.bidirectional or cfg.lookahead <= 0 else Lookahead(size, cfg.lookahead)
        self.fc_norm = MaskedBatchNorm(size)
        fc: list[nn.Module] = []
        if cfg.fc_hidden > 0:
            fc += [nn.Linear(size, cfg.fc_hidden), _activation(cfg.activation)]
            size = cfg.fc_hidden
        fc.append(nn.Linear(size, vocab_size, bias=cfg.fc_bias))
        self.fc = nn.Sequential(*fc)

    @staticmethod
    def _conv_channels_last(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        """oneDNN's channels-last kernels on CPU: 1.5x faster forward + backward for the DS2 conv stack on
        2 cores. The weight is reordered per call (1 MB), so parameters and checkpoints keep their layout."""
        fmt = torch.channels_last
        return nn.functional.conv2d(x.contiguous(memory_format=fmt), conv.weight.contiguous(memory_format=fmt),
                                    conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames out for frames in, derived from the conv layers' own parameters."""
        for conv in self.convs:
            lengths = conv_out_length(lengths, conv, dim=1)
        return lengths

    def flops(self, frames: int) -> tuple[int, int]:
        """(forward, backward) FLOPs for one utterance of `frames` feature frames (see models.flops)."""
        t = torch.tensor([frames])
        freq = self.num_features
        conv_fl = []
        for conv in self.convs:
            t = conv_out_length(t, conv, dim=1)
            freq = int(conv_out_length(torch.tensor(freq), conv, dim=0))
            conv_fl.append(F.conv_flops(conv.in_channels, conv.out_channels, conv.kernel_size, freq * int(t)))
        n = int(t)
        rest = sum(conv_fl[1:])
        rnn_fl = F.add([rnn.flops(n) for rnn in self.rnns])
        if self.lookahead is not None:
            c = self.lookahead.conv
            rest += F.conv_flops(c.in_channels, c.out_channels, c.kernel_size, n, groups=c.groups)
        rest += sum(F.linear_flops(m.in_features, m.out_features, n) for m in self.fc if isinstance(m, nn.Linear))
        return F.train_flops(conv_fl[0], rest, rnn_fl)

    def streaming_problem(self) -> str | None:
        """Why this model cannot stream (one line), or None."""
        if self.cfg.bidirectional:
            return "has bidirectional RNNs, which read each utterance backwards from its end"
        try:
            self._stream_delays()
        except ValueError as e:
            return str(e)
        return None

    stream_lookahead = 0  # its lookahead is a delay inside the step, not frames read after the chunk

    @property
    def stream_reads_ahead(self) -> int:
        """Feature frames after a frame's chunk the step reads before that frame's output is decided."""
        return self._stream_delays()[-1] * self.stream_stride

    @property
    def stream_stride(self) -> int:
        """Feature frames per output frame."""
        stride = 1
        for conv in self.convs:
            stride *= conv.stride[1]
        return stride

    def _stream_delays(self) -> list[int]:
        """Each time convolution's output delay in the step, then the lookahead's (models.streaming)."""
        delays, delay = [], 0
        for conv in self.convs:
            delay = conv_time_delay(conv, delay)
            delays.append(delay)
        if self.lookahead is not None:
            delays.append(conv_time_delay(self.lookahead.conv, delay))
        return delays

    def stream_state_names(self) -> list[str]:
        """Names of stream_init's tensors, in order."""
        names = [f"conv{i}" for i in range(len(self.convs))]
        for i, layer in enumerate(self.rnns):
            names += [f"rnn{i}_h"] + ([f"rnn{i}_c"] if layer.rnn_type == "lstm" else [])
        return names + (["lookahead"] if self.lookahead is not None else [])

    def stream_init(self, batch: int) -> list[torch.Tensor]:
        """Zeros: each time convolution's carried frames, each RNN layer's state, the lookahead's frames."""
        state, w = [], self.fc[-1].weight
        channels, freq = 1, self.num_features
        for conv in self.convs:
            state.append(conv_time_carry(conv, (batch, channels, freq, 0)))
            channels, freq = conv.out_channels, int(conv_out_length(torch.tensor(freq), conv, dim=0))
        for layer in self.rnns:
            state += layer.stream_init(batch)
        if self.lookahead is not None:
            state.append(w.new_zeros(batch, self.rnns[-1].output_size, self.lookahead.context))
        return state

    def stream_step(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                    state: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """feats (B, F, chunk), frames_in (B,), total (B,), state -> logits (B, chunk / stride, V), decided
        (B, chunk / stride) bool, the new state (models.streaming)."""
        delays, state, new = self._stream_delays(), list(state), []
        x, first, length = feats[:, None], frames_in, total  # (B, 1, F, n)
        for i, (conv, norm) in enumerate(zip(self.convs, self.conv_norms)):
            x, keep = conv_time_step(conv, x, state.pop(0))  # (B, C, F', n / s)
            new.append(keep)
            first, length = first // conv.stride[1], conv_out_length(length, conv, dim=1)
            ok = decided(first, x.shape[-1], delays[i], length)  # (B, n')
            x = self.act(norm(x, torch.ones_like(ok))) * ok[:, None, None, :].to(x.dtype)  # zeros: the padding
        b, c, f, t = x.shape
        x = x.reshape(b, c * f, t).transpose(1, 2)  # (B, T, C*F')
        for layer in self.rnns:
            x, carried = layer.step(x, [state.pop(0) for _ in range(1 + (layer.rnn_type == "lstm"))], ok)
            new += carried
        if self.lookahead is not None:
            x, keep = self.lookahead.step(x * ok[..., None].to(x.dtype), state.pop(0))  # (B, T, H)
            new.append(keep)
            x = self.act(x)
            ok = decided(first, t, delays[-1], length)
        x = self.fc_norm(x.transpose(1, 2), torch.ones_like(ok)).transpose(1, 2)  # (B, T, H)
        return self.fc(x), ok, new

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats = feats * length_mask(lengths, feats.shape[-1], feats.device)[:, None, :].to(feats.dtype)  # padding = 0
        x = feats.unsqueeze(1)  # (B, F, T) -> (B, 1, F, T)
        channels_last = x.device.type == "cpu" and not torch.jit.is_tracing()
        for conv, norm in zip(self.convs, self.conv_norms):
            x = self._conv_channels_last(conv, x) if channels_last else conv(x)  # (B, C, F', T')
            lengths = conv_out_length(lengths, conv, dim=1)
            x = self.act(norm(x, length_mask(lengths, x.shape[-1], x.device)))
        b, c, f, t = x.shape
        x = x.reshape(b, c * f, t).transpose(1, 2)  # (B, C*F, T) -> (B, T, C*F)
        mask = length_mask(lengths, t, x.device)
        for i, rnn in enumerate(self.rnns):
            if i > 0:
                x = self.dropout(x)
            x = rnn(x, lengths, mask)  # (B, T, H)
        if self.lookahead is not None:
            x = self.act(self.lookahead(x))
        x = self.fc_norm(x.transpose(1, 2), mask).transpose(1, 2)  # (B, T, H)
        return self.fc(x), lengths  # (B, T, V)
