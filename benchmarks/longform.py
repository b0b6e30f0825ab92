"""Long recordings cut into training segments: the selftrain pool's sentences joined into recordings of a few minutes,
cut at their pauses by `align --out-manifest` (with their transcript) and by `label` (without one), each fine-tuning
the teacher as the same sentences cut by hand do.

    python -m benchmarks.longform --teacher runs/demo/checkpoints/last.pt [--per-recording 26] [--max-seconds 15]
        [--seeds 1,2,3] [--work runs/selftrain] [--out docs/figures/bench-all/longform-demo.json]

The pool and runs are benchmarks/selftrain's (the same --work reuses its finished runs). Each recording joins
`--per-recording` pool sentences in order with a pause of 0.25-1 s (drawn) between them, so each sentence's span in
it is known. The cuts: every boundary between two segments is scored against those spans (in a pause between two
sentences, or inside one), and each segment's text against the sentences its span holds (WER). The cutter's
ablation: the aligned words and greedy's, each cut at the pauses in the audio and at the gaps their own times
leave, and greedy's segments decoded again on their own (label's way) against greedy on each sentence's file. The
arms fine-tune the teacher on the training data plus the pool: as sentence files with their true text (cut by hand)
or with the LM's labels (selftrain's `lm` arm), or as the long recordings' segments from `align` (true text; also at
most `--short-seconds`, near a sentence each) or `label` (LM labels); and the control, nothing added. Outside the
package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit
from benchmarks.selftrain import _rows, _write, open_pool, pool_args, run_arm, run_label, run_writing, score

LM_FLAGS = ["--decoder", "beam", "--alpha", "0.5", "--beta", "1"]
POOL_GAP = (0.25, 1.0)  # s: the pause drawn between two of the pool's sentences in one long recording


def join_pool(pool: list[dict[str, Any]], per_recording: int, seed: int, folder: Path,
              gap: tuple[float, float] = POOL_GAP) -> list[dict[str, Any]]:
    """The pool's sentences joined `per_recording` at a time into FOLDER/long-NNN.wav with a drawn pause of `gap`
    (low, high s; (0, 0): back to back) between two; a row per recording: its path, duration, the whole text, and
    each sentence's (start, end, text)."""
    import numpy as np
    import soundfile as sf

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for n, at in enumerate(range(0, len(pool), per_recording)):
        parts, spans, t, rate = [], [], 0, None
        for k, row in enumerate(pool[at:at + per_recording]):
            wav, rate = sf.read(row["audio_filepath"], dtype="float32")
            if k and gap[1] > 0:
                pause = int(rng.uniform(*gap) * rate)
                parts.append(np.zeros(pause, np.float32))
                t += pause
            spans.append((t / rate, (t + len(wav)) / rate, row["text"]))
            parts.append(wav)
            t += len(wav)
        path = folder / f"long-{n:03d}.wav"
        sf.write(path, np.concatenate(parts), rate)
        out.append({"audio_filepath": str(path.resolve()), "duration": round(t / rate, 4),
                    "text": " ".join(s[2] for s in spans), "spans": spans})
    return out


def cut_quality(lines: list[dict[str, Any]], recordings: list[dict[str, Any]]) -> dict[str, Any]:
    """How `lines` (segments with offset, duration, text) cut `recordings` (join_pool's): boundaries between two
    segments in a pause between sentences, and the segments' text against the sentences whose middle they hold."""
    from speechscale.decoding.metrics import ErrorRate

    by_file: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_file.setdefault(line["audio_filepath"], []).append(line)
    cuts = in_pause = 0
    wer = ErrorRate()
    lengths = []
    for rec in recordings:
        segs = sorted(by_file.get(rec["audio_filepath"], []), key=lambda x: x.get("offset", 0.0))  # none: whole
        spans = rec["spans"]
        pauses = [(a[1], b[0]) for a, b in zip(spans, spans[1:])]
        for x in segs:
            a = x.get("offset", 0.0)
            b = a + x["duration"]
            lengths.append(x["duration"])
            truth = " ".join(s[2] for s in spans if a <= (s[0] + s[1]) / 2 < b)
            wer.update([truth], [x["text"]])
            for edge in (a, b):
                if spans[0][0] + 0.02 < edge < spans[-1][1] - 0.02:  # inside the recording's speech: a cut
                    cuts += 1
                    in_pause += any(p0 - 0.02 <= edge <= p1 + 0.02 for p0, p1 in pauses)
    return {"segments": len(lengths), "cuts": cuts, "cuts_in_pauses": in_pause,
            "share_in_pauses": round(in_pause / cuts, 4) if cuts else None, "wer_vs_truth": round(wer.wer, 4),
            "mean_seconds": round(sum(lengths) / len(lengths), 2) if lengths else None,
            "max_seconds": round(max(lengths), 2) if lengths else None}


