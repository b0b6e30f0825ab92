"""The streaming model as one fixed-shape step for ONNX: a chunk of feature frames and the carried state in,
logits and the new state out (`speechscale export --format onnx --streaming`).

    step = StreamStep(model, chunk=32)        # DeepSpeech2 with unidirectional RNNs and a lookahead
    logits, valid, *state = step(feats, frames_in, total, *state)

Every tensor has a fixed shape, so the graph is the same for every call:
- each time convolution (kernel k, stride s) keeps its last k - s input frames (zeros at the start);
- each RNN layer its hidden state (and an LSTM's cell); the step runs the recurrence frame by frame;
- the lookahead keeps its last `context` input frames.
At the stream's start the carried zeros are more than the offline model's left padding, so a layer's first
outputs come from before the stream: output j of layer l is the offline output j - D_l, with
D_l = (k - s - p + D_(l-1)) / s (p the left padding; an integer for the DeepSpeech2 presets). Outputs outside
[0, N_l) (N_l: the offline length, from `total`, the stream's feature frames once known) are set to zero, which is
exactly the next layer's zero padding, and do not advance the RNNs. So the logits marked `valid` are the offline
model's, in order, for any chunking of the features (tests/export/test_stream_step.py). While the stream runs,
`total` is "unknown" (2^40); at its end the runtime passes the real count and feeds zero chunks until every
output is out.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..models.deepspeech2 import DeepSpeech2

UNKNOWN = 1 << 40  # `total` while the stream's length is not known yet


def streaming_problem(comps: Any) -> str | None:
    """Why the model of `comps` cannot stream (one line), or None when it can."""
    model, fcfg = comps.model, comps.features.cfg
    if not isinstance(model, DeepSpeech2):
        return f"{comps.model_name} needs the whole utterance (streaming takes DeepSpeech2 with unidirectional RNNs)"
    if model.cfg.bidirectional:
        return f"{comps.model_name} has bidirectional RNNs, which read each utterance backwards from its end"
    if fcfg.normalize != "none" or fcfg.remove_dc:
        return (f"{comps.model_name} normalizes its features over the whole utterance (features.normalize="
                f"{fcfg.normalize}{', remove_dc' if fcfg.remove_dc else ''}); streaming needs features.normalize=none")
    return None


def _conv_layers(model: Any) -> list[tuple[nn.Module, int, int, int]]:
    """(conv, k, s, left padding) along time for the front end's convolutions."""
    return [(c, c.kernel_size[1], c.stride[1], c.padding[1]) for c in model.convs]


