"""`speechscale bench infer`: batched inference RTFx, eager against a CUDA graph and onnxruntime, as JSON lines."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from .args import choice, choice_list, non_negative, positive


def infer(args: argparse.Namespace) -> int:
    from ..bench.audio import checked_manifest
    from ..bench.infer import bench_infer
    from ..config import ConfigError
    from ..models.registry import check_model_name
    from ..training.precision import resolve_device

    models = args.model.split(",")
    for model in models:  # every name checked before any work
        check_model_name(model, where="--model")
    if "graphed" in args.modes and resolve_device(args.device).type != "cuda":
        raise ConfigError("bench infer: graphed needs a CUDA device; use --modes eager,onnx on the CPU")
    for row in bench_infer(models, args.batch_size, args.seconds, args.steps, args.warmup, tuple(args.modes),
                           args.device, args.precision,
                           str(checked_manifest(args.manifest)) if args.manifest else None, args.threads):
        print(json.dumps(row), flush=True)
    return 0


def _modes() -> tuple[str, ...]:
    from ..bench.infer import MODES  # imports torch: asked only when --modes is given

    return MODES


def _precisions() -> tuple[str, ...]:
    from ..bench.infer import DTYPES

    return tuple(DTYPES)


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    bi = command(sub, "infer", "batched inference RTFx: eager, a CUDA graph and onnxruntime side by side, as JSON")
    bi.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bi.add_argument("--batch-size", type=positive(int), default=8, help="utterances per batch")
    bi.add_argument("--seconds", type=positive(float), default=5.0, help="seconds per utterance")
    bi.add_argument("--steps", type=positive(int), default=5, help="timed batches per mode")
    bi.add_argument("--warmup", type=non_negative(int), default=2, help="untimed batches per mode first")
    bi.add_argument("--modes", type=choice_list(_modes), default=["eager", "onnx"],
                    help="eager, graphed (CUDA), onnx and onnx-int8 (export --int8), comma-separated")
    bi.add_argument("--device", default="auto", help="auto | cpu | cuda")
    bi.add_argument("--precision", default="fp32", type=choice(_precisions),
                    help="autocast precision of eager and graphed on a GPU (the CPU and onnx run fp32)")
    bi.add_argument("--manifest", default=None, help="real audio to cut batches from (default: synthesized noise)")
    bi.add_argument("--threads", type=non_negative(int), default=0, help="torch threads (0 = torch's default)")
    bi.set_defaults(func=infer)
