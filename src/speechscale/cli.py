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
from typing import Any, Callable

from .data.features import FEATURE_KINDS

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


def cmd_data_import(args: argparse.Namespace) -> int:
    from .data.importers import import_corpus

    report = import_corpus(args.corpus, args.src, args.out, args.split, args.min_duration, args.max_duration)
    print(report.summary(), file=sys.stderr)
    print(json.dumps({"manifest": str(Path(args.out) / "manifest.jsonl"), "kept": report.kept,
                      "skipped": dict(report.reasons)}))
    return 0


def cmd_data_shard(args: argparse.Namespace) -> int:
    from .data.shards import write_shards

    print(json.dumps(write_shards(args.manifest, args.out, args.shard_size, args.codec)))
    return 0


def _write_details(path: str, res: Any, loader: Any) -> None:
    """eval --details: one JSON line per utterance with reference, hypothesis, WER and the word alignment."""
    from .decoding.metrics import ErrorRate, align_words

    utts = getattr(loader.dataset, "utts", None)
    with open(path, "w", encoding="utf-8") as f:
        for i in sorted(res.hyps):
            m = ErrorRate()
            m.update([res.refs[i]], [res.hyps[i]])
            row = {"index": i, "audio": utts[i].audio_path if utts else None, "reference": res.refs[i],
                   "hypothesis": res.hyps[i], "wer": round(m.wer, 4), "alignment": align_words(res.refs[i], res.hyps[i])}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _decoder_config(args: argparse.Namespace) -> Any:
    from .decoding.decoders import DecoderConfig
    from .decoding.tune import DEFAULT_ALPHA, DEFAULT_BETA, load_tuned

    tuned = load_tuned(args.lm) if args.lm else None  # written by tune-lm beside the LM
    alpha = args.alpha if args.alpha is not None else (tuned or {}).get("alpha", DEFAULT_ALPHA)
    beta = args.beta if args.beta is not None else (tuned or {}).get("beta", DEFAULT_BETA)
    return DecoderConfig(name=args.decoder, beam_width=args.beam_width, lm=args.lm or "", alpha=alpha, beta=beta,
                         lexicon=args.lexicon or "", hotwords=[w for w in (args.hotwords or "").split(",") if w],
                         hotword_weight=args.hotword_weight)


def cmd_tune_lm(args: argparse.Namespace) -> int:
    from .components import load_components
    from .config import Config
    from .data.loading import eval_loader
    from .decoding.tune import cache_log_probs, tune, tuned_path

    comps = load_components(args.checkpoint)
    cfg = Config()
    cfg.data.max_duration = 1e9
    loader, _, _ = eval_loader(args.manifest, comps, cfg.data)
    cache = cache_log_probs(comps.model, loader)
    best = tune(cache, comps.tokenizer, args.lm, args.trials, args.beam_width, args.lexicon or "")
    tuned_path(args.lm).write_text(json.dumps({"alpha": best["alpha"], "beta": best["beta"], "wer": best["wer"],
                                               "manifest": str(args.manifest)}) + "\n")
    print(json.dumps({**best, "written": str(tuned_path(args.lm))}))
    return 0


def _decoder_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decoder", default="greedy", choices=["greedy", "beam", "lexicon"],
                   help="greedy, beam search (with --lm: over the LM's words), or lexicon (only --lexicon's words)")
    p.add_argument("--beam-width", type=_positive(int), default=50, help="beam search: hypotheses kept")
    p.add_argument("--lm", default=None, help="a KenLM word model (ARPA or binary), e.g. from `speechscale lm build`")
    p.add_argument("--alpha", type=float, default=None, help="LM weight (default: tune-lm's, else 0.5)")
    p.add_argument("--beta", type=float, default=None, help="bonus per word (default: tune-lm's, else 1.0)")
    p.add_argument("--lexicon", default=None, help="a word list, one word a line (the lexicon decoder)")
    p.add_argument("--hotwords", default=None, help="comma-separated words to favour (beam with --lm, or lexicon)")
    p.add_argument("--hotword-weight", type=float, default=3.0, help="the hotwords' bonus per occurrence")


