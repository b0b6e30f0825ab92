"""Int8 weights (`export --int8`) against float ones: speed of full-size models and accuracy of trained ones.

    python -m benchmarks.int8 --checkpoints A.pt,B.pt [--models lstm-ctc,conformer,ds2-large]
        [--out docs/figures/bench-all/int8.json]

Speed: `bench infer` (bench/infer.py) with modes eager, onnx and onnx-int8 for each of --models (initial weights:
speed does not depend on them), batches of 8 x 10 s of LDC93S1 on the CPU, interleaved. Accuracy: each trained
checkpoint exported as float ONNX and with --int8, both transcribing its validation manifest (greedy, as
`transcribe` does), the float and int8 runs alternated twice (the faster of each kept): WER, CER, wall seconds and
the file sizes, and how many transcripts differ. Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit


def accuracy(checkpoint: str, tmp: Path) -> dict[str, Any]:
    """The checkpoint's float and int8 ONNX files on its validation manifest: WER, CER, seconds and bytes."""
    from speechscale.data.audio import load_audio
    from speechscale.data.manifest import SkipReport, iter_manifest
    from speechscale.decoding.metrics import ErrorRate
    from speechscale.export.exporter import export_model
    from speechscale.inference.transcribe import Transcriber
    from speechscale.storage.checkpoints import load_checkpoint

    config = load_checkpoint(checkpoint)["config"]
    manifest = config["data"]["val_manifest"]
    files = {"float": tmp / "float.onnx", "int8": tmp / "int8.onnx"}
    summary = {k: export_model(checkpoint, "onnx", f, int8=k == "int8") for k, f in files.items()}
    asrs = {k: Transcriber(f, backend="onnx") for k, f in files.items()}
    utts = list(iter_manifest(manifest, SkipReport("val")))
    rate = asrs["float"].sample_rate
    wavs = [load_audio(u.audio_path, rate) for u in utts]
    refs = [asrs["float"].comps.normalizer(u.raw_text) for u in utts]
    texts: dict[str, list[str]] = {}
    seconds: dict[str, float] = {k: float("inf") for k in files}
    for _ in range(2):  # alternated: the machine's load falls on both alike
        for k, asr in asrs.items():
            started = time.perf_counter()
            texts[k] = [r["text"] for i in range(0, len(wavs), 16) for r in asr.transcribe_batch(wavs[i:i + 16])]
            seconds[k] = min(seconds[k], time.perf_counter() - started)
    row: dict[str, Any] = {"checkpoint": checkpoint, "model": summary["float"]["model"],
                           "parameters": summary["float"]["parameters"], "int8_share": summary["int8"]["int8_share"],
                           "manifest": Path(manifest).name, "utterances": len(utts),
                           "audio_seconds": round(sum(len(w) for w in wavs) / rate, 1),
                           "differing_transcripts": sum(a != b for a, b in zip(texts["float"], texts["int8"]))}
    for k in files:
        rates = ErrorRate()
        rates.update(refs, texts[k])
        row[k] = {"wer": rates.wer, "cer": rates.cer, "seconds": round(seconds[k], 2), "bytes": summary[k]["bytes"]}
    return row


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.harness import write_json
    from speechscale.bench.infer import bench_infer

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoints", required=True, help="comma-separated trained checkpoints (accuracy)")
    p.add_argument("--models", default="lstm-ctc,conformer,ds2-large", help="full-size presets (speed)")
    p.add_argument("--out", default="docs/figures/bench-all/int8.json")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    speed = bench_infer(args.models.split(","), batch_size=8, seconds=10.0, steps=5, warmup=2,
                        modes=("eager", "onnx", "onnx-int8"), device="cpu")
    rows = []
    for checkpoint in args.checkpoints.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(accuracy(checkpoint, Path(tmp)))
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"speed": speed, "accuracy": rows}, ["python", "-m", "benchmarks.int8", *sys.argv[1:]],
               round(time.monotonic() - started, 1), {"models": args.models, "checkpoints": args.checkpoints})
    return 0


if __name__ == "__main__":
    sys.exit(main())
