"""A recurrent layer over padded batches: masked BN, GRU/LSTM, merged directions, mixed-precision aware."""
from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .._compat import rnn_weight_names
from ..config import ConfigError
from .gru_cpu import GRUDirection
from .layers import MaskedBatchNorm, align_left, align_right, length_mask, reverse_within

RNN_TYPES = {"gru": nn.GRU, "lstm": nn.LSTM}
MERGES = ("sum", "concat")  # bidirectional outputs: added, or concatenated
# How the padded (capturable) path runs both directions exactly on a GPU; every scheme gives the packed path's values:
#   stacked - one fused bidirectional cuDNN call over 2B rows: each row as is (its forward outputs are kept) and
#             aligned to the end of the batch's time axis (its reverse outputs are kept, then aligned back);
#   split   - two unidirectional calls, the reverse one over each row reversed within its length (the CPU's path;
#             on two CUDA streams side by side it ran no faster);
#   fused   - one fused bidirectional call over the B rows as they are, padding zeroed: exact for a layer without
#             biases (`bias=False`), whose state stays exactly zero through zero inputs, so the reverse pass starts
#             from a zero state at each row's last frame, as packing would start it;
#   auto    - fused for a layer without biases; else stacked for batches of at most STACKED_MAX_ROWS rows, where the
#             recurrent steps are latency-bound and doubling the rows costs less than a second pass; split for larger.
BIDIRECTIONAL_SCHEMES = ("auto", "stacked", "split", "fused")
STACKED_MAX_ROWS = 32
NO_BIAS_NEEDED = ("the fused bidirectional scheme is exact only without recurrent biases (model.overrides: "
                  "rnn_bias: false for DeepSpeech2, bias: false for LSTM-CTC)")

