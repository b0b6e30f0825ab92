"""`speechscale <command>`: parses arguments, then calls one function per command.

    speechscale synth --out runs/demo/data --minutes 30
    speechscale train --config configs/demo.yaml trainer.max_steps=100
    speechscale eval --checkpoint runs/demo/checkpoints/best.pt --manifest runs/demo/data/test.jsonl --json
    speechscale transcribe --checkpoint runs/demo/checkpoints/best.pt speech.flac --json
    speechscale bench train --model ds2-tiny --batch-size 8 --seconds 2
    speechscale bench features --manifest ../shared/data/fsdd/manifest.jsonl
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("speechscale")


def _setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose >= 0 else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)


def cmd_synth(args: argparse.Namespace) -> int:
    from .data.synth import synthesize_corpus

    counts = synthesize_corpus(args.out, minutes=args.minutes, seed=args.seed, test_minutes=args.test_minutes,
                               progress=not args.quiet)
    print(json.dumps({"out": str(args.out), **counts}))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .config import load_config
    from .training.trainer import train

    cfg = load_config(args.config, args.overrides)
    summary = train(cfg)
    if int(os.environ.get("RANK", 0)) == 0:
        print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, (list, dict))}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .components import load_components
    from .config import Config
    from .training.data_setup import load_utterances, make_loader
    from .training.evaluate import evaluate

    comps = load_components(args.checkpoint)
    cfg = Config()
    cfg.data.batch_seconds = args.batch_seconds
    cfg.data.max_duration = 1e9
    utts, report = load_utterances(args.manifest, comps, cfg)
    loader, _, _ = make_loader(utts, comps, cfg, train=False)
    res = evaluate(comps.model, loader, comps.tokenizer)
    out = {"wer": res.wer, "cer": res.cer, "utterances": res.utterances, "skipped": report.skipped + res.skipped,
           "manifest": str(args.manifest), "checkpoint": str(args.checkpoint)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{'manifest':<12}{out['manifest']}\n{'utterances':<12}{out['utterances']}\n"
              f"{'skipped':<12}{out['skipped']}\n{'WER':<12}{100 * out['wer']:.2f} %\n{'CER':<12}{100 * out['cer']:.2f} %")
    return 0


def cmd_transcribe(args: argparse.Namespace) -> int:
    from .data.audio import AudioError
    from .serving.transcribe import Transcriber

    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds)
    failed = 0
    for f in args.files:
        try:
            res = asr.transcribe_file(f)
        except AudioError as e:
            failed += 1
            res = {"file": str(f), "error": str(e)}
        if args.json:
            print(json.dumps(res), flush=True)
        else:
            print(f"{f}\t{res.get('text', 'ERROR: ' + str(res.get('error')))}", flush=True)
    return 1 if failed else 0


def _default_manifest(given: str | None) -> str | None:
    """The manifest to cut benchmark batches from: the given one ('' = noise), else LDC93S1 when present."""
    if given is not None:
        return given or None
    default = Path(__file__).resolve().parents[2].parent / "shared/data/ldc93s1/manifest.jsonl"
    return str(default) if default.is_file() else None


def cmd_bench_train(args: argparse.Namespace) -> int:
    from .bench.throughput import bench_train
    from .config import ConfigError

    manifest = _default_manifest(args.manifest)
    precisions = tuple(args.precision.split(","))
    bad = [p for p in precisions if p not in ("fp32", "bf16", "fp16")]
    if bad:
        raise ConfigError(f"--precision {','.join(bad)}: use fp32, bf16 and/or fp16, comma-separated")
    if "fp32" in precisions:  # the reference runs first so every other mode reports its ratio
        precisions = ("fp32",) + tuple(p for p in precisions if p != "fp32")
    for model in args.model.split(","):
        for res in bench_train(model, args.batch_size, args.seconds, args.steps, args.warmup, manifest or None,
                               args.threads, precisions=precisions, device=args.device,
                               peak_tflops=args.peak_tflops, compile_model=args.compile):
            print(json.dumps(res), flush=True)
    return 0


def cmd_bench_scaling(args: argparse.Namespace) -> int:
    from .bench.scaling import bench_scaling

    from .models.registry import check_model_name

    procs = tuple(int(x) for x in args.procs.split(","))
    models = args.model.split(",")
    for model in models:  # before any process is spawned
        check_model_name(model, where="--model")
    for model in models:
        for res in bench_scaling(model, procs, args.batch_size, args.seconds, args.steps, args.warmup,
                                 args.threads, _default_manifest(args.manifest), args.device):
            print(json.dumps(res), flush=True)
    return 0


def cmd_bench_features(args: argparse.Namespace) -> int:
    from .bench.features import bench_features

    print(json.dumps(bench_features(args.manifest, args.sample_rate, args.kind, args.limit, args.repeats)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="speechscale", description="Train and use end-to-end speech recognition models.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings only, no progress bars")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synth", help="synthesize the demo corpus with espeak-ng")
    s.add_argument("--out", required=True, type=Path, help="output folder (train.jsonl, test.jsonl, audio/)")
    s.add_argument("--minutes", type=float, default=30.0, help="minutes of training audio")
    s.add_argument("--test-minutes", type=float, default=None, help="minutes of test audio (default 10%%)")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_synth)

    t = sub.add_parser("train", help="train a model from a YAML config")
    t.add_argument("--config", required=True, help="YAML recipe, e.g. configs/demo.yaml")
    t.add_argument("overrides", nargs="*", help="key=value overrides, e.g. trainer.max_steps=100")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="WER/CER of a checkpoint on a manifest")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--manifest", required=True)
    e.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    e.add_argument("--batch-seconds", type=float, default=120.0)
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser("transcribe", help="transcribe audio files (any format, rate, channels, length)")
    r.add_argument("--checkpoint", required=True)
    r.add_argument("files", nargs="+")
    r.add_argument("--json", action="store_true", help="one JSON object per file")
    r.add_argument("--chunk-seconds", type=float, default=20.0, help="long audio is cut into chunks of this length")
    r.set_defaults(func=cmd_transcribe)

    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True)
    bt = bsub.add_parser("train", help="steady-state training throughput, as JSON")
    bt.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bt.add_argument("--batch-size", type=int, default=8)
    bt.add_argument("--seconds", type=float, default=2.0, help="seconds per utterance")
    bt.add_argument("--steps", type=int, default=5)
    bt.add_argument("--warmup", type=int, default=2)
    bt.add_argument("--threads", type=int, default=0)
    bt.add_argument("--manifest", default=None, help="real audio to cut batches from ('' for noise)")
    bt.add_argument("--precision", default="fp32", help="fp32,bf16,fp16: modes run side by side, ratios vs fp32")
    bt.add_argument("--device", default="auto", help="auto | cpu | cuda")
    bt.add_argument("--peak-tflops", type=float, default=None,
                    help="device peak for MFU (default: a matmul measured in each mode's dtype)")
    bt.add_argument("--compile", action="store_true", help="torch.compile the model")
    bt.set_defaults(func=cmd_bench_train)
    bs = bsub.add_parser("scaling", help="data-parallel throughput with 1..N processes, comm time and bytes, as JSON")
    bs.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bs.add_argument("--procs", default="1,2", help="process counts, comma-separated")
    bs.add_argument("--batch-size", type=int, default=8, help="per process")
    bs.add_argument("--seconds", type=float, default=2.0, help="seconds per utterance")
    bs.add_argument("--steps", type=int, default=5)
    bs.add_argument("--warmup", type=int, default=2)
    bs.add_argument("--threads", type=int, default=1, help="threads per process")
    bs.add_argument("--manifest", default=None, help="real audio to cut batches from ('' for noise)")
    bs.add_argument("--device", default="auto", help="auto | cpu (GPUs: one process per GPU)")
    bs.set_defaults(func=cmd_bench_scaling)
    bf = bsub.add_parser("features", help="cost of decoding + resampling + features per second of audio, as JSON")
    bf.add_argument("--manifest", required=True)
    bf.add_argument("--sample-rate", type=int, default=16000)
    bf.add_argument("--kind", default="spectrogram", choices=["spectrogram", "logmel"])
    bf.add_argument("--limit", type=int, default=300, help="utterances to read")
    bf.add_argument("--repeats", type=int, default=2)
    bf.set_defaults(func=cmd_bench_features)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(-1 if args.quiet else args.verbose)
    if args.quiet and hasattr(args, "overrides"):
        args.overrides = list(args.overrides) + ["trainer.progress=false"]
    from .config import ConfigError
    from .data.espeak import EspeakNotFound
    from .data.manifest import ManifestError
    from .training.checkpoint import CheckpointError
    from .training.precision import LossScaleCollapsed
    from .training.prescan import PrescanError

    try:
        return args.func(args)
    except (ConfigError, ManifestError, CheckpointError, EspeakNotFound) as e:
        print(f"speechscale {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (PrescanError, LossScaleCollapsed) as e:  # the run stopped for a reason it explains
        print(f"speechscale {args.command}: stopped: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
