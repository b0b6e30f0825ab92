"""`speechscale eval | transcribe | tune-lm | lm build`: a checkpoint's text for audio, and its error rates."""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from ..inference.segments import MIN_SPEECH
from .args import (
    DecoderDefaults,
    Parser,
    check_not_an_input,
    chunk_seconds,
    decoder_args,
    decoder_config,
    device_arg,
    endpoint_frames,
    model_file,
    out_file,
    out_folder,
    positive,
    probability,
    sample_rate,
)


def _write_details(path: str, res: Any, loader: Any) -> None:
    """eval --details: one JSON line per utterance with reference, hypothesis, WER and the word alignment, and where
    it is: from a manifest its audio, line number and the segment's `offset` when it has one (segments of a talk
    share a file); from a shard index its shard and member key."""
    from ..decoding.metrics import ErrorRate, align_words

    utts = getattr(loader.dataset, "utts", None)
    index = getattr(loader.dataset, "index", None)  # a shard index's utterances: a member of a shard each
    members: dict[int, list[Any]] = {}
    with open(path, "w", encoding="utf-8") as f:
        for i in sorted(res.hyps):
            m = ErrorRate()
            m.update([res.refs[i]], [res.hyps[i]])
            if utts:
                where = {"audio": utts[i].audio_path, "line": utts[i].line,
                         **({} if utts[i].offset is None else {"offset": utts[i].offset})}
            elif index is not None:
                shard, j = index.locate(i)
                key = members.setdefault(shard, index.members(shard))[j][0]
                where = {"audio": index.shards[shard].url, "member": key}
            else:
                where = {"audio": None}
            row = {"index": i, **where, "reference": res.refs[i], "hypothesis": res.hyps[i], "wer": round(m.wer, 4),
                   "alignment": align_words(res.refs[i], res.hyps[i])}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def evaluate(args: argparse.Namespace) -> int:
    from ..decoding.scoring import score_checkpoint

    check_not_an_input(args.details, [args.manifest, args.checkpoint, args.lm, args.lexicon], "--details")
    if args.by:
        _check_by(args.manifest, args.by)
    dcfg = decoder_config(args)
    wrap = None
    if args.graphs:
        from ..inference.graphed import FixedShapeForward, check_graphs_device

        check_graphs_device(args.device)  # before the checkpoint is read
        wrap = FixedShapeForward
    start = time.perf_counter()
    scores, res, loader = score_checkpoint(args.checkpoint, args.manifest, dcfg, args.batch_seconds, args.device,
                                           args.attention_chunk, wrap)
    seconds = time.perf_counter() - start  # the model's and the data's loading included
    fx = loader.dataset.features
    audio = res.frames * fx.hop_length / fx.cfg.sample_rate  # the audio scored (to a hop an utterance), how fast
    scores.update(audio_seconds=round(audio, 2), seconds=round(seconds, 2), rtfx=round(audio / seconds, 1))
    if args.details:
        _write_details(args.details, res, loader)
    out = {**scores, "manifest": str(args.manifest), "checkpoint": str(args.checkpoint), "decoder": args.decoder,
           **({"attention_chunk": args.attention_chunk} if args.attention_chunk else {}),
           **({"graphs": True} if args.graphs else {}),
           **({"alpha": dcfg.alpha, "beta": dcfg.beta} if dcfg.lm else {})}
    if args.by:
        from ..decoding.metrics import rates_by

        utts = loader.dataset.utts
        out["by"] = {field: rates_by(res.refs, res.hyps, {i: _duration_bucket(utts[i].duration) if field == DURATION
                                                          else _group(utts[i].extra, field) for i in res.hyps})
                     for field in args.by}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{'manifest':<12}{out['manifest']}\n{'utterances':<12}{out['utterances']}\n"
          f"{'skipped':<12}{out['skipped']}\n{'WER':<12}{100 * out['wer']:.2f} %\n{'CER':<12}{100 * out['cer']:.2f} %")
    if "rtfx" in out:
        print(f"{'audio':<12}{out['audio_seconds'] / 3600:.3g} h in {out['seconds']:.1f} s ({out['rtfx']:g} x real "
              f"time, loading included)")
    for field, groups in out.get("by", {}).items():
        width = max(len(field), *(len(name) for name in groups)) + 2
        print(f"\n{field:<{width}}{'utterances':>10}{'words':>8}{'WER':>10}{'CER':>10}")
        for name, g in groups.items():
            print(f"{name:<{width}}{g['utterances']:>10}{g['words']:>8}{100 * g['wer']:>8.2f} %{100 * g['cer']:>8.2f} %")
    return 0