def cmd_lm_build(args: argparse.Namespace) -> int:
    from .decoding.lm import build_arpa

    print(json.dumps(build_arpa(args.text, args.order, args.out)))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .serving.server import Limits, serve
    from .serving.transcribe import Transcriber

    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds, backend=args.backend,
                      decoder=_decoder_config(args))
    limits = Limits(max_bytes=int(args.max_mb * 1024 * 1024), max_seconds=args.max_seconds, max_batch=args.max_batch)
    print(f"speechscale serve: http://{args.host}:{args.port}/ ({asr.comps.model_name})", file=sys.stderr, flush=True)
    serve(asr, args.host, args.port, limits)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export.exporter import export_model

    print(json.dumps(export_model(args.checkpoint, args.format, args.out)))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .config import ConfigError, dump_config
    from .recipe import load_recipe
    from .training.trainer import train

    if args.print_config:
        print(dump_config(load_recipe(args.config, args.overrides)), end="")
        return 0
    if args.config is None:
        raise ConfigError("--config is required to train, e.g. --config configs/demo.yaml "
                          "(--print-config shows every key)")
    cfg = load_recipe(args.config, args.overrides)
    summary = train(cfg)
    if int(os.environ.get("RANK", 0)) == 0:
        print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, (list, dict))}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .components import load_components
    from .config import Config
    from .data.loading import eval_loader
    from .decoding.evaluate import evaluate

    comps = load_components(args.checkpoint)
    cfg = Config()
    cfg.data.batch_seconds = args.batch_seconds
    cfg.data.max_duration = 1e9
    loader, report, _ = eval_loader(args.manifest, comps, cfg.data)
    from .decoding.decoders import build_decoder

    dcfg = _decoder_config(args)
    decoder = build_decoder(dcfg, comps.tokenizer, comps.normalizer)
    res = evaluate(comps.model, loader, comps.tokenizer, decoder=decoder)
    if args.details:
        _write_details(args.details, res, loader)
    reasons = dict(report.reasons)
    for reason, n in res.skipped_reasons.items():
        reasons[reason] = reasons.get(reason, 0) + n
    out = {"wer": res.wer, "cer": res.cer, "utterances": res.utterances, "skipped": report.skipped + res.skipped,
           "skipped_reasons": reasons, "manifest": str(args.manifest), "checkpoint": str(args.checkpoint),
           "decoder": args.decoder, **({"alpha": dcfg.alpha, "beta": dcfg.beta} if dcfg.lm else {})}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{'manifest':<12}{out['manifest']}\n{'utterances':<12}{out['utterances']}\n"
              f"{'skipped':<12}{out['skipped']}\n{'WER':<12}{100 * out['wer']:.2f} %\n{'CER':<12}{100 * out['cer']:.2f} %")
    return 0


def _references(manifest: str | None) -> dict[str, str]:
    """Resolved audio path -> reference text, from a manifest (empty without one)."""
    if manifest is None:
        return {}
    from .data.manifest import read_manifest

    utts, _ = read_manifest(manifest, check_files=False)
    return {str(Path(u.audio_path).resolve()): u.raw_text for u in utts}


def cmd_transcribe(args: argparse.Namespace) -> int:
    from .data.audio import AudioError
    from .decoding.metrics import ErrorRate
    from .serving.transcribe import Transcriber, check_chunk_seconds

    check_chunk_seconds(args.chunk_seconds)  # before the checkpoint is even read
    refs = _references(args.manifest)
    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds, backend=args.backend,
                      decoder=_decoder_config(args))
    failed = 0
    for f in args.files:
        try:
            res = asr.transcribe_file(f)
        except AudioError as e:
            failed += 1
            res = {"file": str(f), "error": str(e)}
        ref = refs.get(str(Path(f).resolve()))
        if ref is not None and "text" in res:
            score = ErrorRate()
            score.update([asr.comps.normalizer(ref)], [res["text"]])
            res.update(reference=ref, wer=round(score.wer, 4))
        if args.json:
            print(json.dumps(res), flush=True)
        elif "error" in res:
            print(f"{f}\tERROR: {res['error']}", flush=True)
        elif ref is not None:
            print(f"{f}\n  hypothesis: {res['text']}\n  reference:  {ref}\n  WER:        {100 * res['wer']:.1f} %",
                  flush=True)
        else:
            print(f"{f}\t{res['text']}", flush=True)
    return 1 if failed else 0


