"""`speechscale info MODEL`: the model card a checkpoint or exported file carries.

    speechscale info runs/demo/checkpoints/best.pt
    speechscale info runs/demo/model.onnx --json
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from .args import model_file


def info(args: argparse.Namespace) -> int:
    from ..export.runtime import card_of_file
    from ..storage.cards import render_markdown

    card = {**card_of_file(args.model), "file": str(args.model)}
    print(json.dumps(card, indent=1) if args.json else render_markdown(card), end="\n" if args.json else "")
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `info` to the subcommand table."""
    i = command(sub, "info", "print a model's card: model, parameters, features, streaming, training data, validation figures")
    i.add_argument("model", type=model_file,
                   help="a checkpoint (.pt), a file of `speechscale export` (.onnx, TorchScript) or a run folder")
    i.add_argument("--json", action="store_true", help="the card as JSON")
    i.set_defaults(func=info)
