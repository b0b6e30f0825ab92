"""`speechscale train`: a YAML recipe plus overrides, checked, then the training loop."""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable


def train(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..config_dump import dump_config
    from ..recipe import load_recipe
    from ..training.trainer import train as run_training

    if args.print_config:
        print(dump_config(load_recipe(args.config, args.overrides)), end="")
        return 0
    if args.config is None:
        raise ConfigError("--config is required to train, e.g. --config demo (`speechscale recipes` lists the built-in "
                          "recipes; a YAML file works too) "
                          "(--print-config shows every key)")
    cfg = load_recipe(args.config, args.overrides)
    summary = run_training(cfg)
    if int(os.environ.get("RANK", 0)) == 0:
        print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, (list, dict))}))
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `train` to the subcommand table."""
    t = command(sub, "train", "train a model from a YAML config")
    t.add_argument("--config", default=None,
                   help="a built-in recipe's name (`speechscale recipes`) or a YAML file, e.g. demo or my.yaml")
    t.add_argument("--print-config", action="store_true",
                   help="print the resolved config (every key, with its comment) as YAML and exit")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, values in YAML, e.g. trainer.max_steps=100 augment.speed=[0.9,1.1]")
    t.set_defaults(func=train)
