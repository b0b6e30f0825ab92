"""`speechscale label`: untranscribed audio -> a training manifest of a model's transcripts (pseudo-labels)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from ..inference.segments import MIN_SPEECH
from .args import (
    check_not_an_input,
    chunk_seconds,
    decoder_args,
    decoder_config,
    device_arg,
    out_file,
    positive,
    probability,
)


def _part(text: str) -> tuple[int, int]:
    from ..labelling import parse_part

    try:
        return parse_part(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def label(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..inference.transcribe import Transcriber
    from ..labelling import gather, label, part_of, rejected_path, summary

    if args.out.suffix != ".jsonl":
        raise ConfigError(f"--out {args.out}: the manifest written is JSONL; name it NAME.jsonl")
    check_not_an_input(args.out, [*args.sources, args.checkpoint], "--out")
    check_not_an_input(rejected_path(args.out), args.sources, "--out's rejected file")
    sources = gather(args.sources)
    if sources.bad_lines:
        print(f"{sources.bad_lines} source lines skipped (e.g. {sources.examples[0]})", file=sys.stderr)
    rows = part_of(sources.rows, args.part) if args.part else sources.rows
    if not rows:
        raise ConfigError(f"no recording to label in {', '.join(args.sources)}"
                          + (f" (part {args.part[0]}/{args.part[1]})" if args.part else ""))
    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds, backend=args.backend,
                      decoder=decoder_config(args), device=args.device, graphs=args.graphs)
    from tqdm import tqdm

    with tqdm(total=len(rows), desc="label", unit="file", disable=args.quiet or not sys.stderr.isatty()) as bar:
        counts = label(asr, rows, args.out, args.min_confidence, args.max_seconds, args.batch_size, args.resume,
                       bar.update, segment=not args.no_segment, min_speech=args.min_speech)
    print(json.dumps({**summary(args.out, asr.comps.normalizer), "this_run": vars(counts),
                      **({"part": f"{args.part[0]}/{args.part[1]}"} if args.part else {})}))
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `label` to the subcommand table."""
    from .decode import graphs_arg, model_args

    p = command(sub, "label", "untranscribed audio -> a training manifest of a model's transcripts (pseudo-labels), "
                              "each with its confidence; resumable, in parts")
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="a JSONL manifest (text and duration optional: a line's text is kept as `reference`, to "
                        "measure the labels), a folder (its audio files, recursively) or an audio file")
    p.add_argument("--out", required=True, type=out_file,
                   help="the manifest to write (NAME.jsonl); lines under --min-confidence, unreadable or too long go "
                        "to NAME.rejected.jsonl beside it")
    model_args(p)
    device_arg(p)
    decoder_args(p)
    graphs_arg(p)
    p.add_argument("--min-confidence", type=probability, default=0.0,
                   help="keep a transcript whose confidence (the mean of its words': the CTC path's mean probability "
                        "over each word's frames) is at least this")
    p.add_argument("--min-speech", type=probability, default=MIN_SPEECH,
                   help="a segment cut from a longer recording is kept when at least this share of it is sound (the "
                        "rest quiet); a share under it is silence that would be trained as words")
    p.add_argument("--max-seconds", type=positive(float), default=30.0,
                   help="a longer recording is cut at its pauses into segments of at most this, a line each with an "
                        "offset into it and `segment` K/N (training's data.max_duration; recordings up to 3 hours)")
    p.add_argument("--no-segment", action="store_true",
                   help="reject recordings longer than --max-seconds instead, without decoding them past it")
    p.add_argument("--part", type=_part, default=None, metavar="K/N",
                   help="label every N-th recording from the K-th (K from 1): N processes with the same sources "
                        "label each recording once between them")
    p.add_argument("--resume", action="store_true",
                   help="go on from the lines --out and its rejected file hold (a run stopped at any point loses "
                        "at most a batch)")
    p.add_argument("--batch-size", type=positive(int), default=8, help="recordings run through the model together")
    p.add_argument("--chunk-seconds", type=chunk_seconds, default=None, metavar="auto|SECONDS",
                   help="audio longer than this runs through the model in chunks cut at its pauses (>= 1; default "
                        "auto: as transcribe's)")
    p.set_defaults(func=label)