def _default_manifest(given: str | None) -> str | None:
    """The manifest to cut benchmark batches from: the given one ('' = noise), else LDC93S1 when present."""
    if given is not None:
        return given or None
    default = Path(__file__).resolve().parents[2].parent / "shared/data/ldc93s1/manifest.jsonl"
    return str(default) if default.is_file() else None


def cmd_bench_train(args: argparse.Namespace) -> int:
    from .bench.throughput import bench_train
    from .config import check_choice
    from .models.registry import model_config
    from .training.precision import PRECISIONS

    manifest = _default_manifest(args.manifest)
    precisions = tuple(args.precision.split(","))
    for p in precisions:
        check_choice("--precision", p, PRECISIONS)
    if "fp32" in precisions:  # the reference runs first so every other mode reports its ratio
        precisions = ("fp32",) + tuple(p for p in precisions if p != "fp32")
    overrides = _yaml_mapping(args.model_overrides, "--model-overrides")
    models = args.model.split(",")
    for model in models:  # every name and override checked before any work
        model_config(model, overrides)
    for model in models:
        for res in bench_train(model, args.batch_size, args.seconds, args.steps, args.warmup, manifest or None,
                               args.threads, overrides=overrides, precisions=precisions, device=args.device,
                               peak_tflops=args.peak_tflops, compile_model=args.compile):
            print(json.dumps(res), flush=True)
    return 0


def _yaml_mapping(text: str | None, flag: str) -> dict[str, Any]:
    """A YAML mapping given on the command line, or {}; ConfigError in one line otherwise."""
    import yaml

    from .config import ConfigError

    if not text:
        return {}
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a mapping such as '{{rnn_layers: 4}}', got {text!r}")
    return value


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


def cmd_bench_straggler(args: argparse.Namespace) -> int:
    from .bench.straggler import STRATEGY_RUNS, bench_straggler, summarize
    from .config import check_choice
    from .recipe import load_recipe

    strategies = args.strategies.split(",") if args.strategies else list(STRATEGY_RUNS)
    for name in strategies:
        check_choice("--strategies", name, tuple(STRATEGY_RUNS))
    load_recipe(args.config, args.overrides)  # a bad recipe or override fails here, before any process starts
    runs = bench_straggler(args.procs, args.epochs, args.slowdown, args.config, args.out, args.overrides, strategies,
                           report=lambda res: print(json.dumps({k: v for k, v in res.items() if k != "val"}),
                                                    flush=True),
                           seeds=args.seeds, target_wer=args.target_wer)
    if len(args.seeds or []) > 1 or args.target_wer is not None:
        for row in summarize(runs):
            print(json.dumps({"summary": row}), flush=True)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from .planning.command import run
    from .planning.model import PlanError

    try:
        return run(args, _yaml_mapping(args.model_overrides, "--model-overrides"))
    except PlanError as e:
        raise SystemExit(f"speechscale plan: error: {e}") from None


def cmd_report(args: argparse.Namespace) -> int:
    from .reporting.report import write_report
    from .reporting.runs import RunError

    try:
        index = write_report(args.run_dir, args.out)
    except RunError as e:
        raise SystemExit(f"speechscale report: error: {e}") from None
    print(index)
    return 0


