"""`speechscale synth` and `speechscale data import|download|shard|alphabet`: corpora in, manifests and shards out."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

from .args import Parser, non_negative, out_file_or_url, out_folder, out_folder_or_url, positive, sample_rate


def synth(args: argparse.Namespace) -> int:
    from ..data.synth import synthesize_corpus

    counts = synthesize_corpus(args.out, minutes=args.minutes, seed=args.seed, test_minutes=args.test_minutes,
                               progress=not args.quiet, text=args.text, sample_rate=args.sample_rate)
    print(json.dumps({"out": str(args.out), **counts}))
    return 0


def data_import(args: argparse.Namespace) -> int:
    from ..data.importers import import_corpus

    report = import_corpus(args.corpus, args.src, args.out, args.split, args.min_duration, args.max_duration)
    print(report.summary(), file=sys.stderr)
    print(json.dumps({"manifest": str(Path(args.out) / "manifest.jsonl"), "kept": report.kept,
                      "skipped": dict(report.reasons)}))
    return 0


def data_download(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..data.download import CORPORA, download

    if args.list:
        for name, c in CORPORA.items():
            print(f"{name:<28} {c.download_mb:>8g} MB ({c.size_mb:g} MB with what it unpacks to)  {c.about} [{c.licence}]")
        return 0
    if not args.corpus or not args.out:
        raise ConfigError("data download needs a corpus and --out DIR (--list shows the corpora)")
    checksums = {}
    for item in args.checksum or []:
        file, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--checksum {item!r}: expected FILE=md5:HEX or FILE=sha256:HEX")
        checksums[file] = value
    res = download(args.corpus, args.out, args.mirror, checksums, progress=not args.quiet,
                   keep_archives=args.keep_archives, timeout=args.timeout, confine_hosts=args.confine_hosts)
    for f in res["files"]:
        if f["checked"] == "no published checksum":
            print(f"speechscale data download: note: {f['file']} has no published checksum; its sha256 is "
                  f"{f['sha256']} (pin it with --checksum {f['file']}=sha256:{f['sha256']})", file=sys.stderr)
    if res.get("skipped"):
        print(f"speechscale data download: skipped {sum(res['skipped'].values())} recordings: "
              + ", ".join(f"{n} {why}" for why, n in res["skipped"].items()), file=sys.stderr)
    print(json.dumps(res))
    return 0


def data_shard(args: argparse.Namespace) -> int:
    from ..data.shards import write_shards

    print(json.dumps(write_shards(args.manifest, args.out, args.shard_size, args.codec, jobs=args.jobs)))
    return 0


def data_index(args: argparse.Namespace) -> int:
    from ..data.tar_index import index_tars

    print(json.dumps(index_tars(args.folder, args.pattern, args.out, args.text_field, progress=not args.quiet,
                                jobs=args.jobs, checksums=args.checksums), ensure_ascii=False))
    return 0


def data_verify(args: argparse.Namespace) -> int:
    from ..data.verify import verify_shards

    result = verify_shards(args.index, args.jobs, progress=not args.quiet)
    print(json.dumps(result, ensure_ascii=False))
    if result["unchecked"]:
        print(f"speechscale data verify: note: {result['unchecked']} utterances have no checksum in the index, so "
              "their bytes could not be checked (index other tools' tars with `data index --checksums`)",
              file=sys.stderr)
    return 1 if result["damaged"] else 0


def data_stats(args: argparse.Namespace) -> int:
    from ..data.stats import corpus_stats

    stats = corpus_stats(args.sources, args.top, args.by)
    if args.json:
        print(json.dumps(stats, ensure_ascii=False))
        return 0
    print(f"{'utterances':<22}{stats['utterances']}\n{'hours':<22}{stats['hours']}")
    if stats["utterances"]:
        d = stats["duration_s"]
        print(f"{'duration (s)':<22}min {d['min']}  median {d['p50']}  p90 {d['p90']}  p99 {d['p99']}  max {d['max']}")
        for bound, part in stats["longer_than_s"].items():
            print(f"{'longer than ' + bound + ' s':<22}{part['utterances']} utterances, {part['hours']} h")
        r = stats["letters_per_s"]
        print(f"{'letters per second':<22}p1 {r['p1']}  median {r['p50']}  p99 {r['p99']}")
        for name in ("fastest", "slowest"):
            for row in stats[name]:
                print(f"{name + ' spoken':<22}{row['letters_per_s']:>6} letters/s  {row['where']}")
        for field, n in stats["fields"].items():
            print(f"{'field ' + field:<22}{n} distinct values")
        for b in stats.get("by", {}).values():
            for row in b["largest"]:
                print(f"{b['field'] + ' ' + row['value']:<22}{row['utterances']} utterances, {row['hours']} h")
            if b["others"]["values"]:
                o = b["others"]
                print(f"{b['field'] + ' (' + str(o['values']) + ' more)':<22}{o['utterances']} utterances, {o['hours']} h")
    for reason, n in stats["skipped"].items():
        print(f"{'skipped':<22}{n} {reason}")
    return 0


def data_split(args: argparse.Namespace) -> int:
    from ..data.split import split_manifest

    print(json.dumps(split_manifest(args.manifest, args.out, args.by, args.dev, args.test, args.seed),
                     ensure_ascii=False))
    return 0


def data_alphabet(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..data.manifest import SkipReport
    from ..data.shards import transcripts
    from ..data.text import digits_language_known, suggest_alphabet

    if args.digits == "spell" and not digits_language_known(args.digits_language):
        raise ConfigError(f"--digits-language {args.digits_language!r} is not a language num2words spells numbers in")
    count = [0]

    def texts() -> Iterator[str]:
        for source in args.manifests:
            report, before = SkipReport(source), count[0]
            for text in transcripts(source, report):
                count[0] += 1
                yield text
            if count[0] == before:  # an alphabet of nothing would be no help
                raise ConfigError(f"{source}: no transcript read ({report.summary()})")

    found = suggest_alphabet(texts(), args.digits, args.digits_language, args.min_count)
    override = f"text.alphabet={json.dumps(found['alphabet'], ensure_ascii=False)}"
    print(json.dumps({**found, "utterances": count[0], "override": override}, ensure_ascii=False))
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `synth` and `data` to the subcommand table."""
    from ..data.importers import IMPORTERS

    s = command(sub, "synth", "synthesize the demo corpus with espeak-ng")
    s.add_argument("--out", required=True, type=out_folder, help="output folder (train.jsonl, test.jsonl, audio/)")
    s.add_argument("--minutes", type=positive(float), default=30.0, help="minutes of training audio")
    s.add_argument("--test-minutes", type=positive(float), default=None,
                   help="minutes of test audio (default 10%% of --minutes)")
    s.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same corpus")
    # data.synth.TEXTS, spelled out: importing data.synth here would cost every command 35 ms of start-up
    s.add_argument("--text", choices=["grammar", "digits"], default="grammar",
                   help="grammar: the demo's sentences in 12 voices; digits: one digit word each, in 344 voices")
    s.add_argument("--sample-rate", type=sample_rate, default=16000, help="sample rate of the written audio")
    s.set_defaults(func=synth)

    d = command(sub, "data", "corpora: download a public corpus, import a downloaded one into a manifest; shard; index "
                           "others' shards; statistics; train/dev/test splits; a language's alphabet")
    dsub = d.add_subparsers(dest="data", required=True, metavar="ACTION", parser_class=Parser)
    di = command(dsub, "import", "an already-downloaded corpus in its official layout -> OUT/manifest.jsonl")
    di.add_argument("corpus", choices=list(IMPORTERS), help="the corpus layout")
    di.add_argument("src", type=Path, help="the corpus folder (a CSV file for csv; a folder or file for parquet)")
    di.add_argument("--out", required=True, type=out_folder,
                    help="output folder (manifest.jsonl; kaldi, parquet: audio/)")
    di.add_argument("--split", default="", help="commonvoice: the .tsv name (default validated); mls, tedlium, "
                                                "kaldi: a split folder under SRC; parquet: a folder or file-name prefix")
    di.add_argument("--min-duration", type=non_negative(float), default=0.0, help="skip shorter utterances (seconds)")
    di.add_argument("--max-duration", type=non_negative(float), default=0.0,
                    help="skip longer utterances (seconds; 0 = no bound)")
    di.set_defaults(func=data_import)
    dd = command(dsub, "download", "a public corpus: download (resumable), check, unpack, import -> OUT/manifest.jsonl")
    dd.add_argument("corpus", nargs="?", default=None, help="the corpus (--list shows them)")
    dd.add_argument("--out", type=Path, default=None, help="output folder (manifest.jsonl, the audio, downloads/)")
    dd.add_argument("--list", action="store_true", help="list the corpora and exit")
    dd.add_argument("--mirror", default="", help="fetch every file from MIRROR/FILE instead of its published URL")
    dd.add_argument("--checksum", action="append", metavar="FILE=ALGO:HEX",
                    help="the checksum FILE must have (md5 or sha256), instead of the published one (repeatable)")
    dd.add_argument("--keep-archives", action="store_true", help="keep the archives in OUT/downloads after unpacking")
    dd.add_argument("--timeout", type=positive(float), default=10.0, help="seconds one read may wait for data")
    dd.add_argument("--confine-hosts", action="store_true",
                    help="follow redirects only to the corpus's own hosts (and --mirror's)")
    dd.set_defaults(func=data_download)
    ds = command(dsub, "shard", "a manifest -> tar shards (WebDataset layout) and OUT/index.jsonl, for streaming")
    ds.add_argument("manifest", help="the manifest to shard (its valid lines)")
    ds.add_argument("--out", required=True, type=out_folder_or_url, help="output folder or URL (shard-NNNNNN.tar, index.jsonl)")
    ds.add_argument("--shard-size", type=positive(int), default=1000, help="utterances per shard")
    ds.add_argument("--codec", choices=["flac"], default=None,
                    help="re-encode the audio as 16-bit FLAC (default: keep each file's bytes)")
    ds.add_argument("--jobs", type=positive(int), default=1, help="processes that write shards side by side")
    ds.set_defaults(func=data_shard)
    dx = command(dsub, "index", "tar shards another tool wrote (WebDataset layout) -> FOLDER/index.jsonl, for "
                                "streaming")
    dx.add_argument("folder", help="the folder of the tar shards, local or a URL (s3://bucket/corpus, ...)")
    dx.add_argument("--pattern", default="*.tar", help="the shards' file names under FOLDER (a glob; ** for subfolders)")
    dx.add_argument("--out", type=out_file_or_url, default=None,
                    help="the index to write (default FOLDER/index.jsonl); its folder holds the shards")
    dx.add_argument("--text-field", default=None,
                    help="the JSON members' transcript field (default: text, transcript or sentence, as the first "
                         "JSON member has; a KEY.txt member serves when there is none)")
    dx.add_argument("--jobs", type=positive(int), default=1, help="processes that read tars side by side")
    dx.add_argument("--checksums", action="store_true",
                    help="store each utterance's CRC-32 (each tar is read a second time, whole), so that training and "
                         "`data verify` catch bytes that change after indexing")
    dx.set_defaults(func=data_index)
    dv = command(dsub, "verify", "read every shard of an index and check each utterance's bytes against the index's "
                                 "CRC-32 (exit status 1 when any is damaged)")
    dv.add_argument("index", help="the shard index (a folder holding index.jsonl, the file, or a URL)")
    dv.add_argument("--jobs", type=positive(int), default=1, help="processes that read shards side by side")
    dv.set_defaults(func=data_verify)
    dt = command(dsub, "stats", "what manifests or shard indexes hold: hours, durations, speaking rates (transcripts "
                                "that may not fit their audio), fields")
    dt.add_argument("sources", nargs="+", help="JSONL manifests or shard indexes, counted together")
    dt.add_argument("--top", type=positive(int), default=5, help="the fastest and slowest spoken utterances to name")
    dt.add_argument("--by", action="append", default=None, metavar="KEY",
                    help="a manifest field (speaker, say): its values with the most hours (repeat it for several)")
    dt.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    dt.set_defaults(func=data_stats)
    dp = command(dsub, "split", "a manifest -> OUT/train.jsonl, dev.jsonl, test.jsonl (--by speaker: each speaker "
                                "in one split only)")
    dp.add_argument("manifest", help="the manifest to split (its valid lines)")
    dp.add_argument("--out", required=True, type=out_folder, help="output folder (train.jsonl, dev.jsonl, test.jsonl)")
    dp.add_argument("--by", default=None, help="a manifest field whose values are held out whole (speaker, say; "
                                               "audio_filepath: each recording); default: each utterance drawn on its "
                                               "own, a recording's segments (lines with an offset) together")
    dp.add_argument("--dev", type=non_negative(float), default=0.05, help="share of the hours for dev")
    dp.add_argument("--test", type=non_negative(float), default=0.05, help="share of the hours for test")
    dp.add_argument("--seed", type=int, default=0, help="the same seed gives the same split")
    dp.set_defaults(func=data_split)
    da = command(dsub, "alphabet", "the characters of manifests' transcripts: a text.alphabet for their language")
    da.add_argument("manifests", nargs="+", help="JSONL manifests (their text fields) or shard indexes")
    da.add_argument("--digits", choices=["spell", "drop", "keep"], default="spell",
                    help="digits as the run's text.digits will treat them")
    da.add_argument("--digits-language", default="en", help="the run's text.digits_language (num2words' code)")
    da.add_argument("--min-count", type=positive(int), default=1,
                    help="leave out characters seen fewer times (listed as rare)")
    da.set_defaults(func=data_alphabet)
