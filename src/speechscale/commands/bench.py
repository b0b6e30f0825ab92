"""`speechscale bench ...`: every benchmark's flags; each prints JSON lines (bench/ holds the measurements)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from . import bench_infer, bench_serving
from .args import (
    Parser,
    choice,
    choice_list,
    int_list,
    non_negative,
    out_file,
    out_folder,
    positive,
    sample_rate,
    yaml_mapping,
)


def _feature_kinds() -> tuple[str, ...]:
    from ..data.features import FEATURE_KINDS  # imports torch: asked only when --kind is given

    return FEATURE_KINDS


def _rnn_schemes() -> tuple[str, ...]:
    from ..models.rnn import BIDIRECTIONAL_SCHEMES

    return BIDIRECTIONAL_SCHEMES


def train(args: argparse.Namespace) -> int:
    import torch

    from ..bench.audio import checked_manifest
    from ..bench.throughput import bench_config, bench_modes, bench_train
    from ..config import ConfigError
    from ..recipe import check_recipe

    if args.activation_checkpointing == "both" and args.compile == "both":
        raise ConfigError("--compile both and --activation-checkpointing both: one side-by-side comparison at a time")
    if args.activation_checkpointing != "off" and (args.graphs != "off" or "+graphs" in args.precision):
        raise ConfigError("--activation-checkpointing runs eager steps: CUDA graphs stay off with it (--graphs off)")
    manifest = str(checked_manifest(args.manifest)) if args.manifest else None
    precisions = bench_modes(args.precision.split(","), args.graphs, args.rnn_scheme,
                             args.device != "cpu" and torch.cuda.is_available())
    overrides = yaml_mapping(args.model_overrides, "--model-overrides")
    models = args.model.split(",")
    for model in models:  # every name and override checked before any work (the model built on the meta device)
        check_recipe(bench_config(model, overrides))
    for model in models:
        for res in bench_train(model, args.batch_size, args.seconds, args.steps, args.warmup, manifest,
                               args.threads, overrides=overrides, precisions=precisions, device=args.device,
                               peak_tflops=args.peak_tflops, compile_model=args.compile,
                               recompute=args.activation_checkpointing):
            print(json.dumps(res), flush=True)
    return 0


def align(args: argparse.Namespace) -> int:
    import sys
    import time

    from ..bench.align import bench_align
    from ..bench.harness import write_json

    started = time.perf_counter()
    rows = bench_align(args.checkpoint.split(","), args.sentences, args.seed,  # the same audio for each
                       long_minutes=args.long_minutes)
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.out:
        write_json(args.out, rows, ["speechscale", *sys.argv[1:]], round(time.perf_counter() - started, 1),
                   {"sentences": args.sentences, "seed": args.seed, "long_minutes": args.long_minutes})
    return 0


def scaling(args: argparse.Namespace) -> int:
    from ..bench.audio import checked_manifest
    from ..bench.ranks import RankLauncher
    from ..bench.scaling import WORKER_IMPORTS, bench_scaling
    from ..models.registry import check_model_name

    procs = tuple(int(x) for x in args.procs.split(","))
    models = args.model.split(",")
    for model in models:  # before any process is started
        check_model_name(model, where="--model")
    manifest = str(checked_manifest(args.manifest)) if args.manifest else None
    with RankLauncher(WORKER_IMPORTS) as launcher:
        for model in models:
            for res in bench_scaling(model, procs, args.batch_size, args.seconds, args.steps, args.warmup,
                                     args.threads, manifest, args.device, launcher):
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


def features(args: argparse.Namespace) -> int:
    from ..bench.features import bench_features

    print(json.dumps(bench_features(args.manifest, args.sample_rate, args.kind, args.limit, args.repeats)))
    return 0


def loader(args: argparse.Namespace) -> int:
    import tempfile

    from ..bench.audio import bench_manifest, checked_manifest
    from ..bench.loader import bench_loader, flac_corpus
    from ..config import ConfigError
    from ..data.shards import is_shard_index

    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        workers = [-1]
    if min(workers) < 0:
        raise SystemExit(f"speechscale bench loader: --workers={args.workers} must be counts >= 0, e.g. 0,1,2")
    augment = {"off": [False], "on": [True], "both": [False, True]}[args.augment]
    features = {"loader": ("loader",), "step": ("step",), "both": ("loader", "step")}[args.features]
    if args.manifest:
        given = [flag for flag, value in (("--limit", args.limit), ("--clip-seconds", args.clip_seconds)) if value]
        if given:
            raise ConfigError(f"{' and '.join(given)} shape the synthesized corpus; --manifest is read as it is "
                              "(drop them, or write the corpus you want to time into the manifest)")
        if not is_shard_index(args.manifest):
            checked_manifest(args.manifest)
        elif args.source != "files":
            raise ConfigError(f"--source={args.source} writes shards of a manifest; {args.manifest} is a shard "
                              "index, read as it is (drop --source)")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = args.manifest or flac_corpus(bench_manifest(None, tmp, minutes=2.0), tmp, args.sample_rate,
                                                args.limit or 400, args.clip_seconds or 0.0)
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
    import tempfile

    from ..bench.audio import speech_files
    from ..bench.serve import bench_serve

    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        files = speech_files(args.manifest, tmp)
        for row in bench_serve(args.checkpoint, args.seconds, levels, args.requests, files=files):
            print(json.dumps(row), flush=True)
    return 0


def memory(args: argparse.Namespace) -> int:
    import tempfile

    from ..bench.audio import bench_manifest
    from ..bench.memory import bench_memory

    sources = ["shards", "manifest"] if args.source == "both" else [args.source]
    with tempfile.TemporaryDirectory() as tmp:
        audio = bench_manifest(args.manifest, tmp, minutes=2.0)
        for row in bench_memory(args.work_dir or tmp, args.utterances, sources, args.batches, manifest=audio):
            print(json.dumps(row), flush=True)
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `bench` and its benchmarks to the subcommand table."""
    b = command(sub, "bench", "benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True, metavar="BENCHMARK", parser_class=Parser)
    bt = command(bsub, "train", "steady-state training throughput, as JSON")
    bt.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bt.add_argument("--model-overrides", default=None,
                    help="YAML mapping of preset fields to change, e.g. '{rnn_layers: 4, rnn_hidden: 1024}'")
    bt.add_argument("--batch-size", type=positive(int), default=8, help="utterances per batch")
    bt.add_argument("--seconds", type=positive(float), default=2.0, help="seconds per utterance")
    bt.add_argument("--steps", type=positive(int), default=5, help="timed steps per precision")
    bt.add_argument("--warmup", type=non_negative(int), default=2, help="untimed steps first")
    bt.add_argument("--threads", type=non_negative(int), default=0, help="torch threads (0 = torch's default)")
    bt.add_argument("--manifest", default=None, help="real audio to cut batches from (default: synthesized noise)")
    bt.add_argument("--precision", default="fp32",
                    help="fp32,tf32,bf16,fp16: modes run side by side, ratios vs fp32 (on a GPU fp32 is TF32 off); "
                    "a whole mode (bf16+graphs@stacked) runs as given")
    bt.add_argument("--graphs", default="off", choices=["off", "on", "both"],
                    help="CUDA graphs: replay the model per fixed batch shape; both: eager and graphed side by side")
    bt.add_argument("--rnn-scheme", type=choice_list(_rnn_schemes), default=[],
                    help="graphed modes: how recurrent layers run both directions, each a mode (default: the layers')")
    bt.add_argument("--device", default="auto", help="auto | cpu | cuda")
    bt.add_argument("--peak-tflops", type=positive(float), default=None,
                    help="device peak for MFU (default: a matmul measured in each mode's dtype)")
    bt.add_argument("--compile", nargs="?", const="default", default=False,
                    choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "both"],
                    help="torch.compile the model (optionally a mode: reduce-overhead adds CUDA graphs; both: each "
                         "mode eager and compiled, side by side)")
    bt.add_argument("--activation-checkpointing", default="off", choices=["off", "on", "both"],
                    help="recompute each block's activations in the backward pass (trainer.activation_checkpointing); "
                         "both: each mode plain and recomputed, side by side")
    bt.set_defaults(func=train)
    bs = command(bsub, "scaling", "data-parallel throughput with 1..N processes, comm time and bytes, as JSON")
    bs.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bs.add_argument("--procs", default="1,2", help="process counts, comma-separated")
    bs.add_argument("--batch-size", type=positive(int), default=8, help="utterances per batch, per process")
    bs.add_argument("--seconds", type=positive(float), default=2.0, help="seconds per utterance")
    bs.add_argument("--steps", type=positive(int), default=5, help="timed steps")
    bs.add_argument("--warmup", type=non_negative(int), default=2, help="untimed steps first")
    bs.add_argument("--threads", type=positive(int), default=1, help="threads per process")
    bs.add_argument("--manifest", default=None, help="real audio to cut batches from (default: synthesized noise)")
    bs.add_argument("--device", default="auto", help="auto | cpu (GPUs: one process per GPU)")
    bs.set_defaults(func=scaling)
    bst = command(bsub, "straggler", "each strategy with and without one slow learner, real training runs")
    bst.add_argument("--procs", type=positive(int), default=4, help="learners (CPU processes, one thread each)")
    bst.add_argument("--epochs", type=positive(int), default=4, help="epochs per run")
    bst.add_argument("--slowdown", type=positive(float), default=2.0, help="how many times slower the last rank is")
    bst.add_argument("--config", default="yesno", help="the recipe every run trains (a built-in name or a file)")
    bst.add_argument("--data-root", required=True, help="the recipe's data.root (for yesno: the folder of its "
                     "manifest.jsonl, e.g. what `speechscale data download yesno` wrote)")
    bst.add_argument("--strategies", default=None, help="comma-separated (default: all)")
    bst.add_argument("--seeds", type=int_list, default=None, help="comma-separated trainer.seed values, one run each")
    bst.add_argument("--target-wer", type=float, default=None,
                     help="also time each run to its first validation WER at or below this (e.g. 0.05)")
    bst.add_argument("--out", type=out_folder, default="runs/bench_straggler", help="folder for results.json and straggler.png")
    bst.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every run")
    bst.set_defaults(func=straggler)
    bench_infer.register(bsub, command)
    bench_serving.register(bsub, command)
    bf = command(bsub, "features", "cost of decoding + resampling + features per second of audio, as JSON")
    bf.add_argument("--manifest", required=True, help="the audio to read (JSONL manifest)")
    bf.add_argument("--sample-rate", type=sample_rate, default=16000, help="rate the audio is resampled to")
    bf.add_argument("--kind", default="spectrogram", type=choice(_feature_kinds), help="feature kind (spectrogram, logmel)")
    bf.add_argument("--limit", type=positive(int), default=300, help="utterances to read")
    bf.add_argument("--repeats", type=positive(int), default=2, help="passes over them (the best counts)")
    bf.set_defaults(func=features)
    bl = command(bsub, "loader", "training DataLoader throughput (x real time) by worker count, as JSON lines")
    bl.add_argument("--manifest", default=None,
                    help="the audio to load, as it is: a manifest, or a shard index (a folder, or a URL such as "
                    "s3://bucket/corpus/index.jsonl: your store's own latency; default: synthesized speech written "
                    "as flac first)")
    bl.add_argument("--workers", default="0,1,2", help="comma-separated worker counts (0 = the main process)")
    bl.add_argument("--augment", default="both", choices=["off", "on", "both"], help="with augmentation or not")
    bl.add_argument("--sample-rate", type=sample_rate, default=16000, help="rate the audio is resampled to")
    bl.add_argument("--limit", type=positive(int), default=None,
                    help="utterances of the synthesized corpus (default 400; not with --manifest)")
    bl.add_argument("--clip-seconds", type=positive(float), default=None,
                    help="join synthesized sentences into utterances at least this long (default: one sentence "
                    "each; not with --manifest)")
    bl.add_argument("--source", default="files", choices=["files", "shards", "both"],
                    help="loose files, tar shards of the same files, or both")
    bl.add_argument("--shard-size", type=positive(int), default=100, help="utterances per shard (--source shards)")
    bl.add_argument("--batch-seconds", type=positive(float), default=60.0, help="padded audio seconds per batch")
    bl.add_argument("--features", default="loader", choices=["loader", "step", "both"],
                    help="features computed in the loader, or in the step (features.device: the loader ships audio)")
    bl.set_defaults(func=loader)
    ba = command(bsub, "align", "word times against known ones: align and greedy word starts on synthesized speech")
    ba.add_argument("--checkpoint", required=True,
                    help="checkpoints of English models (the demo's, say), comma-separated: the same sentences each")
    ba.add_argument("--sentences", type=positive(int), default=40, help="sentences of the demo's grammar")
    ba.add_argument("--seed", type=int, default=1, help="which sentences and leads")
    ba.add_argument("--long-minutes", type=non_negative(float), default=0.0,
                    help="also align the sentences as one recording, repeated to this many minutes (0: not)")
    ba.add_argument("--out", type=out_file, default=None, help="also write the result with its provenance to this JSON file")
    ba.set_defaults(func=align)
    be = command(bsub, "export", "inference latency per clip: PyTorch vs ONNX Runtime vs TorchScript, as JSON")
    be.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    be.add_argument("--seconds", type=positive(float), default=5.0, help="clip length")
    be.add_argument("--repeats", type=positive(int), default=20, help="timed rounds (after 3 warm-up rounds)")
    be.add_argument("--threads", type=non_negative(int), default=0, help="torch intra-op threads (0 = torch's default)")
    be.set_defaults(func=export)
    bv = command(bsub, "serve", "transcription service: requests/s and p50/p95 latency by client concurrency")
    bv.add_argument("--checkpoint", required=True, help="the checkpoint to serve")
    bv.add_argument("--seconds", type=positive(float), default=5.0, help="clip length")
    bv.add_argument("--manifest", default=None,
                    help="speech to send: its first files end to end, cut to --seconds (default: synthesized speech)")
    bv.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    bv.add_argument("--requests", type=positive(int), default=64, help="requests per level")
    bv.set_defaults(func=serve)
    bm = command(bsub, "memory", "loader process memory (RSS, measured) against corpus size: shards vs a manifest")
    bm.add_argument("--utterances", type=lambda x: [int(v) for v in x.split(",")], default=[10000, 100000],
                    help="comma-separated corpus sizes (a synthetic index over real shards)")
    bm.add_argument("--source", default="both", choices=["shards", "manifest", "both"], help="what to measure")
    bm.add_argument("--batches", type=positive(int), default=50, help="batches to read after planning")
    bm.add_argument("--work-dir", default=None, help="where the corpus is written (default: a temporary folder)")
    bm.add_argument("--manifest", default=None,
                    help="the recordings the shards are written from (default: synthesized speech)")
    bm.set_defaults(func=memory)