def cmd_bench_all(args: argparse.Namespace) -> int:
    from .bench import suite, tables

    only = args.only.split(",") if args.only else None
    for name in only or []:
        if name not in suite.BENCHES:
            raise SystemExit(f"speechscale bench all: --only {name}: unknown; choose from {', '.join(suite.BENCHES)}")
    out = Path(args.out)
    if args.tables_only:
        docs = suite.load_docs(out)
        if not docs:
            raise SystemExit(f"speechscale bench all: {out}: no bench JSON files to render")
        docs = {k: v for k, v in docs.items() if only is None or k in only}
    else:
        docs = suite.run_all(out, only, report=lambda name, secs: print(f"bench {name}: {secs:.0f} s -> "
                                                                         f"{out / (name + '.json')}", flush=True))
    if args.benchmarks:
        tables.update(Path(args.benchmarks), docs)
        print(f"updated {args.benchmarks}: {', '.join(docs)}")
    failed = [k for k, v in docs.items() if isinstance(v["results"], dict) and "error" in v["results"]]
    if failed:
        print(f"failed: {', '.join(failed)} (see their JSON files)", file=sys.stderr)
    return 1 if failed else 0


def cmd_bench_features(args: argparse.Namespace) -> int:
    from .bench.features import bench_features

    print(json.dumps(bench_features(args.manifest, args.sample_rate, args.kind, args.limit, args.repeats)))
    return 0


def cmd_bench_loader(args: argparse.Namespace) -> int:
    import tempfile

    from .bench.loader import bench_loader, flac_corpus

    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        workers = [-1]
    if min(workers) < 0:
        raise SystemExit(f"speechscale bench loader: --workers={args.workers} must be counts >= 0, e.g. 0,1,2")
    augment = {"off": [False], "on": [True], "both": [False, True]}[args.augment]
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
            from .data.shards import write_shards

            write_shards(str(manifest), Path(tmp) / "shards", shard_size=args.shard_size)
            sources.append(str(Path(tmp) / "shards" / "index.jsonl"))
        for src in sources:
            for res in bench_loader(src, workers, augment, args.sample_rate, args.batch_seconds):
                print(json.dumps(res), flush=True)
    return 0


def cmd_bench_export(args: argparse.Namespace) -> int:
    from .bench.export import bench_export

    for row in bench_export(args.model.split(","), args.seconds, args.repeats, threads=args.threads):
        print(json.dumps(row), flush=True)
    return 0


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from .bench.serve import bench_serve

    levels = [int(x) for x in args.concurrency.split(",")]
    for row in bench_serve(args.checkpoint, args.seconds, levels, args.requests):
        print(json.dumps(row), flush=True)
    return 0


def cmd_bench_memory(args: argparse.Namespace) -> int:
    import tempfile

    from .bench.memory import bench_memory

    sources = ["shards", "manifest"] if args.source == "both" else [args.source]
    with tempfile.TemporaryDirectory() as tmp:
        for row in bench_memory(args.work_dir or tmp, args.utterances, sources, args.batches):
            print(json.dumps(row), flush=True)
    return 0


