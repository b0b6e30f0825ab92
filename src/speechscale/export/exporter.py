"""`speechscale export`: a checkpoint's acoustic model as ONNX or TorchScript with a dynamic time axis.

    speechscale export --checkpoint runs/demo/checkpoints/best.pt --format onnx --out demo.onnx

The exported graph maps features to log-probabilities: inputs `features` (B, F, T) float32 and `lengths`
(B,) int64, outputs `log_probs` (B, T', V) and `out_lengths` (B,); batch and time are dynamic. Features
stay outside the graph (torch.stft does not export to ONNX in torch 2.13): the runtime computes them with
the same FeatureExtractor from the model description the file carries (`describe()`: the checkpoint's
config), stored as ONNX metadata (`speechscale`) or a TorchScript extra file (`speechscale.json`).

ONNX has no checksums of its own (TorchScript's zip records carry CRC-32s): an ONNX file also holds the CRC-32
of the model bytes before its metadata and of the description (`speechscale.crc32`), which loading checks.

ONNX uses the TorchScript-based exporter (`dynamo=False`): torch 2.13's default dynamo exporter fixes a
GRU's time axis to the example's length while the file claims a dynamic one.

`--int8` stores the weights of the matrix products and LSTMs as 8-bit integers, one scale per output channel
(onnxruntime's dynamic quantization: activations are quantized as each product runs). Convolutions and GRUs stay
float: onnxruntime has no integer GRU, and its integer convolution runs slower on the CPU than the float one.
"""
from __future__ import annotations

import io
import json
import warnings
import zlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..components import components_from_checkpoint, describe
from ..config import ConfigError
from ..storage.cards import card_of_checkpoint, write_card
from ..storage.files import written_whole
from .metadata import CRC_KEY, META_KEY, metadata_tail  # noqa: F401 - named from here too

FORMATS = ("onnx", "torchscript")
EXAMPLE_FRAMES = 237      # the example input's length: tests check parity at other lengths
INT8_OPS = ("MatMul", "LSTM")  # the ONNX operators whose weights --int8 quantizes
INT8_WEIGHTS = "int8 (matrix products and LSTMs; onnxruntime dynamic quantization); the validation figures are the " \
               "float checkpoint's"


class LogProbs(nn.Module):
    """The acoustic model as exported: features (B, F, T), lengths (B,) -> log_probs (B, T', V), lengths (B,)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, out_lengths = self.model(feats, lengths)
        return logits.float().log_softmax(-1), out_lengths


def with_streaming(card: dict[str, Any], comps: Any, step: int = 0) -> dict[str, Any]:
    """`card` stating what the file written from `comps` does with a stream: the model's streaming entry, marked as
    an offline export, or (`step`: feature frames a step) as the streaming step."""
    streaming = comps.streaming_card()
    if streaming["streams"]:
        frames = step / comps.model.stream_stride  # output frames a step
        streaming.update({"step_ms": round(frames * streaming["frame_ms"], 3)} if step else {"export": "offline"})
    return {**card, "streaming": streaming}


def export_model(checkpoint: str | Path, fmt: str, out: str | Path, int8: bool = False) -> dict[str, Any]:
    """Write the checkpoint's model to `out` in format `fmt` (onnx | torchscript), with `int8` weights (ONNX only:
    see the module doc); returns a summary."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if int8 and fmt != "onnx":
        raise ConfigError("--int8 goes with --format onnx (onnxruntime quantizes the file)")
    from ..extras import require
    from ..storage.checkpoints import load_checkpoint
    from .runtime import detect_backend

    if detect_backend(out) != fmt:  # a file is run by what its name says, never by its contents
        raise ConfigError(f"--out {out}: name {'an ONNX export .onnx' if fmt == 'onnx' else 'a TorchScript export .ts'}"
                          f"{'' if fmt == 'onnx' else ' (or .torchscript)'}; speechscale runs a model file by its name")
    if fmt == "onnx":
        require("onnx", "export", "export --format onnx")  # before any work
    state = load_checkpoint(checkpoint)
    comps = components_from_checkpoint(state, str(checkpoint))
    parameters = sum(p.numel() for p in comps.model.parameters())
    card = with_streaming(card_of_checkpoint(state, lambda: parameters), comps)
    card, int8_summary = with_int8(card, comps.model, comps.model_name) if int8 else (card, {})
    desc = json.dumps({**describe(state), "card": card})
    wrapper = LogProbs(comps.model).eval()
    example = (torch.randn(1, comps.features.num_features, EXAMPLE_FRAMES), torch.tensor([EXAMPLE_FRAMES]))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python values in shape arithmetic
        if fmt == "onnx":
            _onnx(wrapper, example, out, desc, int8)
        else:
            traced = torch.jit.trace(wrapper, example, check_trace=False)
            with written_whole(out) as tmp:
                torch.jit.save(traced, str(tmp), _extra_files={f"{META_KEY}.json": desc})
    write_card(out.parent, {**card, "file": f"{out.name} ({fmt}{', int8 weights' if int8 else ''}, exported)"},
               prefix=f"{out.name}.")
    return {"format": fmt, "out": str(out), "bytes": out.stat().st_size, "model": comps.model_name,
            "parameters": parameters, **int8_summary}


