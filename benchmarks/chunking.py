"""Long recordings transcribed whole: how `transcribe` cuts them into chunks, against each sentence heard alone.

    python -m benchmarks.chunking --teacher runs/demo/checkpoints/last.pt [--snr clean,30,15] [--per-recording 26]
        [--work runs/selftrain] [--out docs/figures/bench-all/chunking-demo.json]
    python -m benchmarks.chunking --teacher runs/yesno/checkpoints/last.pt --manifest ../shared/data/yesno/manifest.jsonl
        --lines 31: --per-recording 10 --work runs/chunking-yesno --out docs/figures/bench-all/chunking-yesno.json

The recordings are benchmarks/longform's: the selftrain pool's sentences (the demo's unseen test voice) joined in
order with a drawn pause of 0.25-1 s (--gap LOW,HIGH another range; 0,0: back to back, connected speech without a
pause between sentences, as the demo's sentences are cut tight to their speech); or, with --manifest, the files of
its --lines joined back to back as they were recorded (real recordings: each keeps its own room noise at its
edges). Each is heard as it is and with white noise added throughout at each --snr (dB below the speech's mean
power; a noise floor as a room has one). Each recording is transcribed greedy by the teacher, one recording at a
time, by each way of cutting it (the arms, interleaved per recording) and its whole text scored against the
sentences' (WER):
- sentences: each sentence's own span cut from the recording and transcribed alone (the mark to reach);
- fixed-20, fixed-auto: chunks of at most 20 s (the old default) or the card's length, each cut at the quietest
  20 ms within 2 s of its limit (inference.transcribe.split_points);
- pauses-20: cut at pauses (inference.transcribe.pause_chunks) to at most 20 s;
- pauses-auto-untrimmed: cut at pauses to the card's length, each chunk keeping half of the pause on each side;
- auto: what `transcribe` does by default: `Transcriber(teacher).transcribe_batch([recording])`.
Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.checkout import pin_commit
from benchmarks.longform import POOL_GAP, join_pool
from benchmarks.selftrain import _rows, open_pool, pool_args

ARMS = ("sentences", "fixed-20", "fixed-auto", "pauses-20", "pauses-auto-untrimmed", "auto")
OLD_CHUNK_S = 20.0


def with_noise(wav: np.ndarray, snr_db: float | None, seed: int) -> np.ndarray:
    """`wav` (T,) float32 with white noise at `snr_db` below its speech's mean power (samples above -80 dBFS); None:
    as it is."""
    if snr_db is None:
        return wav
    speech = wav[np.abs(wav) > 1e-4]
    power = float(np.mean(speech ** 2)) if speech.size else 1e-8
    noise = np.random.default_rng(seed).standard_normal(wav.shape[0]).astype(np.float32)
    return (wav + noise * np.float32(np.sqrt(power / 10 ** (snr_db / 10)))).astype(np.float32)


def arm_chunks(arm: str, wav: np.ndarray, rate: int, spans: list[tuple[float, float, str]],
               auto_s: float) -> list[tuple[int, int]] | None:
    """The sample ranges arm `arm` transcribes (None: the auto arm, the Transcriber's own cutting)."""
    from speechscale.inference.transcribe import pause_chunks, split_points

    if arm == "sentences":
        return [(round(a * rate), round(b * rate)) for a, b, _ in spans]
    if arm.startswith("fixed-"):
        cuts = split_points(wav, rate, OLD_CHUNK_S if arm == "fixed-20" else auto_s)
        return list(zip(cuts, cuts[1:]))
    if arm == "pauses-20":
        return pause_chunks(wav, rate, OLD_CHUNK_S)
    if arm == "pauses-auto-untrimmed":
        return pause_chunks(wav, rate, auto_s, trim=False)
    return None


def transcribe_arms(auto: Any, whole: Any, recordings: list[dict[str, Any]], snr_db: float | None,
                    read: Callable[[str, int], np.ndarray]) -> dict[str, dict[str, Any]]:
    """Every arm's WER, chunks (count, median and longest s) and wall seconds on `recordings` (join_pool's) with noise at
    `snr_db`: `auto` is the default Transcriber, `whole` one whose chunk length exceeds any recording (it transcribes
    each given range as it is)."""
    from speechscale.decoding.metrics import ErrorRate
    from speechscale.inference.transcribe import pause_chunks

    rate = auto.sample_rate
    wer = {a: ErrorRate() for a in ARMS}
    lengths: dict[str, list[float]] = {a: [] for a in ARMS}
    wall = dict.fromkeys(ARMS, 0.0)
    for n, rec in enumerate(recordings):
        wav = with_noise(read(rec["audio_filepath"], rate), snr_db, seed=n)
        for arm in ARMS:
            started = time.perf_counter()  # cutting included
            chunks = arm_chunks(arm, wav, rate, rec["spans"], auto.chunk_seconds)
            if chunks is None:
                text = auto.transcribe_batch([wav])[0]["text"]
            else:
                text = " ".join(r["text"] for r in whole.transcribe_batch([wav[a:b] for a, b in chunks]) if r["text"])
            wall[arm] += time.perf_counter() - started
            if chunks is None:
                chunks = pause_chunks(wav, rate, auto.chunk_seconds)  # what the Transcriber cut (for the lengths)
            wer[arm].update([rec["text"]], [text])
            lengths[arm] += [(b - a) / rate for a, b in chunks]
    audio = sum(r["duration"] for r in recordings)
    return {a: {"wer": round(wer[a].wer, 4), "chunks": len(lengths[a]),
                "median_seconds": round(float(np.median(lengths[a])), 2), "max_seconds": round(max(lengths[a]), 2),
                "heard_share": round(sum(lengths[a]) / audio, 4), "seconds": round(wall[a], 2),
                "rtfx": round(audio / wall[a], 1) if wall[a] > 0 else None} for a in ARMS}


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.harness import write_json
    from speechscale.data.audio import load_audio
    from speechscale.inference.transcribe import Transcriber

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pool_args(p, fine_tunes=False)
    p.add_argument("--per-recording", type=int, default=26, help="sentences joined into one long recording")
    p.add_argument("--snr", default="clean,30,15", help="comma-separated noise conditions: clean, or dB of SNR")
    p.add_argument("--manifest", default=None, help="join this manifest's files as recorded instead of the pool's")
    p.add_argument("--lines", default=":", help="--manifest: the lines START:STOP (from 0) to join, as a slice")
    p.add_argument("--gap", default=None, help="LOW,HIGH: the pause drawn between two joined sentences, s (default: "
                   "0.25,1.0 between the pool's sentences, 0,0 between --manifest's files, as recorded)")
    p.add_argument("--out", default="docs/figures/bench-all/chunking-demo.json")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    if args.gap:
        gap = tuple(float(x) for x in args.gap.split(","))
    else:  # a manifest's files as recorded; the pool's sentences with longform's pause
        gap = (0.0, 0.0) if args.manifest else POOL_GAP
    if args.manifest:
        from speechscale.data.manifest import read_manifest

        work = Path(args.work)
        start, stop = (int(x) if x else None for x in args.lines.split(":"))
        utts, _ = read_manifest(args.manifest)
        pool = [{"audio_filepath": u.audio_path, "text": u.text} for u in utts[start:stop]]
        recordings = join_pool(pool, args.per_recording, args.pool_seed, work / "long", gap=gap)
    else:
        work, _, pool_path, _ = open_pool(args)
        pool = _rows(pool_path)
        folder = work / ("long" if args.gap is None else f"long-{gap[0]:g}-{gap[1]:g}")  # the default's recordings kept
        recordings = join_pool(pool, args.per_recording, args.pool_seed, folder, gap=gap)
    auto = Transcriber(args.teacher)
    longest = max(r["duration"] for r in recordings)
    whole = Transcriber(args.teacher, chunk_seconds=longest + 1)
    conditions = {}
    for cond in args.snr.split(","):
        snr = None if cond == "clean" else float(cond)
        conditions[cond] = transcribe_arms(auto, whole, recordings, snr, load_audio)
        print(json.dumps({cond: conditions[cond]}), flush=True)
    card = auto.comps.card.get("training_data") or {}
    settings = {"pool_minutes": args.pool_minutes, "pool_seed": args.pool_seed, "per_recording": args.per_recording,
                "snr": args.snr, "gap_seconds": list(gap),
                **({"manifest": args.manifest, "lines": args.lines} if args.manifest else {})}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"teacher": args.teacher, "recordings": len(recordings), "pool_utterances": len(pool),
                     **({"manifest": args.manifest, "lines": args.lines} if args.manifest else {}),
                     "recording_minutes": round(sum(r["duration"] for r in recordings) / 60 / len(recordings), 2),
                     "auto_seconds": auto.chunk_seconds, "training_seconds": card.get("seconds"),
                     "conditions": conditions, "settings": settings},
               ["python", "-m", "benchmarks.chunking", *sys.argv[1:]], round(time.monotonic() - started, 1), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