class RecurrentLayer(nn.Module):
    """Masked batch norm (optional) -> GRU/LSTM over valid frames -> merged directions.

    Precision: under CUDA autocast, cuDNN's RNN autocast wrapper always casts to fp16, also inside a bf16
    region. This layer therefore runs the RNN itself in the autocast dtype (weights cast per call, autograd
    flows to the fp32 masters) with autocast off, so bf16 means bf16. On CPU the same cast is used.
    """

    def __init__(self, input_size: int, hidden: int, rnn_type: str, bidirectional: bool, merge: str,
                 norm: bool, bias: bool = True) -> None:
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ConfigError(f"model.overrides: rnn_type {rnn_type!r} is unknown; use {' or '.join(RNN_TYPES)}")
        if merge not in MERGES:
            raise ConfigError(f"model.overrides: rnn_merge {merge!r} is unknown; use {' or '.join(MERGES)}")
        rnn_cls = RNN_TYPES[rnn_type]
        self.rnn_type = rnn_type
        self.input_size = input_size
        self.norm = MaskedBatchNorm(input_size) if norm else None
        self.rnn = rnn_cls(input_size, hidden, batch_first=True, bidirectional=bidirectional, bias=bias)
        self.bidirectional = bidirectional
        self.merge = merge
        self.hidden = hidden
        # A parameter-less unidirectional twin: runs one direction of `self.rnn` with its weights (CPU path).
        with torch.random.fork_rng(devices=[]):  # its throw-away init must not shift later layers' init
            self._one_way = rnn_cls(input_size, hidden, batch_first=True, bias=bias)
        for name in list(self._one_way._parameters):
            delattr(self._one_way, name)
        self._weight_names = [n for n in rnn_weight_names(self.rnn) if not n.endswith("_reverse")]
        self.scheme = "auto"  # of BIDIRECTIONAL_SCHEMES, for the padded path on a GPU (set_bidirectional_scheme)
        # on a GPU: the padded path, which never reads the lengths back (what a CUDA graph captures), instead of
        # cuDNN's packed one; set by whoever captures graphs of the model (set_capturable)
        self.capturable = False

    @property
    def bias(self) -> bool:
        """Whether the recurrent layer has biases (`fused` needs it not to)."""
        return bool(self.rnn.bias)

    @property
    def output_size(self) -> int:
        return self.hidden * 2 if self.bidirectional and self.merge == "concat" else self.hidden

    def flops(self, frames: int, first: bool = False) -> tuple[int, int]:
        """(forward, backward) FLOPs (2 per multiply-add) for one utterance of `frames` steps.

        Backward is twice the forward except where no input gradient is needed: the zero initial state's
        recurrent product at step 0, and, when `first` (the layer reads the features), the input product."""
        gates = {"gru": 3, "lstm": 4}[self.rnn_type]
        dirs = 2 if self.bidirectional else 1
        inp = 2 * frames * gates * self.hidden * self.input_size * dirs
        rec = 2 * frames * gates * self.hidden * self.hidden * dirs
        h0 = 2 * gates * self.hidden * self.hidden * dirs
        return inp + rec, (inp if first else 2 * inp) + 2 * rec - h0

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, H_in), lengths (B,), mask (B, T) on x's device -> (B, T, H_out); padded frames are zero.
        On a GPU the layer runs cuDNN's packed path (packing reads the lengths on the host), or, once it is
        `capturable` (set_capturable), the padded path, which never reads them back: what a CUDA graph captures.
        Both give the same values."""
        if self.norm is not None:
            x = self.norm(x.transpose(1, 2), mask).transpose(1, 2)  # BN over (B, H, T)
        dev = x.device.type
        dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        with torch.autocast(dev, enabled=False):
            if dtype is not None:
                x = x.to(dtype)
            if x.is_cuda and not self.capturable:
                out = self._packed(x, lengths, dtype)
            else:
                out = self._unpacked(x, lengths, dtype, mask) * mask[..., None].to(x.dtype)
        if self.bidirectional and self.merge == "sum":
            out = out[..., : self.hidden] + out[..., self.hidden:]  # (B, T, 2H) -> (B, T, H)
        return out

    def stream_init(self, batch: int) -> list[torch.Tensor]:
        """A unidirectional layer's state at a stream's start: its hidden state (and an LSTM's cell), (B, H) each."""
        w = self.rnn.weight_hh_l0
        return [w.new_zeros(batch, self.hidden) for _ in range(1 + (self.rnn_type == "lstm"))]

    def step(self, x: torch.Tensor, state: list[torch.Tensor],
             decided: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The unidirectional layer over a chunk of frames from the carried state, with the op and weights its
        `forward` runs: x (B, T, H_in), state [(B, H)] (+ a cell), decided (B, T) -> (B, T, H), the new state. A
        frame not `decided` (before the stream's start, or past its end) leaves the state as it was."""
        if self.bidirectional:
            raise ValueError("a bidirectional layer reads each utterance from its end: it cannot step")
        if self.norm is not None:
            x = self.norm(x.transpose(1, 2), torch.ones_like(decided)).transpose(1, 2)  # (B, H_in, T) eval statistics
        params = [getattr(self.rnn, n) for n in self._weight_names]  # w_ih, w_hh(, b_ih, b_hh): the op's order
        h, cell = state[0], state[1] if len(state) > 1 else None
        bias = self.bias  # the op's has_biases
        if not torch.jit.is_tracing() and bool(decided.all()):  # every frame counts: the chunk in one call
            if cell is None:
                y, h_new = torch.gru(x, h[None], params, bias, 1, 0.0, False, False, True)
                return y, [h_new[0]]
            y, h_new, c_new = torch.lstm(x, (h[None], cell[None]), params, bias, 1, 0.0, False, False, True)
            return y, [h_new[0], c_new[0]]
        out = []
        for t in range(x.shape[1]):
            xt, keep = x[:, t:t + 1], decided[:, t:t + 1]  # (B, 1, H_in), (B, 1)
            if cell is None:
                y, h_new = torch.gru(xt, h[None], params, bias, 1, 0.0, False, False, True)
            else:
                y, h_new, c_new = torch.lstm(xt, (h[None], cell[None]), params, bias, 1, 0.0, False, False, True)
                cell = torch.where(keep, c_new[0], cell)
            h = torch.where(keep, h_new[0], h)  # (B, H)
            out.append(y)
        return torch.cat(out, dim=1), [h] if cell is None else [h, cell]

    def _weights(self, names: list[str], dtype: torch.dtype | None, suffix: str = "") -> dict[str, torch.Tensor]:
        ws = {n: getattr(self.rnn, n + suffix) for n in names}
        return ws if dtype is None else {n: w.to(dtype) for n, w in ws.items()}

    def _packed(self, x: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        """cuDNN path: packed sequences, both directions in one fused call. (B, T, H_in) -> (B, T, dirs*H)."""
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        if dtype is None:
            out, _ = self.rnn(packed)  # flattened fp32 weights
        else:
            ws = self._weights(rnn_weight_names(self.rnn), dtype)
            with warnings.catch_warnings():  # the cast weights are not one flat buffer; cuDNN packs them per call
                warnings.simplefilter("ignore", UserWarning)
                out, _ = functional_call(self.rnn, ws, (packed,))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out

    def _unpacked(self, x: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype | None,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
        """The padded path, exact for padded batches without reading lengths on the host: the forward direction
        ignores trailing padding by itself; the backward direction starts at each row's own last frame (see
        BIDIRECTIONAL_SCHEMES; the CPU runs `split`, whose packed alternative on CPU zero-fills a full gradient
        buffer per time step, or `fused` when asked). mask (B, T), where known. (B, T, H_in) -> (B, T, dirs*H);
        padded frames hold garbage (the caller masks)."""
        fw = self._weights(self._weight_names, dtype)
        if not self.bidirectional:
            return self._one_way_run(x, fw)
        lengths = lengths.to(x.device)
        if not torch.jit.is_tracing() and (self.scheme == "fused" or (
                self.scheme == "auto" and not self.bias and x.is_cuda)):
            return self._fused(x, lengths, dtype, mask)
        stacked = self.scheme == "stacked" or (self.scheme == "auto" and x.shape[0] <= STACKED_MAX_ROWS)
        if x.is_cuda and not torch.jit.is_tracing() and stacked:
            return self._stacked(x, lengths, dtype)
        bw = self._weights(self._weight_names, dtype, "_reverse")
        out = self._one_way_run(x, fw)
        # the RNN is causal: its outputs past a row's length never reach the valid ones, nor (masked) the loss
        rev = reverse_within(self._one_way_run(reverse_within(x, lengths), bw), lengths)  # back in time order
        return torch.cat([out, rev], dim=-1)

    def _stacked(self, x: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        """Both directions in one fused bidirectional call over twice the rows. (B, T, H_in) -> (B, T, 2H).
        A left-aligned row's forward outputs are exact (causal: trailing padding comes after them); a right-aligned
        copy's reverse outputs are exact (its reverse pass starts at the row's last frame). The other two halves
        are discarded: their gradient is zero, so the inputs' padding never reaches the weights' gradients."""
        b = x.shape[0]
        both = torch.cat([x, align_right(x, lengths)])  # (2B, T, H_in)
        ws = self._weights(rnn_weight_names(self.rnn), dtype)
        with warnings.catch_warnings():  # cast weights are not one flat buffer: cuDNN packs them per call
            warnings.simplefilter("ignore", UserWarning)
            out = functional_call(self.rnn, ws, (both,))[0]  # (2B, T, 2H)
        return torch.cat([out[:b, :, : self.hidden], align_left(out[b:, :, self.hidden:], lengths)], dim=-1)

    def _fused(self, x: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype | None,
               mask: torch.Tensor | None) -> torch.Tensor:
        """Both directions in one fused bidirectional call over the B rows, their padding zeroed. (B, T, H_in) ->
        (B, T, 2H). Without biases a zero input keeps a zero state exactly zero (every gate's pre-activation is 0, so
        a GRU's candidate and an LSTM's cell input are tanh(0) = 0), so the reverse pass reaches each row's last frame
        with the zero state packing starts it from; the forward pass is causal. The padding's outputs are discarded
        and its zeroed inputs pass no gradient on."""
        if self.bias:
            raise ConfigError(NO_BIAS_NEEDED)
        if mask is None:
            mask = length_mask(lengths, x.shape[1], x.device)  # (B, T)
        ws = self._weights(rnn_weight_names(self.rnn), dtype)
        with warnings.catch_warnings():  # cast weights are not one flat buffer: cuDNN packs them per call
            warnings.simplefilter("ignore", UserWarning)
            return functional_call(self.rnn, ws, (x * mask[..., None].to(x.dtype),))[0]  # (B, T, 2H)

    def _one_way_run(self, x: torch.Tensor, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        """One direction over (B, T, H_in) with these weights -> (B, T, H). Under tracing (ONNX and
        TorchScript export, which cannot trace functional_call) the same RNN op is called directly."""
        if not torch.jit.is_tracing():
            if (self.rnn_type == "gru" and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
                    and torch.is_grad_enabled()):  # training: backward through time as a few large products
                w = [weights[n] for n in self._weight_names]  # w_ih, w_hh(, b_ih, b_hh)
                if not self.bias:  # the hand-written backward takes biases: constant zeros, no gradient asked
                    w += [w[1].new_zeros(w[1].shape[0])] * 2
                return GRUDirection.apply(x, *w)
            with warnings.catch_warnings():  # cuDNN: the weights are not one flat buffer (it packs them per call)
                warnings.simplefilter("ignore", UserWarning)
                return functional_call(self._one_way, weights, (x,))[0]
        h0 = x.new_zeros(1, x.shape[0], self.hidden)
        params = [weights[n] for n in self._weight_names]  # w_ih, w_hh(, b_ih, b_hh): the op's order
        if self.rnn_type == "gru":
            return torch.gru(x, h0, params, self.bias, 1, 0.0, False, False, True)[0]
        return torch.lstm(x, (h0, h0), params, self.bias, 1, 0.0, False, False, True)[0]


def set_capturable(model: nn.Module, on: bool = True) -> None:
    """Every recurrent layer of `model` takes its padded path on a GPU (`on`), which a CUDA graph can capture, or
    cuDNN's packed path (off, the default)."""
    for layer in model.modules():
        if isinstance(layer, RecurrentLayer):
            layer.capturable = on


def set_bidirectional_scheme(model: nn.Module, scheme: str) -> None:
    """Every recurrent layer of `model` runs its padded bidirectional path on a GPU by `scheme`."""
    if scheme not in BIDIRECTIONAL_SCHEMES:
        raise ConfigError(f"bidirectional scheme {scheme!r} is unknown; use {', '.join(BIDIRECTIONAL_SCHEMES)}")
    layers = [m for m in model.modules() if isinstance(m, RecurrentLayer)]
    if scheme == "fused" and any(m.bias and m.bidirectional for m in layers):
        raise ConfigError(NO_BIAS_NEEDED)
    for layer in layers:
        layer.scheme = scheme
