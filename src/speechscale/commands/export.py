"""`speechscale export`: a checkpoint's acoustic model as ONNX or TorchScript."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from .args import check_not_an_input, model_file, out_file, positive


def export(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..export.exporter import export_model

    check_not_an_input(args.out, [args.checkpoint], "--out")
    if args.streaming:
        from ..export.stream_step import STEP_FRAMES, export_stream_step

        if args.format != "onnx":
            raise ConfigError("--streaming exports the streaming step as ONNX: use --format onnx")
        print(json.dumps(export_stream_step(args.checkpoint, args.out, args.chunk or STEP_FRAMES, args.int8)))
        return 0
    if args.chunk is not None:  # a whole-utterance export has no step to size
        raise ConfigError("--chunk goes with --streaming (the streaming step's feature frames)")
    print(json.dumps(export_model(args.checkpoint, args.format, args.out, args.int8)))
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `export` to the subcommand table."""
    x = command(sub, "export", "a checkpoint's acoustic model as ONNX or TorchScript (dynamic batch and time)")
    x.add_argument("--checkpoint", required=True, type=model_file,
                   help="a speechscale checkpoint (.pt), local path or URL, or a run folder (its best.pt)")
    x.add_argument("--format", required=True, choices=["onnx", "torchscript"], help="the file format")
    x.add_argument("--out", required=True, type=out_file, help="the file to write (e.g. model.onnx, model.ts)")
    x.add_argument("--streaming", action="store_true",
                   help="a streaming model's step instead (feature chunk + state in, logits + state out), for "
                        "`transcribe --stream --checkpoint FILE.onnx`")
    x.add_argument("--chunk", type=positive(int), default=None,
                   help="--streaming: feature frames per step (a multiple of the front end's time stride; default 32)")
    x.add_argument("--int8", action="store_true",
                   help="ONNX: the weights of matrix products and LSTMs as 8-bit integers (a smaller file, faster on "
                        "the CPU where those products dominate; convolutions and GRUs stay float)")
    x.set_defaults(func=export)
