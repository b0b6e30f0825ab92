"""Training segments and word times on real recordings with known words: yesno's held-out files (31-59, eight words
each) through `align --out-manifest`, `label` and `transcribe` at `--max-seconds 3`, with a model trained by the
yesno recipe. Counted from the files alone: segments without speech (no sample past a third of the recording's
peak), recordings whose segments spell their eight words once each in order, words past a recording's end.

    python -m benchmarks.segments_yesno --checkpoint runs/yesno/checkpoints/best.pt \
        [--out docs/figures/bench-all/segments-yesno.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from benchmarks.checkout import pin_commit, record
from benchmarks.shared import shared_data

HELD_OUT = 31  # the recipe's val_slice: the files after the first 31


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def measure(checkpoint: str, work: Path, max_seconds: float = 3.0) -> dict[str, Any]:
    """The counts for align, label and transcribe (module doc)."""
    root = shared_data("yesno").resolve()  # the paths align and label write are absolute
    rows = [json.loads(x) for x in (root / "manifest.jsonl").read_text().splitlines()][HELD_OUT:]
    manifest = work / "held-out.jsonl"
    manifest.write_text("".join(json.dumps({**r, "audio_filepath": str(root / r["audio_filepath"])}) + "\n"
                                for r in rows))
    cli = [sys.executable, "-m", "speechscale.cli", "-q"]
    subprocess.run(cli + ["align", "--checkpoint", checkpoint, "--manifest", str(manifest), "--out-manifest",
                          str(work / "align.jsonl"), "--max-seconds", str(max_seconds)], check=True, capture_output=True)
    subprocess.run(cli + ["label", "--checkpoint", checkpoint, str(manifest), "--out", str(work / "label.jsonl"),
                          "--max-seconds", str(max_seconds)], check=True, capture_output=True)
    said = subprocess.run(cli + ["transcribe", "--checkpoint", checkpoint, "--json",
                                 *[str(root / r["audio_filepath"]) for r in rows]],
                          check=True, capture_output=True, text=True).stdout
    out: dict[str, Any] = {}
    for tool in ("align", "label"):
        segments = _lines(work / f"{tool}.jsonl") + _lines(work / f"{tool}.rejected.jsonl")
        silent = exact = 0
        for r in rows:
            path = str(root / r["audio_filepath"])
            wav, rate = sf.read(path, dtype="float32")
            mine = sorted((s for s in segments if s["audio_filepath"] == path), key=lambda s: s["offset"])
            assert mine, f"no segment of {path}"  # every recording is cut: a count over none would say nothing
            for s in mine:
                part = wav[int(s["offset"] * rate):int((s["offset"] + s["duration"]) * rate)]
                silent += not np.abs(part).max(initial=0.0) > np.abs(wav).max() / 3
            exact += " ".join(s["text"] for s in mine).split() == r["text"].split()
        out[tool] = {"recordings": len(rows), "segments": len(segments), "silent_segments": silent,
                     "recordings_words_exact": exact}
    results = [json.loads(x) for x in said.splitlines()]
    out["transcribe"] = {"recordings": len(results),
                         "words_past_end": sum(w["end"] > r["duration"] for r in results for w in r["words"])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a model the yesno recipe trained")
    ap.add_argument("--max-seconds", type=float, default=3.0)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    pin_commit()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        res = measure(args.checkpoint, Path(tmp), args.max_seconds)
    print(json.dumps(res))
    if args.out:
        record(args.out, "benchmarks.segments_yesno", argv, [{"tool": k, **v} for k, v in res.items()],
               {"max_seconds": args.max_seconds}, began)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