def _onnx(wrapper: nn.Module, example: tuple[torch.Tensor, torch.Tensor], out: Path, desc: str, int8: bool) -> None:
    """Export in memory and write the file once, the description added to it (a full-size model is 0.4 GB)."""
    buffer = io.BytesIO()
    torch.onnx.export(wrapper, example, buffer, dynamo=False, opset_version=17,
                      input_names=["features", "lengths"], output_names=["log_probs", "out_lengths"],
                      dynamic_axes={"features": {0: "batch", 2: "frames"}, "lengths": {0: "batch"},
                                    "log_probs": {0: "batch", 1: "out_frames"}, "out_lengths": {0: "batch"}})
    write_onnx(buffer, desc, out, "export --format onnx", int8)


def write_onnx(exported: io.BytesIO, desc: str, out: Path, usage: str, int8: bool = False) -> None:
    """Write the model torch.onnx.export put in `exported` to `out` (its weights quantized with `int8`), with `desc`
    as its metadata (META_KEY) and the CRC-32 of the bytes before the metadata and of `desc` (CRC_KEY).

    The metadata is a second serialized ModelProto after the first (`metadata_tail`): protobuf reads concatenated
    messages as one, merged (repeated fields appended), so the graph is neither parsed nor serialized again."""
    from ..extras import require

    onnx = require("onnx", "export", usage)
    with written_whole(out) as tmp:
        if int8:
            quantize_int8(onnx.load_from_string(exported.getvalue()), tmp)
            crc = 0
            with open(tmp, "rb") as f:
                while chunk := f.read(1 << 22):
                    crc = zlib.crc32(chunk, crc)
        else:
            with open(tmp, "wb") as f:
                f.write(exported.getbuffer())
            crc = zlib.crc32(exported.getbuffer())
        check = json.dumps({"bytes": tmp.stat().st_size, "crc32": zlib.crc32(desc.encode(), crc)})
        with open(tmp, "ab") as f:
            f.write(metadata_tail({META_KEY: desc, CRC_KEY: check}))


def int8_weights(model: nn.Module) -> int:
    """How many of the model's parameters --int8 stores as integers: the weights of its linear layers (ONNX
    MatMul) and LSTMs."""
    return sum(p.numel() for m in model.modules() if isinstance(m, (nn.Linear, nn.LSTM))
               for name, p in m.named_parameters(recurse=False) if name.startswith("weight"))


def with_int8(card: dict[str, Any], model: nn.Module, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Before an --int8 export's work: `card` stating int8 weights, and the export summary's `int8_share` (the share
    of the model's parameters stored as integers). ConfigError without onnxruntime or anything to quantize."""
    from ..extras import require

    require("onnxruntime", "export", "export --int8")
    share = int8_weights(model) / max(1, sum(p.numel() for p in model.parameters()))
    if share == 0:
        raise ConfigError(f"--int8: {name} has no matrix products or LSTMs to quantize (its convolutions and GRUs "
                          "stay float); export it without --int8")
    return {**card, "weights": INT8_WEIGHTS}, {"int8_share": round(share, 4)}


def quantize_int8(model: Any, out: Path) -> None:
    """Write the ONNX `model` (a ModelProto) to `out` with its INT8_OPS' weights int8, per output channel, in 7 bits
    (reduce_range): x86 CPUs without VNNI multiply u8 activations by s8 weights in 16-bit pairs that saturate with
    full-range weights, and an exported file does not know the CPU it will run on."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)  # its advice to run its pre-processing, on the root logger, every call
    try:
        quantize_dynamic(model, out, op_types_to_quantize=list(INT8_OPS), per_channel=True, weight_type=QuantType.QInt8,
                         reduce_range=True)
    finally:
        logging.disable(disabled)
