"""`speechscale bench convergence`: final held-out WER of each strategy against one process, over seeds."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from .args import int_list, positive


def convergence(args: argparse.Namespace) -> int:
    from ..bench.convergence import STRATEGIES, bench_convergence, summarize
    from ..config import ConfigError, check_choice
    from ..recipe import load_recipe

    strategies = args.strategies.split(",") if args.strategies else list(STRATEGIES)
    for name in strategies:
        check_choice("--strategies", name, STRATEGIES)
    overrides = [f"data.root={args.data_root}", *args.overrides]
    load_recipe(args.config, overrides)  # a bad recipe or override fails here, before any process starts
    try:
        runs = bench_convergence(args.config, args.procs, args.seeds, args.out, overrides, strategies, args.epochs,
                                 args.parallel, args.single_threads,
                                 start_within=None if args.start_within is None else 60 * args.start_within,
                                 report=lambda r: print(json.dumps({k: v for k, v in r.items() if k != "val"}),
                                                        flush=True))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for row in summarize(runs):
        print(json.dumps({"summary": row}), flush=True)
    return 0


def register(bsub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `bench convergence` to the bench subcommands."""
    bc = command(bsub, "convergence", "each strategy's final held-out WER against one process at equal epochs, "
                 "over seeds (resumable: finished runs are kept in OUT/runs.jsonl)")
    bc.add_argument("--config", default="configs/fsdd.yaml", help="the recipe every run trains")
    bc.add_argument("--data-root", default="../shared/data/fsdd", help="the recipe's data.root")
    bc.add_argument("--procs", type=positive(int), default=4, help="learners of each distributed run")
    bc.add_argument("--seeds", type=int_list, default=[1, 2, 3], help="comma-separated trainer.seed values")
    bc.add_argument("--strategies", default=None, help="comma-separated (default: single and every strategy)")
    bc.add_argument("--epochs", type=positive(int), default=None, help="epochs per run (default: the recipe's)")
    bc.add_argument("--parallel", type=positive(int), default=1,
                    help="runs at a time (a machine with cores to spare: procs x parallel <= cores)")
    bc.add_argument("--single-threads", type=positive(int), default=1, help="threads of the one-process run")
    bc.add_argument("--start-within", type=positive(float), default=None, metavar="MINUTES",
                    help="start no run after this many minutes (runs under way finish; the rest wait for the next "
                    "call): fits a session's time")
    bc.add_argument("--out", default="runs/bench_convergence", help="folder for runs.jsonl and the runs")
    bc.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every run")
    bc.set_defaults(func=convergence)