def _int_list(text: str) -> list[int]:
    """An argparse type: comma-separated integers (one line from argparse otherwise)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _positive(kind: type) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` that must be > 0 (one line from argparse otherwise)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("speechscale")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from . import __version__

        return __version__


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: what was wrong, and where to look, without the usage block."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    # -v/-q work before and after the subcommand: every parser knows them, and SUPPRESS keeps a value
    # given before the subcommand from being reset by the subparser's default.
    common = _Parser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more logging (-vv for debug)")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="warnings only, no progress bars")
    p = _Parser(prog="speechscale", parents=[common],
                                description="Train and use end-to-end speech recognition models.")
    p.add_argument("--version", action="version", version=f"speechscale {_version()}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def command(parent: Any, name: str, help: str) -> argparse.ArgumentParser:
        return parent.add_parser(name, help=help, description=help, parents=[common])

    s = command(sub, "synth", "synthesize the demo corpus with espeak-ng")
    s.add_argument("--out", required=True, type=Path, help="output folder (train.jsonl, test.jsonl, audio/)")
    s.add_argument("--minutes", type=_positive(float), default=30.0, help="minutes of training audio")
    s.add_argument("--test-minutes", type=_positive(float), default=None,
                   help="minutes of test audio (default 10%% of --minutes)")
    s.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same corpus")
    s.set_defaults(func=cmd_synth)

    d = command(sub, "data", "corpora: import a downloaded corpus into a manifest; shard a manifest")
    dsub = d.add_subparsers(dest="data", required=True, metavar="ACTION", parser_class=_Parser)
    di = command(dsub, "import", "an already-downloaded corpus in its official layout -> OUT/manifest.jsonl")
    from .data.importers import IMPORTERS

    di.add_argument("corpus", choices=list(IMPORTERS), help="the corpus layout")
    di.add_argument("src", type=Path, help="the corpus folder (a CSV file for csv)")
    di.add_argument("--out", required=True, type=Path, help="output folder (manifest.jsonl; tedlium: audio/)")
    di.add_argument("--split", default="", help="commonvoice: the .tsv name (default validated); mls, tedlium: "
                                                "a split folder under SRC")
    di.add_argument("--min-duration", type=float, default=0.0, help="skip shorter utterances (seconds)")
    di.add_argument("--max-duration", type=float, default=0.0, help="skip longer utterances (seconds; 0 = no bound)")
    di.set_defaults(func=cmd_data_import)
    ds = command(dsub, "shard", "a manifest -> tar shards (WebDataset layout) and OUT/index.jsonl, for streaming")
    ds.add_argument("manifest", help="the manifest to shard (its valid lines)")
    ds.add_argument("--out", required=True, type=Path, help="output folder (shard-NNNNNN.tar, index.jsonl)")
    ds.add_argument("--shard-size", type=_positive(int), default=1000, help="utterances per shard")
    ds.add_argument("--codec", choices=["flac"], default=None,
                    help="re-encode the audio as 16-bit FLAC (default: keep each file's bytes)")
    ds.set_defaults(func=cmd_data_shard)

    t = command(sub, "train", "train a model from a YAML config")
    t.add_argument("--config", default=None, help="YAML recipe, e.g. configs/demo.yaml (required to train)")
    t.add_argument("--print-config", action="store_true",
                   help="print the resolved config (every key, with its comment) as YAML and exit")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, values in YAML, e.g. trainer.max_steps=100 augment.speed=[0.9,1.1]")
    t.set_defaults(func=cmd_train)

    e = command(sub, "eval", "WER/CER of a checkpoint on a manifest or shard index")
    e.add_argument("--checkpoint", required=True, help="a speechscale checkpoint (.pt), local path or URL")
    e.add_argument("--manifest", required=True,
                   help="JSONL manifest with audio_filepath, duration, text; or a shard index (index.jsonl, its "
                        "folder or an fsspec URL)")
    e.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    e.add_argument("--details", default=None, help="write per-utterance reference, hypothesis and alignment (JSONL)")
    _decoder_args(e)
    e.add_argument("--batch-seconds", type=_positive(float), default=120.0,
                   help="audio seconds per evaluation batch (lower it if memory runs out)")
    e.set_defaults(func=cmd_eval)

    r = command(sub, "transcribe", "transcribe audio files (any format, rate, channels, length)")
    r.add_argument("--checkpoint", required=True,
                   help="a speechscale checkpoint (.pt), local path or URL; with --backend onnx|torchscript the "
                        "file `speechscale export` wrote")
    r.add_argument("--backend", default="torch", choices=["torch", "onnx", "torchscript"],
                   help="run the model in PyTorch, onnxruntime or TorchScript")
    _decoder_args(r)
    r.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, ogg, ...) to transcribe")
    r.add_argument("--json", action="store_true", help="one JSON object per file")
    r.add_argument("--chunk-seconds", type=float, default=20.0,
                   help="long audio is cut at quiet points into chunks of at most this length (>= 1)")
    r.add_argument("--manifest", default=None,
                   help="a manifest holding these files: print each one's reference text and WER beside it")
    r.set_defaults(func=cmd_transcribe)

    sv = command(sub, "serve", "an HTTP transcription service with a web page (POST /v1/transcribe, GET /healthz)")
    sv.add_argument("--checkpoint", required=True, help="a checkpoint, or an exported file with --backend")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    sv.add_argument("--port", type=int, default=8000, help="TCP port")
    sv.add_argument("--backend", default="torch", choices=["torch", "onnx", "torchscript"], help="model runtime")
    sv.add_argument("--max-mb", type=_positive(float), default=20.0, help="largest request body (MB)")
    sv.add_argument("--max-seconds", type=_positive(float), default=60.0, help="longest audio per request (s)")
    sv.add_argument("--max-batch", type=_positive(int), default=16, help="requests transcribed together")
    sv.add_argument("--chunk-seconds", type=float, default=20.0, help="long audio is cut into chunks this long")
    _decoder_args(sv)
    sv.set_defaults(func=cmd_serve)

    tl = command(sub, "tune-lm", "search the LM weight and word bonus on a dev set (the model runs once)")
    tl.add_argument("--checkpoint", required=True, help="a speechscale checkpoint")
    tl.add_argument("--manifest", required=True, help="the dev set (manifest or shard index)")
    tl.add_argument("--lm", required=True, help="the KenLM model to tune for")
    tl.add_argument("--lexicon", default=None, help="tune the lexicon decoder with this word list instead")
    tl.add_argument("--trials", type=_positive(int), default=30, help="decoding passes over the cached output")
    tl.add_argument("--beam-width", type=_positive(int), default=32, help="beam width during the search")
    tl.set_defaults(func=cmd_tune_lm)

    lm = command(sub, "lm", "language models: build a Kneser-Ney ARPA model from text")
    lsub = lm.add_subparsers(dest="lm_action", required=True, metavar="ACTION", parser_class=_Parser)
    lb = command(lsub, "build", "text (one sentence a line) -> a Kneser-Ney ARPA model with <unk>")
    lb.add_argument("text", help="a text file, one sentence a line (normalized as training targets are)")
    lb.add_argument("--order", type=_positive(int), default=3, help="n-gram order")
    lb.add_argument("--out", required=True, type=Path, help="the ARPA file to write")
    lb.set_defaults(func=cmd_lm_build)

    x = command(sub, "export", "a checkpoint's acoustic model as ONNX or TorchScript (dynamic batch and time)")
    x.add_argument("--checkpoint", required=True, help="a speechscale checkpoint (.pt), local path or URL")
    x.add_argument("--format", required=True, choices=["onnx", "torchscript"], help="the file format")
    x.add_argument("--out", required=True, type=Path, help="the file to write (e.g. model.onnx, model.ts)")
    x.set_defaults(func=cmd_export)

    rp = command(sub, "report", "an HTML page and PNG plots of a training run (while it runs, too)")
    rp.add_argument("run_dir", help="the run's trainer.out_dir (or trainer.log_dir): metrics.jsonl, config.json")
    rp.add_argument("--out", default=None, help="folder for index.html and the PNGs (default RUN_DIR/report)")
    rp.set_defaults(func=cmd_report)

    pl = command(sub, "plan", "predict time-to-train and cost on 1..N GPUs (docs/planner.md)")
    from .planning.command import add_arguments as plan_arguments

    plan_arguments(pl, _positive)
    pl.set_defaults(func=cmd_plan)

    b = command(sub, "bench", "benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True, metavar="BENCHMARK", parser_class=_Parser)
    ba = command(bsub, "all", "every bench (about 7 minutes on 2 cores): JSON + PNG per bench, BENCHMARKS.md tables")
    ba.add_argument("--out", required=True, help="folder for NAME.json and NAME.png")
    ba.add_argument("--only", default=None, help="comma-separated subset of the benches (default: all; see docs/benchmarks)")
    ba.add_argument("--benchmarks", default="BENCHMARKS.md",
                    help="the file whose generated tables are rewritten ('' = leave it alone)")
    ba.add_argument("--tables-only", action="store_true",
                    help="run nothing: re-render the tables from the JSON files already in --out")
    ba.set_defaults(func=cmd_bench_all)
    bt = command(bsub, "train", "steady-state training throughput, as JSON")
    bt.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bt.add_argument("--model-overrides", default=None,
                    help="YAML mapping of preset fields to change, e.g. '{rnn_layers: 4, rnn_hidden: 1024}'")
    bt.add_argument("--batch-size", type=_positive(int), default=8, help="utterances per batch")
    bt.add_argument("--seconds", type=_positive(float), default=2.0, help="seconds per utterance")
    bt.add_argument("--steps", type=_positive(int), default=5, help="timed steps per precision")
    bt.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    bt.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    bt.add_argument("--manifest", default=None, help="real audio to cut batches from ('' for noise)")
    bt.add_argument("--precision", default="fp32", help="fp32,bf16,fp16: modes run side by side, ratios vs fp32")
    bt.add_argument("--device", default="auto", help="auto | cpu | cuda")
    bt.add_argument("--peak-tflops", type=_positive(float), default=None,
                    help="device peak for MFU (default: a matmul measured in each mode's dtype)")
    bt.add_argument("--compile", action="store_true", help="torch.compile the model")
    bt.set_defaults(func=cmd_bench_train)
    bs = command(bsub, "scaling", "data-parallel throughput with 1..N processes, comm time and bytes, as JSON")
    bs.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    bs.add_argument("--procs", default="1,2", help="process counts, comma-separated")
    bs.add_argument("--batch-size", type=_positive(int), default=8, help="utterances per batch, per process")
    bs.add_argument("--seconds", type=_positive(float), default=2.0, help="seconds per utterance")
    bs.add_argument("--steps", type=_positive(int), default=5, help="timed steps")
    bs.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    bs.add_argument("--threads", type=_positive(int), default=1, help="threads per process")
    bs.add_argument("--manifest", default=None, help="real audio to cut batches from ('' for noise)")
    bs.add_argument("--device", default="auto", help="auto | cpu (GPUs: one process per GPU)")
    bs.set_defaults(func=cmd_bench_scaling)
    bst = command(bsub, "straggler", "each strategy with and without one slow learner, real training runs")
    bst.add_argument("--procs", type=_positive(int), default=4, help="learners (CPU processes, one thread each)")
    bst.add_argument("--epochs", type=_positive(int), default=4, help="epochs per run")
    bst.add_argument("--slowdown", type=_positive(float), default=2.0, help="how many times slower the last rank is")
    bst.add_argument("--config", default="configs/yesno.yaml", help="the recipe every run trains")
    bst.add_argument("--strategies", default=None, help="comma-separated (default: all)")
    bst.add_argument("--seeds", type=_int_list, default=None, help="comma-separated trainer.seed values, one run each")
    bst.add_argument("--target-wer", type=float, default=None,
                     help="also time each run to its first validation WER at or below this (e.g. 0.05)")
    bst.add_argument("--out", default="runs/bench_straggler", help="folder for results.json and straggler.png")
    bst.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides for every run")
    bst.set_defaults(func=cmd_bench_straggler)
    bf = command(bsub, "features", "cost of decoding + resampling + features per second of audio, as JSON")
    bf.add_argument("--manifest", required=True, help="the audio to read (JSONL manifest)")
    bf.add_argument("--sample-rate", type=_positive(int), default=16000, help="rate the audio is resampled to")
    bf.add_argument("--kind", default="spectrogram", choices=FEATURE_KINDS, help="feature kind")
    bf.add_argument("--limit", type=_positive(int), default=300, help="utterances to read")
    bf.add_argument("--repeats", type=_positive(int), default=2, help="passes over them (the best counts)")
    bf.set_defaults(func=cmd_bench_features)
    bl = command(bsub, "loader", "training DataLoader throughput (x real time) by worker count, as JSON lines")
    bl.add_argument("--manifest", default=None,
                    help="the audio to load (default: ../shared/data/fsdd written as 16 kHz flac first)")
    bl.add_argument("--workers", default="0,1,2", help="comma-separated worker counts (0 = the main process)")
    bl.add_argument("--augment", default="both", choices=["off", "on", "both"], help="with augmentation or not")
    bl.add_argument("--sample-rate", type=_positive(int), default=16000, help="rate the audio is resampled to")
    bl.add_argument("--limit", type=_positive(int), default=400, help="utterances of the default corpus")
    bl.add_argument("--clip-seconds", type=float, default=0.0,
                    help="join FSDD clips into utterances at least this long (0 = the 0.5 s clips as they are)")
    bl.add_argument("--source", default="files", choices=["files", "shards", "both"],
                    help="loose files, tar shards of the same files, or both")
    bl.add_argument("--shard-size", type=_positive(int), default=100, help="utterances per shard (--source shards)")
    bl.add_argument("--batch-seconds", type=_positive(float), default=60.0, help="padded audio seconds per batch")
    bl.set_defaults(func=cmd_bench_loader)
    be = command(bsub, "export", "inference latency per clip: PyTorch vs ONNX Runtime vs TorchScript, as JSON")
    be.add_argument("--model", default="ds2-tiny", help="preset name(s), comma-separated")
    be.add_argument("--seconds", type=_positive(float), default=5.0, help="clip length")
    be.add_argument("--repeats", type=_positive(int), default=20, help="timed rounds (after 3 warm-up rounds)")
    be.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    be.set_defaults(func=cmd_bench_export)
    bv = command(bsub, "serve", "transcription service: requests/s and p50/p95 latency by client concurrency")
    bv.add_argument("--checkpoint", required=True, help="the checkpoint to serve")
    bv.add_argument("--seconds", type=_positive(float), default=5.0, help="clip length (real speech, JFK)")
    bv.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    bv.add_argument("--requests", type=_positive(int), default=64, help="requests per level")
    bv.set_defaults(func=cmd_bench_serve)
    bm = command(bsub, "memory", "loader process memory (RSS, measured) against corpus size: shards vs a manifest")
    bm.add_argument("--utterances", type=lambda x: [int(v) for v in x.split(",")], default=[10000, 100000],
                    help="comma-separated corpus sizes (a synthetic index over real shards)")
    bm.add_argument("--source", default="both", choices=["shards", "manifest", "both"], help="what to measure")
    bm.add_argument("--batches", type=_positive(int), default=50, help="batches to read after planning")
    bm.add_argument("--work-dir", default=None, help="where the corpus is written (default: a temporary folder)")
    bm.set_defaults(func=cmd_bench_memory)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.verbose = getattr(args, "verbose", 0)
    args.quiet = getattr(args, "quiet", False)
    _setup_logging(-1 if args.quiet else args.verbose)
    if args.quiet and hasattr(args, "overrides"):
        args.overrides = list(args.overrides) + ["trainer.progress=false"]
    from .config import ConfigError
    from .data.espeak import EspeakNotFound
    from .data.manifest import ManifestError
    from .storage.checkpoints import CheckpointError
    from .training.precision import LossScaleCollapsed
    from .training.prescan import PrescanError

    try:
        return args.func(args)
    except (ConfigError, ManifestError, CheckpointError, EspeakNotFound) as e:
        print(f"speechscale {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C during training, or one outside the training loop
        print(f"speechscale {args.command}: interrupted", file=sys.stderr)
        return 130
    except (PrescanError, LossScaleCollapsed) as e:  # the run stopped for a reason it explains
        print(f"speechscale {args.command}: stopped: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