_NO_VALUE = "(none)"  # eval --by: the group of utterances without the field


DURATION = "duration"  # eval --by duration: buckets of the utterances' lengths
_BUCKETS_S = (5, 10, 20, 30)


def _duration_bucket(seconds: float) -> str:
    """The eval --by duration group of an utterance `seconds` long."""
    if seconds < _BUCKETS_S[0]:
        return f"under {_BUCKETS_S[0]} s"
    for low, high in zip(_BUCKETS_S, _BUCKETS_S[1:]):
        if seconds < high:
            return f"{low}-{high} s"
    return f"{_BUCKETS_S[-1]} s and over"


def _group(extra: dict[str, Any], field: str) -> str:
    value = extra.get(field)
    return _NO_VALUE if value is None or value == "" else str(value)


def _check_by(manifest: str, fields: list[str]) -> None:
    """eval --by: each field is a key some line of `manifest` has (read before the model is)."""
    from ..config import ConfigError
    from ..data.manifest import REQUIRED, SkipReport, iter_manifest
    from ..data.shards import is_shard_index

    if is_shard_index(manifest):
        raise ConfigError("--by groups by a manifest's keys, which a shard index does not keep: give the manifest the "
                          "shards came from")
    wanted, keys = {f for f in fields if f != DURATION}, set()
    for u in iter_manifest(manifest, SkipReport(manifest), check_files=False):
        keys.update(u.extra)
        if wanted <= keys:  # read no further than the line that shows the last of them
            return
    for field in sorted(wanted - keys):
        raise ConfigError(f"--by {field}: no line of {manifest} has that key (its keys besides "
                          f"{', '.join(REQUIRED)}: {', '.join(sorted(keys)) or 'none'}; or --by duration)")


def _references(manifest: str | None) -> dict[str, str]:
    """Resolved audio path -> reference text, from a manifest (empty without one)."""
    if manifest is None:
        return {}
    from ..config import ConfigError
    from ..data.manifest import read_manifest

    utts, report = read_manifest(manifest, check_files=False)
    if not utts:
        raise ConfigError(f"--manifest {manifest}: no reference read ({report.summary()})")
    if any(u.offset is not None for u in utts):
        raise ConfigError(f"--manifest {manifest}: its lines are segments of recordings (an offset); transcribe "
                          f"gives a whole file's text: score segments with eval --manifest")
    return {str(Path(u.audio_path).resolve()): u.raw_text for u in utts}


def _read(f: str, rate: int) -> Any:
    """transcribe's reader: a file, or (-) the one on standard input."""
    from ..data.audio import load_audio

    return _standard_input(rate) if f == "-" else load_audio(f, rate)


def _standard_input(rate: int) -> Any:
    """The audio file piped to standard input (any format load_audio reads), at `rate`."""
    import sys

    from ..data.audio import decode_audio

    return decode_audio(sys.stdin.buffer.read(), "standard input", rate)


