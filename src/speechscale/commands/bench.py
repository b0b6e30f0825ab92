"""`speechscale bench ...`: every benchmark's flags; each prints JSON lines (bench/ holds the measurements)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from ..models.rnn import BIDIRECTIONAL_SCHEMES
from . import bench_convergence, bench_infer, bench_serving
from .args import Parser, choice_list, int_list, positive, yaml_mapping


def train(args: argparse.Namespace) -> int:
    import torch

    from ..bench.throughput import bench_modes, bench_train, default_manifest
    from ..models.registry import model_config

    manifest = default_manifest(args.manifest)
    precisions = bench_modes(args.precision.split(","), args.graphs, args.rnn_scheme,
                             args.device != "cpu" and torch.cuda.is_available())
    overrides = yaml_mapping(args.model_overrides, "--model-overrides")
    models = args.model.split(",")
    for model in models:  # every name and override checked before any work
        model_config(model, overrides)
    for model in models:
        for res in bench_train(model, args.batch_size, args.seconds, args.steps, args.warmup, manifest or None,
                               args.threads, overrides=overrides, precisions=precisions, device=args.device,
                               peak_tflops=args.peak_tflops, compile_model=args.compile):
            print(json.dumps(res), flush=True)
    return 0


def scaling(args: argparse.Namespace) -> int:
    from ..bench.scaling import bench_scaling
    from ..bench.throughput import default_manifest
    from ..models.registry import check_model_name

    procs = tuple(int(x) for x in args.procs.split(","))
    models = args.model.split(",")
    for model in models:  # before any process is spawned
        check_model_name(model, where="--model")
    for model in models:
        for res in bench_scaling(model, procs, args.batch_size, args.seconds, args.steps, args.warmup,
                                 args.threads, default_manifest(args.manifest), args.device):
            print(json.dumps(res), flush=True)
    return 0


def straggler(args: argparse.Namespace) -> int:
    from ..bench.straggler import STRATEGY_RUNS, bench_straggler, summarize
    from ..config import check_choice
    from ..recipe import load_recipe

    strategies = args.strategies.split(",") if args.strategies else list(STRATEGY_RUNS)
    for name in strategies:
        check_choice("--strategies", name, tuple(STRATEGY_RUNS))
    overrides = [f"data.root={args.data_root}", *args.overrides]
    load_recipe(args.config, overrides)  # a bad recipe or override fails here, before any process starts
    runs = bench_straggler(args.procs, args.epochs, args.slowdown, args.config, args.out, overrides, strategies,
                           report=lambda res: print(json.dumps({k: v for k, v in res.items() if k != "val"}),
                                                    flush=True),
                           seeds=args.seeds, target_wer=args.target_wer)
    if len(args.seeds or []) > 1 or args.target_wer is not None:
        for row in summarize(runs):
            print(json.dumps({"summary": row}), flush=True)
    return 0


def all_benches(args: argparse.Namespace) -> int:
    from ..bench import suite, tables

    only = args.only.split(",") if args.only else (list(suite.GPU_BENCHES) if args.gpu else None)
    known = suite.BENCHES + suite.GPU_BENCHES + suite.LONG_BENCHES
    for name in only or []:
        if name not in known:
            raise SystemExit(f"speechscale bench all: --only {name}: unknown; choose from {', '.join(known)}")
    out = Path(args.out)
    if not args.tables_only and any(n in suite.GPU_BENCHES for n in only or []):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("speechscale bench all: the gpu-* benches need a CUDA GPU, and torch sees none")
    if args.tables_only:
        docs = suite.load_docs(out, tuple(only) if only else
                               suite.BENCHES + suite.LONG_BENCHES + suite.EXTERNAL_BENCHES)
        if not docs:
            raise SystemExit(f"speechscale bench all: {out}: no bench JSON files to render")
    else:
        docs = suite.run_all(out, only, report=lambda name, secs: print(f"bench {name}: {secs:.0f} s -> "
                                                                         f"{out / (name + '.json')}", flush=True))
    if args.benchmarks:
        tables.update(Path(args.benchmarks), docs)
        print(f"updated {args.benchmarks}: {', '.join(docs)}")
        from ..bench import summary

        areas = summary.update(Path(args.benchmarks), out.parent)  # docs/figures/{bench-all,gpu} -> docs/figures
        if areas:
            print(f"updated {args.benchmarks}: summary of {', '.join(areas)}")
        if args.tables_only and not args.gpu and (out.parent / "loso").is_dir():
            _rerender_loso(out.parent / "loso", args.benchmarks)
        runs = tables.gpu_adpsgd_docs(out / "adpsgd") if args.gpu else {}  # docs/figures/gpu/adpsgd.sh's runs
        if runs and tables.update_gpu_adpsgd(Path(args.benchmarks), runs):
            print(f"updated {args.benchmarks}: gpu-adpsgd ({len(runs)} runs)")
    failed = [k for k, v in docs.items() if isinstance(v["results"], dict) and "error" in v["results"]]
    if failed:
        print(f"failed: {', '.join(failed)} (see their JSON files)", file=sys.stderr)
    return 1 if failed else 0


def features(args: argparse.Namespace) -> int:
    from ..bench.features import bench_features

    print(json.dumps(bench_features(args.manifest, args.sample_rate, args.kind, args.limit, args.repeats)))
    return 0


def loader(args: argparse.Namespace) -> int:
    import tempfile

    from ..bench.loader import bench_loader, flac_corpus

    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        workers = [-1]
    if min(workers) < 0:
        raise SystemExit(f"speechscale bench loader: --workers={args.workers} must be counts >= 0, e.g. 0,1,2")
    augment = {"off": [False], "on": [True], "both": [False, True]}[args.augment]
    features = {"loader": ("loader",), "step": ("step",), "both": ("loader", "step")}[args.features]
    fsdd = Path("../shared/data/fsdd/manifest.jsonl")  # relative to the project, as the recipes' data
    source = Path(args.manifest) if args.manifest else fsdd
    if not source.is_file():
        raise SystemExit(f"speechscale bench loader: {source}: no such manifest")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = args.manifest or flac_corpus(fsdd, tmp, args.sample_rate, args.limit, args.clip_seconds)
        sources = []
        if args.source in ("files", "both"):
            sources.append(str(manifest))
        if args.source in ("shards", "both"):
            from ..data.shards import write_shards

            write_shards(str(manifest), Path(tmp) / "shards", shard_size=args.shard_size)
            sources.append(str(Path(tmp) / "shards" / "index.jsonl"))
        for src in sources:
            for res in bench_loader(src, workers, augment, args.sample_rate, args.batch_seconds, features):
                print(json.dumps(res), flush=True)
    return 0


def export(args: argparse.Namespace) -> int:
    from ..bench.export import bench_export

    for row in bench_export(args.model.split(","), args.seconds, args.repeats, threads=args.threads):
        print(json.dumps(row), flush=True)
    return 0


def serve(args: argparse.Namespace) -> int:
    from ..bench.serve import bench_serve

    levels = [int(x) for x in args.concurrency.split(",")]
    for row in bench_serve(args.checkpoint, args.seconds, levels, args.requests):
        print(json.dumps(row), flush=True)
    return 0


def memory(args: argparse.Namespace) -> int:
    import tempfile

    from ..bench.memory import bench_memory

    sources = ["shards", "manifest"] if args.source == "both" else [args.source]
    with tempfile.TemporaryDirectory() as tmp:
        for row in bench_memory(args.work_dir or tmp, args.utterances, sources, args.batches):
            print(json.dumps(row), flush=True)
    return 0


def loso(args: argparse.Namespace) -> int:
    import time

    from ..bench.harness import write_json
    from ..bench.loso import SPEAKERS, FoldConflict, bench_loso
    from ..recipe import load_recipe

    if args.rescore or args.adapt:
        return _loso_rescore(args)
    held_out = tuple(args.held_out.split(",")) if args.held_out else SPEAKERS
    for s in held_out:
        if s not in SPEAKERS:
            raise SystemExit(f"speechscale bench fsdd-loso: --held-out {s}: unknown; choose from {', '.join(SPEAKERS)}")
    load_recipe(args.config, ["data.root=.", *args.overrides])  # a bad recipe or override fails here, before training
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    extra = Path(args.extra_train) if args.extra_train else None
    if extra is not None and not extra.is_file():
        raise SystemExit(f"speechscale bench fsdd-loso: --extra-train {extra}: manifest not found")
    try:  # a fold folder of another recipe is found before any training
        res = bench_loso(args.config, Path(args.work) / args.name, args.overrides, held_out=held_out,
                         report=lambda row: print(json.dumps(row), flush=True), extra_train=extra)
    except FoldConflict as e:
        raise SystemExit(f"speechscale bench fsdd-loso: {e}") from None
    settings = {"config": args.config, "overrides": args.overrides, "held_out": list(held_out),
                **({"extra_train": str(extra)} if extra else {})}
    doc = write_json(out / f"{args.name}.json", res, seconds=round(time.perf_counter() - started, 1),
                     settings=settings)
    print(json.dumps({"summary": res["summary"]}), flush=True)
    if args.benchmarks:
        _rerender_loso(out, args.benchmarks)
    return 0 if doc else 1


def _rerender_loso(folder: Path, benchmarks: str) -> None:
    """Rewrite the LOSO block of `benchmarks` from every result JSON in `folder`."""
    from ..bench import loso_tables

    docs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    loso_tables.update_loso(Path(benchmarks), docs)
    print(f"updated {benchmarks}: the LOSO table ({', '.join(docs)})")


def _loso_rescore(args: argparse.Namespace) -> int:
    """`bench fsdd-loso --rescore` / `--adapt`: score OUT/NAME.json's folds again from their checkpoints under
    WORK/NAME, or adapt each to its held-out speaker (bench/adapt.py) and score that."""
    from ..bench.harness import provenance

    flag = "--adapt" if args.adapt else "--rescore"
    path = Path(args.out) / f"{args.name}.json"
    if not path.is_file():
        raise SystemExit(f"speechscale bench fsdd-loso {flag}: {path}: no result to {flag[2:]}")
    doc = json.loads(path.read_text())
    try:
        if args.adapt:
            from ..bench.adapt import adapt_loso

            res = adapt_loso(doc["results"], Path(args.work) / args.name, args.adapt_epochs)
        else:
            from ..bench.loso import rescore_loso

            res = rescore_loso(doc["results"], Path(args.work) / args.name)
    except (FileNotFoundError, ValueError) as e:  # no checkpoint; a fold --adapt cannot read
        raise SystemExit(f"speechscale bench fsdd-loso {flag}: {e}") from None
    doc = {**doc, "results": res, ("adapted" if args.adapt else "rescored"): provenance()}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({"summary": res["summary"]}), flush=True)
    if args.benchmarks:
        _rerender_loso(path.parent, args.benchmarks)
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `bench` and its benchmarks to the subcommand table."""
    from ..data.features import FEATURE_KINDS

    b = command(sub, "bench", "benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True, metavar="BENCHMARK", parser_class=Parser)
    ba = command(bsub, "all", "every bench (about 7 minutes on 2 cores): JSON + PNG per bench, BENCHMARKS.md tables")
    ba.add_argument("--out", required=True, help="folder for NAME.json and NAME.png")
    ba.add_argument("--only", default=None, help="comma-separated subset of the benches (default: all; see docs/benchmarks)")
    ba.add_argument("--benchmarks", default="BENCHMARKS.md",
                    help="the file whose generated tables are rewritten ('' = leave it alone)")
    ba.add_argument("--gpu", action="store_true",
                    help="the GPU benches instead (gpu-train*, gpu-graphs*, gpu-recipes) on a CUDA GPU")
    ba.add_argument("--tables-only", action="store_true",
                    help="run nothing: re-render the tables from the JSON files already in --out")
    ba.set_defaults(func=all_benches)
    bt = command(bsub, "train", "steady-state training throughput, as JSON")
    bt.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bt.add_argument("--model-overrides", default=None,
                    help="YAML mapping of preset fields to change, e.g. '{rnn_layers: 4, rnn_hidden: 1024}'")
    bt.add_argument("--batch-size", type=positive(int), default=8, help="utterances per batch")
    bt.add_argument("--seconds", type=positive(float), default=2.0, help="seconds per utterance")
    bt.add_argument("--steps", type=positive(int), default=5, help="timed steps per precision")
    bt.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    bt.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    bt.add_argument("--manifest", default=None, help="real audio to cut batches from ('' for noise)")
    bt.add_argument("--precision", default="fp32",
                    help="fp32,tf32,bf16,fp16: modes run side by side, ratios vs fp32 (on a GPU fp32 is TF32 off); "
                    "a whole mode (bf16+graphs@stacked) runs as given")
    bt.add_argument("--graphs", default="off", choices=["off", "on", "both"],
                    help="CUDA graphs: replay the model per fixed batch shape; both: eager and graphed side by side")
    bt.add_argument("--rnn-scheme", type=choice_list(BIDIRECTIONAL_SCHEMES), default=[],
                    help="graphed modes: how recurrent layers run both directions, each a mode (default: the layers')")
    bt.add_argument("--device", default="auto", help="auto | cpu | cuda")
    bt.add_argument("--peak-tflops", type=positive(float), default=None,
                    help="device peak for MFU (default: a matmul measured in each mode's dtype)")
    bt.add_argument("--compile", nargs="?", const="default", default=False,
                    choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
                    help="torch.compile the model (optionally a mode: reduce-overhead adds CUDA graphs)")
    bt.set_defaults(func=train)
    bs = command(bsub, "scaling", "data-parallel throughput with 1..N processes, comm time and bytes, as JSON")
    bs.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bs.add_argument("--procs", default="1,2", help="process counts, comma-separated")
    bs.add_argument("--batch-size", type=positive(int), default=8, help="utterances per batch, per process")
    bs.add_argument("--seconds", type=positive(float), default=2.0, help="seconds per utterance")
    bs.add_argument("--steps", type=positive(int), default=5, help="timed steps")
    bs.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    bs.add_argument("--threads", type=positive(int), default=1, help="threads per process")
    bs.add_argument("--manifest", default=None, help="real audio to cut batches from ('' for noise)")
    bs.add_argument("--device", default="auto", help="auto | cpu (GPUs: one process per GPU)")
    bs.set_defaults(func=scaling)
    bst = command(bsub, "straggler", "each strategy with and without one slow learner, real training runs")
    bst.add_argument("--procs", type=positive(int), default=4, help="learners (CPU processes, one thread each)")
    bst.add_argument("--epochs", type=positive(int), default=4, help="epochs per run")
    bst.add_argument("--slowdown", type=positive(float), default=2.0, help="how many times slower the last rank is")
    bst.add_argument("--config", default="yesno", help="the recipe every run trains (a built-in name or a file)")
    bst.add_argument("--data-root", default="../shared/data/yesno", help="the recipe's data.root")
    bst.add_argument("--strategies", default=None, help="comma-separated (default: all)")
    bst.add_argument("--seeds", type=int_list, default=None, help="comma-separated trainer.seed values, one run each")
    bst.add_argument("--target-wer", type=float, default=None,
                     help="also time each run to its first validation WER at or below this (e.g. 0.05)")
    bst.add_argument("--out", default="runs/bench_straggler", help="folder for results.json and straggler.png")
    bst.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every run")
    bst.set_defaults(func=straggler)
    bench_convergence.register(bsub, command)
    bench_infer.register(bsub, command)
    bench_serving.register(bsub, command)
    bf = command(bsub, "features", "cost of decoding + resampling + features per second of audio, as JSON")
    bf.add_argument("--manifest", required=True, help="the audio to read (JSONL manifest)")
    bf.add_argument("--sample-rate", type=positive(int), default=16000, help="rate the audio is resampled to")
    bf.add_argument("--kind", default="spectrogram", choices=FEATURE_KINDS, help="feature kind")
    bf.add_argument("--limit", type=positive(int), default=300, help="utterances to read")
    bf.add_argument("--repeats", type=positive(int), default=2, help="passes over them (the best counts)")
    bf.set_defaults(func=features)
    bl = command(bsub, "loader", "training DataLoader throughput (x real time) by worker count, as JSON lines")
    bl.add_argument("--manifest", default=None,
                    help="the audio to load (default: ../shared/data/fsdd written as 16 kHz flac first)")
    bl.add_argument("--workers", default="0,1,2", help="comma-separated worker counts (0 = the main process)")
    bl.add_argument("--augment", default="both", choices=["off", "on", "both"], help="with augmentation or not")
    bl.add_argument("--sample-rate", type=positive(int), default=16000, help="rate the audio is resampled to")
    bl.add_argument("--limit", type=positive(int), default=400, help="utterances of the default corpus")
    bl.add_argument("--clip-seconds", type=float, default=0.0,
                    help="join FSDD clips into utterances at least this long (0 = the 0.5 s clips as they are)")
    bl.add_argument("--source", default="files", choices=["files", "shards", "both"],
                    help="loose files, tar shards of the same files, or both")
    bl.add_argument("--shard-size", type=positive(int), default=100, help="utterances per shard (--source shards)")
    bl.add_argument("--batch-seconds", type=positive(float), default=60.0, help="padded audio seconds per batch")
    bl.add_argument("--features", default="loader", choices=["loader", "step", "both"],
                    help="features computed in the loader, or in the step (features.device: the loader ships audio)")
    bl.set_defaults(func=loader)
    be = command(bsub, "export", "inference latency per clip: PyTorch vs ONNX Runtime vs TorchScript, as JSON")
    be.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    be.add_argument("--seconds", type=positive(float), default=5.0, help="clip length")
    be.add_argument("--repeats", type=positive(int), default=20, help="timed rounds (after 3 warm-up rounds)")
    be.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    be.set_defaults(func=export)
    bv = command(bsub, "serve", "transcription service: requests/s and p50/p95 latency by client concurrency")
    bv.add_argument("--checkpoint", required=True, help="the checkpoint to serve")
    bv.add_argument("--seconds", type=positive(float), default=5.0, help="clip length (real speech, JFK)")
    bv.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    bv.add_argument("--requests", type=positive(int), default=64, help="requests per level")
    bv.set_defaults(func=serve)
    bm = command(bsub, "memory", "loader process memory (RSS, measured) against corpus size: shards vs a manifest")
    bm.add_argument("--utterances", type=lambda x: [int(v) for v in x.split(",")], default=[10000, 100000],
                    help="comma-separated corpus sizes (a synthetic index over real shards)")
    bm.add_argument("--source", default="both", choices=["shards", "manifest", "both"], help="what to measure")
    bm.add_argument("--batches", type=positive(int), default=50, help="batches to read after planning")
    bm.add_argument("--work-dir", default=None, help="where the corpus is written (default: a temporary folder)")
    bm.set_defaults(func=memory)
    bo = command(bsub, "fsdd-loso", "leave-one-speaker-out on FSDD: train on 3 speakers, score the 4th (last.pt), "
                 "greedy and lexicon; JSON + the BENCHMARKS.md table")
    bo.add_argument("--config", default="configs/fsdd.yaml", help="the recipe every fold trains")
    bo.add_argument("--name", required=True, help="the row's name: OUT/NAME.json")
    bo.add_argument("--out", default="docs/figures/loso", help="folder for NAME.json")
    bo.add_argument("--work", default="runs/loso", help="the folds' runs go to WORK/NAME/SPEAKER")
    bo.add_argument("--held-out", default=None, help="comma-separated speakers to hold out (default: all four)")
    bo.add_argument("--extra-train", default=None, help="a manifest every fold also trains on (e.g. `speechscale "
                    "synth --text digits --sample-rate 8000`); never scored")
    bo.add_argument("--benchmarks", default="BENCHMARKS.md",
                    help="re-render its LOSO table from every JSON in --out ('' = leave it alone)")
    bo.add_argument("--rescore", action="store_true", help="train nothing: score OUT/NAME.json's folds again "
                    "from their last.pt under WORK/NAME with today's decoders (earlier figures kept as `before`)")
    bo.add_argument("--adapt", action="store_true", help="train no fold: adapt each fold's last.pt under WORK/NAME "
                    "to its held-out speaker without labels (it labels half of the speaker's clips itself, is "
                    "fine-tuned on them, and scores the other half) and add the figures to OUT/NAME.json")
    bo.add_argument("--adapt-epochs", type=positive(int), default=3, help="--adapt: fine-tuning epochs")
    bo.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every fold")
    bo.set_defaults(func=loso)