def ablation(asr: Any, recordings: list[dict[str, Any]], max_seconds: float) -> dict[str, Any]:
    """The words of each recording, aligned to its text and transcribed greedy by `asr` (the teacher's Transcriber),
    each cut at the pauses in the audio and at the gaps their own times leave, and greedy's cut at the audio's pauses
    with each segment decoded again on its own (label's way): cut_quality of each."""
    from speechscale.data.audio import load_audio
    from speechscale.inference.align import align_waveform
    from speechscale.inference.segments import audio_pauses, cut_at_pauses
    from speechscale.labelling import decode_alone

    lines: dict[str, list[dict[str, Any]]] = {}
    for rec in recordings:
        wav = load_audio(rec["audio_filepath"], asr.sample_rate)
        for source, res in (("align", align_waveform(asr, wav, rec["text"])), ("greedy", asr.transcribe_batch([wav])[0])):
            for cut, pauses in (("audio", audio_pauses(res["words"], wav, asr.sample_rate)), ("word_times", None)):
                segs = cut_at_pauses(res["words"], res["duration"], max_seconds, pauses)
                runs = [(f"{source}/{cut}", segs)] + ([("greedy/audio/again", decode_alone(asr, wav, segs))]
                                                       if (source, cut) == ("greedy", "audio") else [])
                for name, found in runs:
                    lines.setdefault(name, []).extend(
                        {"audio_filepath": rec["audio_filepath"], "offset": s.start, "duration": s.duration,
                         "text": s.text} for s in found)
    return {name: cut_quality(x, recordings) for name, x in lines.items()}


def sentences_wer(asr: Any, pool: list[dict[str, Any]]) -> float:
    """Greedy's WER (`asr`: a Transcriber) on the pool's sentences, each its own file."""
    from speechscale.decoding.metrics import ErrorRate
    from speechscale.inference.transcribe import transcribe_files

    wer = ErrorRate()
    for row, (_, res) in zip(pool, transcribe_files(asr, [r["audio_filepath"] for r in pool], 16)):
        wer.update([row["text"]], [res["text"]])
    return round(wer.wer, 4)


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.harness import write_json
    from speechscale.decoding.lm import build_arpa
    from speechscale.inference.transcribe import Transcriber
    from speechscale.storage.checkpoints import load_checkpoint

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pool_args(p)
    p.add_argument("--per-recording", type=int, default=26, help="sentences joined into one long recording")
    p.add_argument("--max-seconds", type=float, default=15.0, help="the longest segment")
    p.add_argument("--short-seconds", type=float, default=4.0,
                   help="the longest segment of the short arm (align's segments near one sentence each)")
    p.add_argument("--out", default="docs/figures/bench-all/longform-demo.json")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    work, data, pool_path, _ = open_pool(args)
    train, test = data / "train.jsonl", data / "test.jsonl"
    pool = _rows(pool_path)
    lm = work / "lm.arpa"
    build_arpa(str(train), 3, lm)
    recordings = join_pool(pool, args.per_recording, args.pool_seed, work / "long")
    whole = _write(work / "long.jsonl", [{k: v for k, v in r.items() if k != "spans"} for r in recordings])
    sentences_lm = run_label(args.teacher, pool_path, work / "labels-lm.jsonl", [*LM_FLAGS, "--lm", str(lm)])
    cuts = {}
    for name, out, cmd, longest in (
            ("align", work / "long-align.jsonl", ["align", "--manifest", str(whole), "--out-manifest"], args.max_seconds),
            ("label", work / "long-label.jsonl", ["label", str(whole), "--out"], args.max_seconds),
            ("align-short", work / "long-align-short.jsonl", ["align", "--manifest", str(whole), "--out-manifest"],
             args.short_seconds)):
        flags = ["--checkpoint", args.teacher, "--max-seconds", str(longest)]
        summary = run_writing([*cmd, str(out), *flags, *(LM_FLAGS + ["--lm", str(lm)] if name == "label" else [])], out)
        cuts[name] = {**cut_quality(_rows(out), recordings),
                      **{k: summary[k] for k in ("kept", "rejected", "kept_hours", "seconds")}}
        print(json.dumps({name: cuts[name]}), flush=True)
    asr = Transcriber(args.teacher)
    ablate = ablation(asr, recordings, args.max_seconds)
    print(json.dumps({"ablation": ablate}), flush=True)
    model = load_checkpoint(args.teacher)["config"]["model"]
    arms = {"control": [], "lm": _rows(work / "labels-lm.jsonl"),
            "sentences-true": pool, "long-align": _rows(work / "long-align.jsonl"),
            "long-label": _rows(work / "long-label.jsonl"), "long-align-short": _rows(work / "long-align-short.jsonl")}
    rows = [{"arm": "teacher", **score(Path(args.teacher), test, lm)}]
    for seed in [int(x) for x in args.seeds.split(",")]:
        for name, extra in arms.items():
            rows.append(run_arm(name, args.teacher, model, train, extra, work, args.steps, seed, test, lm))
            print(json.dumps(rows[-1]), flush=True)
    settings = {"steps": args.steps, "seeds": args.seeds, "pool_minutes": args.pool_minutes, "pool_seed": args.pool_seed,
                "per_recording": args.per_recording, "max_seconds": args.max_seconds, "short_seconds": args.short_seconds}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"teacher": args.teacher, "recordings": len(recordings),
                     "recording_minutes": round(sum(r["duration"] for r in recordings) / 60 / len(recordings), 2),
                     "pool_utterances": len(pool), "sentences_lm_wer": sentences_lm.get("wer_kept"),
                     "sentences_greedy_wer": sentences_wer(asr, pool),
                     "cuts": cuts, "ablation": ablate, "arms": rows, "settings": settings},
               ["python", "-m", "benchmarks.longform", *sys.argv[1:]], round(time.monotonic() - started, 1), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