def stream(args: argparse.Namespace) -> int:
    """transcribe --stream: feed FILE (or raw 16-bit mono PCM from standard input, '-') in 100 ms chunks, in real
    time unless --no-realtime; partials in place on a terminal, finals as lines (JSON lines with --json)."""
    import sys
    import time

    import numpy as np

    from ..config import ConfigError
    from ..streaming.opener import open_streams
    from ..streaming.session import StreamingRefused

    if len(args.files) != 1:
        raise ConfigError("--stream takes one FILE (or - for raw 16-bit mono PCM on standard input)")
    streams = open_streams(args.checkpoint, args.device, args.step_ms, flag="--step-ms")
    comps = streams.comps
    source = args.files[0]
    if source == "-":
        rate = args.rate or comps.features.cfg.sample_rate
        chunks = _pcm_chunks(sys.stdin.buffer, rate)
    else:
        import soundfile as sf

        from ..data.audio import AudioError, check_file, load_audio

        check_file(source, ConfigError)
        try:
            rate = sf.info(source).samplerate
            chunks = (block.mean(axis=1) for block in sf.blocks(source, blocksize=max(1, rate // 10),
                                                                dtype="float32", always_2d=True))
        except Exception:  # not a format soundfile reads block by block: decoded whole (m4a, webm: data.media)
            rate = comps.features.cfg.sample_rate
            try:
                wav = load_audio(source, rate)
            except AudioError as e:
                raise ConfigError(str(e)) from None
            chunks = (wav[i:i + rate // 10] for i in range(0, len(wav), rate // 10))
    try:
        dcfg = decoder_config(args)
        decoder = None
        if dcfg.name != "greedy":  # searched incrementally, a phrase at a time
            from ..decoding.decoders import build_decoder

            decoder = build_decoder(dcfg, comps.tokenizer, comps.normalizer)
        session = streams.session(sample_rate=rate, endpoint_frames=args.endpoint_frames, decoder=decoder)
    except StreamingRefused as e:
        raise ConfigError(f"--stream: {e}") from None
    if args.digits:
        from ..decoding.digits import check_written_digits

        try:
            check_written_digits(comps.normalizer.digits_language)
        except ValueError as e:
            raise ConfigError(f"--digits: {e}") from None
    tty = sys.stdout.isatty() and not args.json
    started = time.monotonic()
    fed = 0.0

    def show(events: list[Any]) -> None:
        for e in events:  # streaming.events: Partial | Final
            e = e.in_digits(comps.normalizer.digits_language) if args.digits and e.type == "final" else e
            if args.json:
                print(json.dumps(e.to_dict()), flush=True)
            elif e.type == "final":
                print(("\r\033[K" if tty else "") + e.text, flush=True)
            elif tty:
                print("\r\033[K" + e.text, end="", flush=True)

    for chunk in chunks:
        show(session.accept(np.asarray(chunk, dtype=np.float32)))
        fed += len(chunk) / rate
        if args.realtime:  # as a microphone delivers it
            time.sleep(max(0.0, started + fed - time.monotonic()))
    show(session.finish())
    return 0


def _pcm_chunks(stream: Any, rate: int) -> Any:
    import numpy as np

    size = 2 * max(1, rate // 10)  # 100 ms of 16-bit samples
    while data := stream.read(size):
        yield np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0


def transcribe(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..decoding.metrics import ErrorRate
    from ..inference.transcribe import Transcriber, transcribe_files
    from ..storage.files import write_bytes

    if args.json and args.format not in ("text", "json"):  # text is --format's default: not a choice made
        raise ConfigError(f"--json prints JSON; --format {args.format} writes subtitles: give one")
    fmt = "json" if args.json else args.format
    if args.stream and args.skip_existing:
        raise ConfigError("--skip-existing goes with --out-dir; a stream (--stream) prints as it goes")
    if args.stream:
        if args.graphs:
            raise ConfigError("--graphs runs whole batches; a stream (--stream) runs the model's streaming step")
        if fmt not in ("text", "json"):
            raise ConfigError(f"--format {fmt} writes a whole file's subtitles; a stream (--stream) prints text or "
                              "--json lines")
        return stream(args)
    if args.step_ms is not None:
        raise ConfigError("--step-ms sets a stream's step: it goes with --stream")
    if args.files.count("-") > 1:
        raise ConfigError("- (the file on standard input) can be named once")
    args.files, names = _files_in_folders(args.files)
    outputs = _output_paths(args.files, fmt, args.out_dir, args.manifest, names)
    if args.skip_existing and not outputs:
        raise ConfigError("--skip-existing passes over inputs whose output file is there: it goes with --out-dir")
    if args.skip_existing:  # a job resumed: what was written whole before stays (each file is renamed into place)
        there = {f for f in args.files if outputs[f].exists()}
        for f in (f for f in args.files if f in there):
            print(f"{f}\t{outputs[f]} (there already)", flush=True)
        args.files = [f for f in args.files if f not in there]
        if not args.files:
            return 0
    refs = _references(args.manifest)
    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds, backend=args.backend,
                      decoder=decoder_config(args), device=args.device, graphs=args.graphs)
    if args.digits:
        from ..decoding.digits import check_written_digits, written

        try:
            check_written_digits(asr.comps.normalizer.digits_language)
        except ValueError as e:
            raise ConfigError(f"--digits: {e}") from None
    failed = 0
    for f, res in transcribe_files(asr, args.files, args.batch_size, _read):
        if "error" in res:
            failed += 1
        ref = refs.get(str(Path(f).resolve()))
        if ref is not None and "text" in res:
            score = ErrorRate()  # on the words as spoken, as the model was trained and scored
            score.update([asr.comps.normalizer(ref)], [res["text"]])
            res.update(reference=ref, wer=round(score.wer, 4))
        if args.digits and "text" in res:
            res = written(res, asr.comps.normalizer.digits_language)
        if fmt == "json" and (outputs is None or "error" in res):
            print(json.dumps(res), flush=True)
        elif "error" in res:
            print(f"{f}\tERROR: {res['error']}", flush=True)
        elif ref is not None:
            print(f"{f}\n  hypothesis: {res['text']}\n  reference:  {ref}\n  WER:        {100 * res['wer']:.1f} %",
                  flush=True)
        elif fmt in ("srt", "vtt"):
            _write_subtitles(f, res, fmt, outputs.get(f) if outputs is not None else None)
        elif outputs is not None:  # --out-dir: a file each
            write_bytes(outputs[f], (json.dumps(res) if fmt == "json" else res["text"]).encode() + b"\n")
            print(f"{f}\t{outputs[f]}", flush=True)
        else:
            print(f"{f}\t{res['text']}", flush=True)
    return 1 if failed else 0


def _files_in_folders(files: list[str]) -> tuple[list[str], dict[str, str]]:
    """`files` with each local folder replaced by the audio files under it, in name order (ConfigError when it holds
    none); and the name each one's output file takes in --out-dir: its path below its folder, without its suffix."""
    from ..config import ConfigError
    from ..data.audio import AUDIO_EXTENSIONS, audio_files_under
    from ..storage import is_remote

    out: list[str] = []
    names: dict[str, str] = {}
    for f in files:
        if f == "-" or is_remote(f) or not Path(f).is_dir():
            out.append(f)
            continue
        found = audio_files_under(Path(f))
        if not found:
            raise ConfigError(f"{f}: a folder with no audio files under it (named {', '.join(sorted(AUDIO_EXTENSIONS))})")
        for p in found:
            out.append(str(p))
            names[str(p)] = p.relative_to(f).with_suffix("").as_posix()
    return out, names


def _write_subtitles(f: str, res: dict[str, Any], fmt: str, out: Path | None) -> None:
    """`res`'s timed words as subtitles in `fmt`: to `out` (and its name printed beside `f`'s), or to standard output."""
    from ..inference.subtitles import make_cues, render

    text = render(make_cues(res["words"], res["duration"]), fmt)
    if out is None:
        print(text, end="", flush=True)
        return
    from ..storage.files import write_bytes

    write_bytes(out, text.encode())  # whole or not at all: --skip-existing trusts a file that is there
    print(f"{f}\t{out}", flush=True)


def _output_paths(files: list[str], fmt: str, out_dir: Path | None, manifest: str | None,
                  names: dict[str, str] | None = None, text_files: bool = True) -> dict[str, Path] | None:
    """The file each input's output goes to with --out-dir (DIR/NAME.txt, .json, .srt or .vtt; NAME from `names`,
    else the input's stem), {} for one input's subtitles on standard output, None when text or JSON is printed.
    `text_files`: text and JSON may go to files too (transcribe), else --out-dir is for subtitles (align). Checked
    before any work: one line for what cannot be."""
    from ..config import ConfigError

    subtitles = fmt in ("srt", "vtt")
    if out_dir is None:
        if subtitles and len(files) > 1:
            raise ConfigError(f"--format {fmt} for {len(files)} files writes a file each: give --out-dir DIR")
        if subtitles and manifest:
            raise ConfigError(f"--manifest prints references and WER beside the text; --format {fmt} writes subtitles")
        return {} if subtitles else None
    if not subtitles and not text_files:
        raise ConfigError("--out-dir holds subtitle files: it goes with --format srt or vtt")
    if manifest:
        raise ConfigError("--manifest prints references and WER beside the text; --out-dir writes a file for each input")
    suffix = fmt if subtitles else {"text": "txt", "json": "json"}[fmt]
    paths: dict[str, Path] = {}
    taken: set[Path] = set()  # a folder's thousands of files: each name looked up once
    for f in files:
        out = out_dir / f"{'stdin' if f == '-' else (names or {}).get(f, Path(f).stem)}.{suffix}"
        if out in taken:
            raise ConfigError(f"two inputs named {out.stem!r} would both write {out}; transcribe them apart")
        paths[f] = out
        taken.add(out)
    for parent in {p.parent for p in paths.values()}:
        parent.mkdir(parents=True, exist_ok=True)
    return paths


def align(args: argparse.Namespace) -> int:
    """`align`: each FILE's (or manifest utterance's) transcript timed on its audio."""
    from ..config import ConfigError
    from ..inference.align import MIN_SEGMENT_SECONDS

    if args.text is not None and args.text_file is not None:
        raise ConfigError("give the transcript once: --text \"...\" or --text-file PATH")
    if args.text_file is not None:
        from ..storage.files import text_lines

        try:
            args.text = "".join(text_lines(args.text_file))
        except OSError as e:
            raise ConfigError(f"--text-file {args.text_file}: {e.strerror or e}") from None
    if args.manifest and (args.files or args.text is not None):
        raise ConfigError("--manifest aligns each of its utterances to its own text: give no FILE or --text with it")
    if not args.manifest and (len(args.files) != 1 or args.text is None):
        raise ConfigError("align one FILE to its --text \"...\" or --text-file (or every utterance of a --manifest to "
                          "its text)")
    if not args.segment_seconds >= MIN_SEGMENT_SECONDS:
        raise ConfigError(f"--segment-seconds={args.segment_seconds}: segments must be at least "
                          f"{MIN_SEGMENT_SECONDS:g} s long")
    if args.out_manifest is not None:
        _check_out_manifest(args)
    elif (args.max_seconds, args.min_confidence, args.min_speech, args.resume) != (30.0, 0.0, MIN_SPEECH, False):
        raise ConfigError("--max-seconds, --min-confidence, --min-speech and --resume shape the lines --out-manifest "
                          "writes: give it too")
    from ..data.audio import AudioError
    from ..data.manifest import Utterance, read_manifest

    skipped = 0
    if args.manifest:
        utts, report = read_manifest(args.manifest, check_files=False)
        if not utts:
            raise ConfigError(f"--manifest {args.manifest}: nothing to align ({report.summary()})")
        if report.skipped:  # said before any work, and the run exits 1
            import sys

            print(report.summary(), file=sys.stderr, flush=True)
            skipped = report.skipped
    else:
        utts = [Utterance(args.files[0], 0.0, args.text, args.text, 0)]
    subtitles = _output_paths([u.audio_path for u in utts], args.format, args.out_dir, None, text_files=False)
    from ..inference.align import AlignError, align_waveform
    from ..inference.transcribe import Transcriber

    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds, backend=args.backend, device=args.device)
    failed, cut = 0, _SegmentWriter(args) if args.out_manifest is not None else None
    for u in utts:
        f = u.audio_path
        if cut is not None and cut.done(u):
            print(json.dumps({"file": str(f), "written": "already"}), flush=True)
            continue
        try:
            wav = u.load(asr.sample_rate)
            res = {"file": str(f), **align_waveform(asr, wav, u.raw_text, args.segment_seconds)}
        except (AudioError, AlignError) as e:
            failed += 1
            res = {"file": str(f), "error": str(e)}
        else:
            if res["speech_covered"] < COVERED_WARN:
                import sys

                spans = ", ".join(f"{a:g}-{b:g} s" for a, b in res["untimed"][:3])
                print(f"warning: {f}: the transcript covers {100 * res['speech_covered']:.0f} % of the speech"
                      + (f"; no word times {spans}" if spans else "") + " (is the text the whole recording's?)",
                      file=sys.stderr, flush=True)
        if cut is not None and "error" not in res:
            print(json.dumps(cut.write(u, res, wav, asr.sample_rate)), flush=True)
            continue
        if u.offset is not None and "error" not in res:  # times in the recording, not in its segment
            res = {**res, "offset": u.offset, "words": [{**w, "start": round(w["start"] + u.offset, 3),
                                                         "end": round(w["end"] + u.offset, 3)} for w in res["words"]]}
        if args.format == "json" or "error" in res:
            print(json.dumps(res), flush=True)
        else:
            _write_subtitles(f, res, args.format, subtitles.get(f))
    if cut is not None:
        print(json.dumps(cut.close(asr.comps.normalizer)), flush=True)
    return 1 if failed or skipped else 0


COVERED_WARN = 0.8  # align warns when its transcript's words cover less of the recording's speech


def _check_out_manifest(args: argparse.Namespace) -> None:
    """align --out-manifest: a new JSONL file, not an input, with JSON output; one line before any work."""
    from ..config import ConfigError
    from ..labelling import rejected_path

    out = args.out_manifest
    if out.suffix != ".jsonl":
        raise ConfigError(f"--out-manifest {out}: the manifest written is JSONL; name it NAME.jsonl")
    if args.format != "json":
        raise ConfigError(f"--out-manifest writes training lines; --format {args.format} writes subtitles: give one")
    check_not_an_input(out, [*args.files, args.manifest, args.checkpoint], "--out-manifest")
    if not args.resume:
        for f in (out, rejected_path(out)):
            if f.is_file() and f.stat().st_size:
                raise ConfigError(f"{f} holds lines already: --resume goes on from them, or write elsewhere")


class _SegmentWriter:
    """align --out-manifest: each aligned recording cut at its pauses into training lines (labelling),
    on disk before the next recording is aligned; with --resume, appended to what the files hold."""

    def __init__(self, args: argparse.Namespace) -> None:
        from ..labelling import Counts, rejected_path, segment_place, whole_lines

        self.out, self.max_seconds, self.min_confidence = args.out_manifest, args.max_seconds, args.min_confidence
        self.min_speech = args.min_speech
        self.out.parent.mkdir(parents=True, exist_ok=True)
        # recording -> (offset, N) of each segment line written: a last line cut short is cut off its file first
        self.written: dict[str, list[tuple[float, int]]] = {}
        for rec in (r for f in (self.out, rejected_path(self.out)) if args.resume for r in whole_lines(f)):
            try:
                self.written.setdefault(rec["audio_filepath"], []).append(segment_place(rec))
            except (KeyError, TypeError, ValueError):  # not a line align wrote
                continue
        mode = "a" if args.resume else "w"
        self.keep = self.out.open(mode, encoding="utf-8")
        self.drop = rejected_path(self.out).open(mode, encoding="utf-8")
        self.counts = Counts()

    def _offsets(self, u: Any) -> tuple[set[float], int]:
        """The offsets of the lines written of recording (or manifest segment) `u`, and how many it was cut into."""
        start = u.offset or 0.0
        end = float("inf") if u.offset is None else start + u.duration
        lines = [(o, n) for o, n in self.written.get(str(Path(u.audio_path).resolve()), []) if start <= o < end]
        return {o for o, _ in lines}, max((n for _, n in lines), default=0)

    def done(self, u: Any) -> bool:
        """Whether every line of `u` is written already (--resume)."""
        offsets, n = self._offsets(u)
        return n > 0 and len(offsets) >= n

    def write(self, u: Any, res: dict[str, Any], wav: Any, rate: int) -> dict[str, Any]:
        """Write the lines of one aligned recording (or manifest segment: `u`), its audio `wav` at `rate`, but those
        written already; what it gave."""
        from ..inference.segments import cut_at_pauses, in_speech
        from ..labelling import segment_lines, with_speech

        before = self.counts.kept
        row = {"audio_filepath": str(Path(u.audio_path).resolve()), **u.extra}
        words, pauses, runs = in_speech(res["words"], wav, rate)  # timed in `wav`: in the segment when `u` has one
        cut = with_speech(cut_at_pauses(words, res["duration"], self.max_seconds, pauses), runs, res["untimed"])
        shift = u.offset or 0.0
        have = self._offsets(u)[0]
        lines = segment_lines(row, cut, self.max_seconds, self.min_confidence, self.counts,
                              written={s.start for s in cut if round(s.start + shift, 3) in have},
                              min_speech=self.min_speech)
        for line, keep in lines:
            line["offset"] = round(line["offset"] + shift, 3)
            (self.keep if keep else self.drop).write(json.dumps(line, ensure_ascii=False) + "\n")
        for handle in (self.keep, self.drop):  # on disk before the next recording is aligned
            handle.flush()
            os.fsync(handle.fileno())
        return {"file": res["file"], "duration": res["duration"], "segments": len(cut),
                "kept": self.counts.kept - before, "speech_covered": res["speech_covered"], "untimed": res["untimed"]}

    def close(self, normalize: Any) -> dict[str, Any]:
        """Close the files; labelling's summary of them."""
        from ..labelling import summary

        self.keep.close()
        self.drop.close()
        return {**summary(self.out, normalize), "this_run": vars(self.counts)}


def tune_lm(args: argparse.Namespace) -> int:
    from ..components import load_components
    from ..decoding.decoders import DecoderConfig, build_decoder
    from ..decoding.scoring import manifest_loader
    from ..decoding.tune import cache_log_probs, tune, write_tuned

    comps = load_components(args.checkpoint, "cpu")
    # a missing or unreadable LM or lexicon: one line before the manifest is read
    build_decoder(DecoderConfig("lexicon" if args.lexicon else "beam", lm=args.lm, lexicon=args.lexicon or ""),
                  comps.tokenizer)
    loader, _ = manifest_loader(comps, args.manifest)
    cache = cache_log_probs(comps.model, loader)
    best = tune(cache, comps.tokenizer, args.lm, args.trials, args.beam_width, args.lexicon or "")
    print(json.dumps({**best, "written": str(write_tuned(args.lm, best, args.manifest))}))
    return 0


def lm_build(args: argparse.Namespace) -> int:
    from ..decoding.lm import build_arpa

    check_not_an_input(args.out, [args.text, args.checkpoint], "--out")
    normalize = None
    if args.checkpoint:
        from ..components import load_components

        normalize = load_components(args.checkpoint, "cpu").normalizer
    print(json.dumps(build_arpa(args.text, args.order, args.out, normalize)))
    return 0


def model_args(p: argparse.ArgumentParser) -> None:
    """--checkpoint and --backend of transcribe and align: a checkpoint, or an exported file and its runtime."""
    p.add_argument("--checkpoint", required=True, type=model_file,
                   help="a speechscale checkpoint (.pt) or a file `speechscale export` wrote, each a local path or a URL "
                        "(an export's named .onnx, .ts or .torchscript), or a run folder (its best.pt)")
    p.add_argument("--backend", default="auto", choices=["auto", "torch", "onnx", "torchscript"],
                   help="run the model in PyTorch, onnxruntime or TorchScript (auto: the one the file needs)")


def graphs_arg(p: argparse.ArgumentParser) -> None:
    """--graphs: batches padded to a few fixed shapes, each shape's forward replayed as a CUDA graph."""
    p.add_argument("--graphs", action="store_true",
                   help="on a CUDA device: pad each batch to one of a few shapes and replay its forward as a CUDA "
                        "graph (one capture per shape)")


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `eval`, `transcribe`, `align`, `tune-lm` and `lm` to the subcommand table."""
    e = command(sub, "eval", "WER/CER of a checkpoint on a manifest or shard index")
    e.add_argument("--checkpoint", required=True, type=model_file,
                   help="a speechscale checkpoint (.pt), local path or URL, or a run folder (its best.pt)")
    e.add_argument("--manifest", required=True,
                   help="JSONL manifest with audio_filepath, duration, text; or a shard index (index.jsonl, its "
                        "folder or an fsspec URL)")
    e.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    e.add_argument("--details", type=out_file, default=None,
                   help="write per-utterance reference, hypothesis and alignment (JSONL)")
    e.add_argument("--by", action="append", default=None, metavar="KEY",
                   help="WER and CER of each value of this manifest key too (speaker, accent, a domain...; "
                        "duration: by length, under 5 s to 30 s and over; repeatable)")
    device_arg(e)
    decoder_args(e)
    # decoding.scoring.EVAL_BATCH_SECONDS, written out: the parser is built before torch is imported
    e.add_argument("--batch-seconds", type=positive(float), default=120.0,
                   help="audio seconds per evaluation batch (lower it if memory runs out)")
    e.add_argument("--attention-chunk", type=positive(int), default=None, metavar="FRAMES",
                   help="a streaming conformer: attend in chunks of FRAMES output frames, as it streams with "
                        "that chunk (default: the full context)")
    graphs_arg(e)
    e.set_defaults(func=evaluate)

    r = command(sub, "transcribe", "transcribe audio files (any format, rate, channels, length)")
    model_args(r)
    device_arg(r)
    r.add_argument("--batch-size", type=positive(int), default=8, help="files run through the model together")
    graphs_arg(r)
    decoder_args(r)
    r.add_argument("files", nargs="+", metavar="FILE",
                   help="audio files to transcribe (wav, flac, ogg, mp3, ...; m4a, mp4, webm, aac with speechscale[media]), "
                        "local or URLs (http(s)://, s3://, gs://, ...), or folders (every audio file under one, by name); "
                        "- reads one from standard input")
    r.add_argument("--digits", action="store_true",
                   help="write numbers in digits: $5.50, 1990, 21st, 10:05, 2.5%% (English; de, fr, es, it, pt, nl "
                        "with speechscale[digits])")
    r.add_argument("--json", action="store_true", help="one JSON object per file (--format json)")
    r.add_argument("--format", choices=["text", "json", "srt", "vtt"], default="text",
                   help="a line of text per file, a JSON object per file, or subtitles (SRT or WebVTT: cues of up "
                        "to two lines of 42 characters and 7 s, a new cue after a pause)")
    r.add_argument("--out-dir", type=out_folder, default=None,
                   help="write each FILE's output to DIR/NAME.txt (.json, .srt or .vtt, as --format says; a folder's "
                        "files under their paths in it) instead of standard output (needed for several files' "
                        "subtitles)")
    r.add_argument("--skip-existing", action="store_true",
                   help="--out-dir: pass over inputs whose output file is there already (a folder's job resumed "
                        "after an interruption; each file is written whole)")
    r.add_argument("--chunk-seconds", type=chunk_seconds, default=None, metavar="auto|SECONDS",
                   help="long audio is cut at its pauses into chunks of at most this length (>= 1; default auto: "
                        "1.5 times the 90th-percentile length of the model's training utterances, from its card, "
                        "20 s when the card does not say)")
    r.add_argument("--manifest", default=None,
                   help="a manifest holding these files: print each one's reference text and WER beside it")
    r.add_argument("--stream", action="store_true",
                   help="live transcription of one FILE (or - : raw 16-bit mono PCM on standard input) by a "
                        "streaming model: partial text in place, a line per phrase")
    r.add_argument("--no-realtime", dest="realtime", action="store_false",
                   help="--stream: feed the audio as fast as it is computed, not in real time")
    r.add_argument("--rate", type=sample_rate, default=None,
                   help="--stream -: the sample rate of standard input's PCM (default: the model's)")
    r.add_argument("--endpoint-frames", type=endpoint_frames, default=30,
                   help="--stream: output frames of blank or space that end a phrase")
    r.add_argument("--step-ms", type=positive(float), default=None,
                   help="--stream: audio per model step, rounded up to whole output frames (default 100); a "
                        "streaming conformer attends in chunks of a step's frames")
    r.set_defaults(func=transcribe)

    a = command(sub, "align", "time a known transcript's words on its recording (CTC forced alignment)")
    model_args(a)
    device_arg(a)
    a.add_argument("files", nargs="*", metavar="FILE", help="the recording (any format, rate, channels)")
    a.add_argument("--text", default=None, help="FILE's transcript (any case and punctuation)")
    a.add_argument("--text-file", default=None, metavar="PATH", help="FILE's transcript, read from this UTF-8 file")
    a.add_argument("--manifest", default=None,
                   help="align every utterance of this manifest to its text instead (no FILE)")
    a.add_argument("--format", choices=["json", "srt", "vtt"], default="json",
                   help="a JSON object per file (its words with start, end, confidence), or subtitles")
    a.add_argument("--out-dir", type=out_folder, default=None,
                   help="--format srt|vtt: write each file's subtitles to DIR/NAME.srt (or .vtt)")
    a.add_argument("--chunk-seconds", type=chunk_seconds, default=None, metavar="auto|SECONDS",
                   help="long audio runs through the model in chunks cut at its pauses, at most this long (default "
                        "auto: as transcribe's)")
    a.add_argument("--segment-seconds", type=float, default=120.0,
                   help="longer audio is aligned a segment of about this long at a time (memory: a byte per output "
                        "frame and character of a segment)")
    a.add_argument("--out-manifest", type=out_file, default=None, metavar="NAME.jsonl",
                   help="write training lines instead: each recording cut at the pauses between its aligned words "
                        "into segments of at most --max-seconds (offset, duration, text, confidence, segment K/N); "
                        "those under --min-confidence go to NAME.rejected.jsonl")
    a.add_argument("--max-seconds", type=positive(float), default=30.0,
                   help="--out-manifest: the longest segment (training's data.max_duration)")
    a.add_argument("--min-confidence", type=probability, default=0.0,
                   help="--out-manifest: keep a segment whose words' mean alignment confidence is at least this (a "
                        "transcript that does not match its audio aligns with low confidence)")
    a.add_argument("--min-speech", type=probability, default=MIN_SPEECH,
                   help="--out-manifest: keep a segment when at least this share of it is sound (the rest quiet)")
    a.add_argument("--resume", action="store_true",
                   help="--out-manifest: go on from the lines its files hold (after a crash or kill): a recording "
                        "whose lines are all written is skipped, one cut short gets the lines it lacks")
    a.set_defaults(func=align)

    tl = command(sub, "tune-lm", "search the LM weight and word bonus on a dev set (the model runs once)")
    tl.add_argument("--checkpoint", required=True, type=model_file, help="a speechscale checkpoint, or a run folder")
    tl.add_argument("--manifest", required=True, help="the dev set (manifest or shard index)")
    tl.add_argument("--lm", required=True, help="the KenLM model to tune for")
    tl.add_argument("--lexicon", default=None, help="tune the lexicon decoder with this word list instead")
    tl.add_argument("--trials", type=positive(int), default=30, help="decoding passes over the cached output")
    tl.add_argument("--beam-width", type=positive(int), default=DecoderDefaults.beam_width,
                    help="beam width during the search (eval, transcribe and serve decode with the same default)")
    tl.set_defaults(func=tune_lm)

    lm = command(sub, "lm", "language models: build a Kneser-Ney ARPA model from text")
    lsub = lm.add_subparsers(dest="lm_action", required=True, metavar="ACTION", parser_class=Parser)
    lb = command(lsub, "build", "text (one sentence a line, or a manifest's transcripts) -> a Kneser-Ney ARPA model "
                                "with <unk>")
    lb.add_argument("text", help="a text file, one sentence a line, or a JSONL manifest or shard index (its "
                                 "transcripts); normalized as training targets are")
    lb.add_argument("--order", type=positive(int), default=3, help="n-gram order (2 to 6)")
    lb.add_argument("--checkpoint", default=None, type=model_file,
                    help="normalize the text as this model's training targets were (its text.alphabet and digits; "
                         "another language's letters need it); default: the English alphabet")
    lb.add_argument("--out", required=True, type=out_file, help="the ARPA file to write")
    lb.set_defaults(func=lm_build)