class StreamStep(nn.Module):
    """One fixed-shape step of a streaming DeepSpeech2 (see the module doc)."""

    def __init__(self, model: Any, chunk: int = 32) -> None:
        super().__init__()
        if model.cfg.bidirectional or model.lookahead is None:
            raise ValueError("a streaming step needs unidirectional RNNs and a lookahead")
        self.model = model.eval()
        convs = _conv_layers(model)
        stride = 1
        self.delays: list[int] = []
        delay = 0
        for _, k, s, p in convs:
            stride *= s
            if (k - s - p + delay) % s:
                raise ValueError(f"a time convolution (kernel {k}, stride {s}, padding {p}) does not align in steps")
            delay = (k - s - p + delay) // s
            self.delays.append(delay)
        if chunk % stride:
            raise ValueError(f"chunk must be a multiple of the front end's time stride {stride}, not {chunk}")
        context = model.lookahead.context
        self.delays.append(context + delay)  # the lookahead: kernel context + 1, stride 1, no left padding
        self.chunk, self.stride, self.out_frames = chunk, stride, chunk // stride
        self.context = context

    def initial_state(self) -> list[torch.Tensor]:
        """Zeros: each conv's carried frames, each RNN layer's hidden (and cell) state, the lookahead's frames."""
        m, state = self.model, []
        x = torch.zeros(1, 1, m.num_features, 256)  # any length the kernels fit: only channels and bins matter
        for conv, k, s, _ in _conv_layers(m):
            state.append(x.new_zeros(*x.shape[:-1], k - s))
            x = nn.functional.conv2d(x, conv.weight, None, conv.stride, (conv.padding[0], 0))
        for layer in m.rnns:
            state.append(torch.zeros(1, layer.hidden))
            if layer.rnn_type == "lstm":
                state.append(torch.zeros(1, layer.hidden))
        state.append(torch.zeros(1, m.rnns[-1].output_size, self.context))
        return state

    def _valid(self, first: torch.Tensor, n: int, delay: int, length: torch.Tensor) -> torch.Tensor:
        """Which of the n outputs starting at stream index `first` are offline outputs 0..length-1: (n,) bool."""
        o = first + torch.arange(n) - delay
        return (o >= 0) & (o < length)

    def forward(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """feats (1, F, chunk), frames_in (1,) int64 (frames fed before this chunk), total (1,) int64 (the stream's
        frames, or UNKNOWN), state -> logits (chunk / stride, V), valid (chunk / stride,) bool, new state."""
        m = self.model
        state = list(state)
        new: list[torch.Tensor] = []
        x, first, length = feats[:, None], frames_in, total  # (1, 1, F, n)
        for i, ((conv, k, s, p), norm) in enumerate(zip(_conv_layers(m), m.conv_norms)):
            x = torch.cat([state.pop(0), x], dim=-1)  # (1, C, F, k - s + n)
            new.append(x[..., x.shape[-1] - (k - s):])
            x = nn.functional.conv2d(x, conv.weight, conv.bias, conv.stride, (conv.padding[0], 0))  # (1, C', F', n/s)
            first, length = first // s, (length + 2 * p - k) // s + 1
            x = m.act(norm(x, torch.ones(1, x.shape[-1], dtype=torch.bool)))
            x = x * self._valid(first, x.shape[-1], self.delays[i], length).to(x.dtype)  # the next layer's padding
        valid = self._valid(first, x.shape[-1], self.delays[len(m.convs) - 1], length)
        b, c, f, t = x.shape
        x = x.reshape(b, c * f, t).transpose(1, 2)  # (1, T, C*F)
        for layer in m.rnns:
            if layer.norm is not None:
                x = layer.norm(x.transpose(1, 2), torch.ones(1, t, dtype=torch.bool)).transpose(1, 2)
            x, carried = _recur(layer, x[0], valid, [state.pop(0) for _ in range(1 + (layer.rnn_type == "lstm"))])
            x = x[None]
            new += carried
        x = x * valid[None, :, None].to(x.dtype)
        x = torch.cat([state.pop(0), x.transpose(1, 2)], dim=-1)  # (1, H, context + T)
        new.append(x[..., x.shape[-1] - self.context:])
        x = m.act(nn.functional.conv1d(x, m.lookahead.conv.weight, None, 1, 0, 1, m.lookahead.conv.groups))
        valid = self._valid(first, t, self.delays[-1], length)
        x = m.fc_norm(x, torch.ones(1, t, dtype=torch.bool)).transpose(1, 2)  # (1, T, H)
        return (m.fc(x)[0], valid, *new)


def _recur(layer: Any, x: torch.Tensor, valid: torch.Tensor,
           carried: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One unidirectional GRU/LSTM layer over x (T, I) frame by frame from the carried (1, H) state; frames not
    `valid` leave the state as it was. -> outputs (T, H), the new state."""
    w_ih, w_hh, b_ih, b_hh = (getattr(layer.rnn, n) for n in layer._weight_names)
    gates_x = x @ w_ih.t() + b_ih  # (T, G*H): the input's part of every gate at once
    h = carried[0]
    c = carried[1] if len(carried) > 1 else None
    out = []
    for t in range(x.shape[0]):
        gh = h @ w_hh.t() + b_hh  # (1, G*H)
        gx = gates_x[t:t + 1]
        if c is None:  # GRU: gates r, z, n (PyTorch's order and formula)
            xr, xz, xn = gx.chunk(3, dim=1)
            hr, hz, hn = gh.chunk(3, dim=1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            h_new = (1 - z) * torch.tanh(xn + r * hn) + z * h
        else:  # LSTM: gates i, f, g, o
            i, f, g, o = (gx + gh).chunk(4, dim=1)
            c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h_new = torch.sigmoid(o) * torch.tanh(c_new)
            c = torch.where(valid[t], c_new, c)
        h = torch.where(valid[t], h_new, h)
        out.append(h)
    return torch.cat(out, dim=0), [h] if c is None else [h, c]


def state_names(step: StreamStep) -> list[str]:
    """The state tensors' input names, in order (the outputs add `_out`)."""
    m = step.model
    names = [f"conv{i}" for i in range(len(m.convs))]
    for i, layer in enumerate(m.rnns):
        names += [f"rnn{i}_h"] + ([f"rnn{i}_c"] if layer.rnn_type == "lstm" else [])
    return [*names, "lookahead"]


def export_stream_step(checkpoint: str | Path, out: str | Path, chunk: int = 32) -> dict[str, Any]:
    """Write the checkpoint's streaming step as ONNX to `out` (with the model description and the step's shapes
    as metadata); returns a summary. A model that cannot stream is a ConfigError in one line."""
    import io
    import json
    import warnings

    from ..components import components_from_checkpoint, describe
    from ..config import ConfigError
    from ..extras import require
    from ..storage.checkpoints import load_checkpoint
    from .exporter import META_KEY

    onnx = require("onnx", "export", "export --format onnx --streaming")
    state = load_checkpoint(checkpoint)
    comps = components_from_checkpoint(state)
    model = comps.model
    problem = streaming_problem(comps)  # the rule StreamingSession applies
    if problem:
        raise ConfigError(f"--streaming: this model cannot stream: {problem}")
    try:
        step = StreamStep(model, chunk).eval()
    except ValueError as e:
        raise ConfigError(f"--streaming: {e}") from None
    init = step.initial_state()
    names = state_names(step)
    example = (torch.zeros(1, model.num_features, chunk), torch.zeros(1, dtype=torch.long),
               torch.full((1,), UNKNOWN, dtype=torch.long), *init)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings: the shapes are fixed by design
        torch.onnx.export(step, example, buffer, dynamo=False, opset_version=17,
                          input_names=["features", "frames_in", "total", *names],
                          output_names=["logits", "valid", *[f"{n}_out" for n in names]])
    graph = onnx.load_model_from_string(buffer.getvalue())
    spec = {"chunk": chunk, "out_frames": step.out_frames, "state": {n: list(t.shape) for n, t in zip(names, init)}}
    graph.metadata_props.add(key=META_KEY, value=json.dumps({**describe(state), "stream_step": spec}))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(graph, str(out))
    return {"format": "onnx", "streaming": True, "out": str(out), "bytes": out.stat().st_size,
            "model": comps.model_name, "chunk": chunk}
