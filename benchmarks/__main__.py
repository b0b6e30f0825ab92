"""How this repository makes and renders its own figures: not part of the wheel, run from a checkout.

    python -m benchmarks all --tables-only --out docs/figures/bench-all     # BENCHMARKS.md from the committed JSON
    python -m benchmarks all --only recipes --out OUT                        # run benches, write JSON + PNG + tables
    python -m benchmarks fsdd-loso --name NAME [KEY=VALUE ...]               # leave-one-speaker-out on FSDD
    python -m benchmarks convergence [--seeds 1,2,3]                         # each strategy's WER against one process
    python -m benchmarks test-time --where TEXT                              # CI's check timed on a fresh clone

Every user-facing bench (`speechscale bench train|scaling|loader|...`) stays in the package; this folder holds the
protocols (suite, recipes, LOSO, adaptation, convergence, shard seeds) and the BENCHMARKS.md renderers.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from speechscale.commands.args import Parser, int_list, positive


def all_benches(args: argparse.Namespace) -> int:
    from . import suite, tables

    only = args.only.split(",") if args.only else (list(suite.GPU_BENCHES) if args.gpu else None)
    known = suite.BENCHES + suite.GPU_BENCHES + suite.LONG_BENCHES
    for name in only or []:
        if name not in known:
            raise SystemExit(f"benchmarks all: --only {name}: unknown; choose from {', '.join(known)}")
    out = Path(args.out)
    if not args.tables_only and any(n in suite.GPU_BENCHES for n in only or []):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("benchmarks all: the gpu-* benches need a CUDA GPU, and torch sees none")
    if args.tables_only:
        docs = suite.load_docs(out, tuple(only) if only else
                               suite.BENCHES + suite.LONG_BENCHES + suite.EXTERNAL_BENCHES)
        if not docs:
            raise SystemExit(f"benchmarks all: {out}: no bench JSON files to render")
    else:
        docs = suite.run_all(out, only, report=lambda name, secs: print(f"bench {name}: {secs:.0f} s -> "
                                                                         f"{out / (name + '.json')}", flush=True))
    if args.benchmarks_md:
        tables.update(Path(args.benchmarks_md), docs)
        print(f"updated {args.benchmarks_md}: {', '.join(docs)}")
        from . import summary

        areas = summary.update(Path(args.benchmarks_md), out.parent)  # docs/figures/{bench-all,gpu} -> docs/figures
        if areas:
            print(f"updated {args.benchmarks_md}: summary of {', '.join(areas)}")
        if args.tables_only and not args.gpu and (out.parent / "loso").is_dir():
            _rerender_loso(out.parent / "loso", args.benchmarks_md)
        runs = tables.gpu_adpsgd_docs(out / "adpsgd") if args.gpu else {}  # docs/figures/gpu/adpsgd.sh's runs
        if runs and tables.update_gpu_adpsgd(Path(args.benchmarks_md), runs):
            print(f"updated {args.benchmarks_md}: gpu-adpsgd ({len(runs)} runs)")
    failed = [k for k, v in docs.items() if isinstance(v["results"], dict) and "error" in v["results"]]
    if failed:
        print(f"failed: {', '.join(failed)} (see their JSON files)", file=sys.stderr)
    return 1 if failed else 0


def loso(args: argparse.Namespace) -> int:
    import time

    from speechscale.bench.harness import write_json
    from speechscale.recipe import load_recipe

    from .loso import SPEAKERS, FoldConflict, bench_loso

    if args.rescore or args.adapt:
        return _loso_rescore(args)
    held_out = tuple(args.held_out.split(",")) if args.held_out else SPEAKERS
    for s in held_out:
        if s not in SPEAKERS:
            raise SystemExit(f"benchmarks fsdd-loso: --held-out {s}: unknown; choose from {', '.join(SPEAKERS)}")
    load_recipe(args.config, ["data.root=.", *args.overrides])  # a bad recipe or override fails here, before training
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    extra = Path(args.extra_train) if args.extra_train else None
    if extra is not None and not extra.is_file():
        raise SystemExit(f"benchmarks fsdd-loso: --extra-train {extra}: manifest not found")
    try:  # a fold folder of another recipe is found before any training
        res = bench_loso(args.config, Path(args.work) / args.name, args.overrides, held_out=held_out,
                         report=lambda row: print(json.dumps(row), flush=True), extra_train=extra)
    except FoldConflict as e:
        raise SystemExit(f"benchmarks fsdd-loso: {e}") from None
    settings = {"config": args.config, "overrides": args.overrides, "held_out": list(held_out),
                **({"extra_train": str(extra)} if extra else {})}
    doc = write_json(out / f"{args.name}.json", res, seconds=round(time.perf_counter() - started, 1),
                     settings=settings)
    print(json.dumps({"summary": res["summary"]}), flush=True)
    if args.benchmarks_md:
        _rerender_loso(out, args.benchmarks_md)
    return 0 if doc else 1


def _rerender_loso(folder: Path, benchmarks: str) -> None:
    """Rewrite the LOSO block of `benchmarks` from every result JSON in `folder`."""
    from . import loso_tables

    docs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    loso_tables.update_loso(Path(benchmarks), docs)
    print(f"updated {benchmarks}: the LOSO table ({', '.join(docs)})")


def _loso_rescore(args: argparse.Namespace) -> int:
    """`benchmarks fsdd-loso --rescore` / `--adapt`: score OUT/NAME.json's folds again from their checkpoints under
    WORK/NAME, or adapt each to its held-out speaker (bench/adapt.py) and score that."""
    from speechscale.bench.harness import provenance

    flag = "--adapt" if args.adapt else "--rescore"
    path = Path(args.out) / f"{args.name}.json"
    if not path.is_file():
        raise SystemExit(f"benchmarks fsdd-loso {flag}: {path}: no result to {flag[2:]}")
    doc = json.loads(path.read_text())
    try:
        if args.adapt:
            from .adapt import adapt_loso

            res = adapt_loso(doc["results"], Path(args.work) / args.name, args.adapt_epochs)
        else:
            from .loso import rescore_loso

            res = rescore_loso(doc["results"], Path(args.work) / args.name)
    except (FileNotFoundError, ValueError) as e:  # no checkpoint; a fold --adapt cannot read
        raise SystemExit(f"benchmarks fsdd-loso {flag}: {e}") from None
    doc = {**doc, "results": res, ("adapted" if args.adapt else "rescored"): provenance()}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({"summary": res["summary"]}), flush=True)
    if args.benchmarks_md:
        _rerender_loso(path.parent, args.benchmarks_md)
    return 0


def convergence(args: argparse.Namespace) -> int:
    from speechscale.config import ConfigError, check_choice
    from speechscale.recipe import load_recipe

    from .convergence import STRATEGIES, bench_convergence, summarize

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


def test_time(args: argparse.Namespace) -> int:
    """Time CI's check on a fresh clone (unless --render-only), record it and restate docs/development.md's
    paragraph from the newest record."""
    from . import test_time as tt

    if not args.render_only:
        record = tt.run_fresh_clone(args.where)
        print(json.dumps({k: v for k, v in record.items() if k != "slowest"}), flush=True)
        print(f"recorded in {tt.append(record)}")
        if record["returncode"]:
            print(record.get("tail", ""), file=sys.stderr)
            return 1
    changed = tt.update(Path(args.doc), tt.newest())
    print(f"{args.doc}: {'updated' if changed else 'unchanged'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """`python -m benchmarks all|fsdd-loso|convergence`."""
    p = Parser(prog="benchmarks", description="This repository's figures: run the protocols, render BENCHMARKS.md.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    def command(parent: Any, name: str, help: str) -> argparse.ArgumentParser:
        return parent.add_parser(name, help=help, description=help)

    ba = command(sub, "all", "every bench (about 7 minutes on 2 cores): JSON + PNG per bench, BENCHMARKS.md tables")
    ba.add_argument("--out", required=True, help="folder for NAME.json and NAME.png")
    ba.add_argument("--only", default=None, help="comma-separated subset of the benches (default: all; see docs/benchmarks)")
    ba.add_argument("--benchmarks", dest="benchmarks_md", default="BENCHMARKS.md",
                    help="the file whose generated tables are rewritten ('' = leave it alone)")
    ba.add_argument("--gpu", action="store_true",
                    help="the GPU benches instead (gpu-train*, gpu-graphs*, gpu-recipes) on a CUDA GPU")
    ba.add_argument("--tables-only", action="store_true",
                    help="run nothing: re-render the tables from the JSON files already in --out")
    ba.set_defaults(func=all_benches)
    bo = command(sub, "fsdd-loso", "leave-one-speaker-out on FSDD: train on 3 speakers, score the 4th (last.pt), "
                 "greedy and lexicon; JSON + the BENCHMARKS.md table")
    bo.add_argument("--config", default="configs/fsdd.yaml", help="the recipe every fold trains")
    bo.add_argument("--name", required=True, help="the row's name: OUT/NAME.json")
    bo.add_argument("--out", default="docs/figures/loso", help="folder for NAME.json")
    bo.add_argument("--work", default="runs/loso", help="the folds' runs go to WORK/NAME/SPEAKER")
    bo.add_argument("--held-out", default=None, help="comma-separated speakers to hold out (default: all four)")
    bo.add_argument("--extra-train", default=None, help="a manifest every fold also trains on (e.g. `speechscale "
                    "synth --text digits --sample-rate 8000`); never scored")
    bo.add_argument("--benchmarks", dest="benchmarks_md", default="BENCHMARKS.md",
                    help="re-render its LOSO table from every JSON in --out ('' = leave it alone)")
    bo.add_argument("--rescore", action="store_true", help="train nothing: score OUT/NAME.json's folds again "
                    "from their last.pt under WORK/NAME with today's decoders (earlier figures kept as `before`)")
    bo.add_argument("--adapt", action="store_true", help="train no fold: adapt each fold's last.pt under WORK/NAME "
                    "to its held-out speaker without labels (it labels half of the speaker's clips itself, is "
                    "fine-tuned on them, and scores the other half) and add the figures to OUT/NAME.json")
    bo.add_argument("--adapt-epochs", type=positive(int), default=3, help="--adapt: fine-tuning epochs")
    bo.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every fold")
    bo.set_defaults(func=loso)
    bc = command(sub, "convergence", "each strategy's final held-out WER against one process at equal epochs, "
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
    bt = command(sub, "test-time", "CI's check (.ci/run) timed on a fresh clone of HEAD: one JSON line into "
                 "docs/figures/test-time/, and docs/development.md's paragraph restated from the newest run")
    bt.add_argument("--where", default="machine otherwise idle", help="what else ran, for the record")
    bt.add_argument("--render-only", action="store_true", help="run nothing: restate the paragraph")
    bt.add_argument("--doc", default="docs/development.md", help="the file whose test-time paragraph is rewritten")
    bt.set_defaults(func=test_time)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one workshop command; a bad flag, recipe or file is one line on stderr, as the CLI reports it."""
    from speechscale.cli import report

    from .checkout import pin_commit

    args = build_parser().parse_args(argv)
    pin_commit()
    try:
        return args.func(args)
    except Exception as e:
        return report(f"benchmarks {args.command}", e)


if __name__ == "__main__":
    sys.exit(main())
