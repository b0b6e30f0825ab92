"""The streaming Conformer on the demo corpus, against the offline conformer-tiny on the same recipe.

    python -m benchmarks.streaming_conformer [--runs runs] [--out docs/figures/bench-all/demo-conformer-streaming.json]

Trains `demo_conformer_streaming` (conformer-streaming-tiny) and the same recipe with model.name=conformer-tiny
(features per utterance, as a model that does not stream normalizes them by default, every batch at full context
only, and no right context, which only a streaming model has), unless a run folder already holds a finished run (its
metrics.jsonl ends with the stop record); then scores each run's last.pt on the demo's unseen voice with `speechscale
eval`: the streaming model at full context and with attention in chunks of 16, 4 and 3 output frames (0.64 s, 0.16 s,
and the service's 100 ms steps; each chunk also reads the recipe's right context after it), the offline model at full
context; both again on the test set 20 dB quieter (a microphone set lower than the corpus's) and after 2 s of a
silent microphone's noise (a user who waits to speak). Goals (after WeNet U2's unified conformer): CER at chunk 16
within 10 % (relative) of full context; at full context within 0.5 points of the offline model. Then the trained
streaming checkpoint streams 20 real files in 6 chunk sizes, in PyTorch and through its exported ONNX step: each
streamed text against its offline text in the same attention chunks (speechscale.bench.stream.exactness, over
benchmarks/shared.py's files). Figures go to one JSON with its provenance; the recipe catalog cites it.
Outside the package: this is how this repository makes its own figure, not a user command.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.checkout import pin_commit
from benchmarks.shared import SILENT_MIC_DBFS, altered_manifest, exactness_files
from speechscale.bench.harness import run_cli, write_json
from speechscale.bench.stream import exactness

RECIPE = "demo_conformer_streaming"
# the offline baseline's overrides of the same recipe (the docstring says why each)
OFFLINE = ["model.name=conformer-tiny", "features.normalize=auto", "model.overrides.train_modes=alternate",
           "model.overrides.right_context=0"]
TEST = "runs/demo/data/test.jsonl"
QUIETER_DB = 20  # the test set scored again this much quieter
LEAD_S = 2.0  # ... and after this many seconds of a silent microphone's noise


def _trained(out: Path, overrides: list[str]) -> dict:
    """The run's stop record (training it first unless it finished)."""
    metrics = out / "metrics.jsonl"
    if not (metrics.is_file() and json.loads(metrics.read_text().splitlines()[-1])["kind"] == "stop"):
        run_cli(["train", "--config", RECIPE, f"trainer.out_dir={out}", *overrides], timeout=None)
    return json.loads(metrics.read_text().splitlines()[-1])


def _epoch_seconds(out: Path) -> float:
    """The median wall seconds between consecutive epochs' validations: the run's pace, robust to a stretch in
    which something else shared the cores."""
    import statistics

    times = [r["time"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "val"]
    return round(statistics.median(b - a for a, b in zip(times, times[1:])), 1)


def _right_context(out: Path) -> int:
    """The output frames each chunk of the run's model reads after it (its config's model overrides)."""
    return int(json.loads((out / "config.json").read_text())["model"]["overrides"].get("right_context", 0))


def _score(out: Path, chunk: int | None = None, manifest: str = TEST) -> dict:
    args = ["eval", "--json", "--checkpoint", str(out / "checkpoints" / "last.pt"), "--manifest", manifest]
    return json.loads(run_cli(args + (["--attention-chunk", str(chunk)] if chunk else [])))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", default="runs", help="where the two runs' folders are (or go)")
    p.add_argument("--out", default="docs/figures/bench-all/demo-conformer-streaming.json")
    args = p.parse_args()
    pin_commit()
    started = time.monotonic()
    streaming, offline = Path(args.runs) / RECIPE, Path(args.runs) / "demo_conformer_offline"
    stop_s, stop_o = _trained(streaming, []), _trained(offline, OFFLINE)
    full, c16, c4, c3 = _score(streaming), _score(streaming, 16), _score(streaming, 4), _score(streaming, 3)
    base = _score(offline)
    quiet = altered_manifest(Path(TEST), Path(args.runs) / f"demo_test_{QUIETER_DB}db_quieter", quieter_db=QUIETER_DB)
    q_full, q_c16, q_base = _score(streaming, None, quiet), _score(streaming, 16, quiet), _score(offline, None, quiet)
    lead = altered_manifest(Path(TEST), Path(args.runs) / f"demo_test_after_{LEAD_S:g}s", lead_s=LEAD_S)
    l_full, l_c16, l_base = _score(streaming, None, lead), _score(streaming, 16, lead), _score(offline, None, lead)
    goal_chunk = round(1.1 * full["cer"], 4)
    goal_full = round(base["cer"] + 0.005, 4)
    row = {"recipe": RECIPE, "model": "conformer-streaming-tiny", "wer": full["wer"], "cer": full["cer"],
           "chunks": {"16": {"wer": c16["wer"], "cer": c16["cer"]}, "4": {"wer": c4["wer"], "cer": c4["cer"]},
                      "3": {"wer": c3["wer"], "cer": c3["cer"]}},
           "right_context": _right_context(streaming),
           "goal_chunk16_cer": goal_chunk, "goal_full_cer": goal_full,
           "reached": c16["cer"] <= goal_chunk and full["cer"] <= goal_full,
           "quieter": {"db": QUIETER_DB, "wer": q_full["wer"], "cer": q_full["cer"],
                       "chunks": {"16": {"wer": q_c16["wer"], "cer": q_c16["cer"]}}},
           "after_silence": {"seconds": LEAD_S, "floor_dbfs": SILENT_MIC_DBFS, "wer": l_full["wer"], "cer": l_full["cer"],
                             "chunks": {"16": {"wer": l_c16["wer"], "cer": l_c16["cer"]}}},
           "exactness": exactness(str(streaming / "checkpoints" / "last.pt"), exactness_files()),
           "epochs": stop_s["epoch"], "train_minutes": round(stop_s["minutes"], 2),
           "epoch_seconds_median": _epoch_seconds(streaming), "utterances": full["utterances"],
           "scored_on": "the demo's test voice, never used in training (last.pt)"}
    baseline = {"recipe": " ".join([RECIPE, *OFFLINE]), "model": "conformer-tiny", "wer": base["wer"],
                "cer": base["cer"], "epochs": stop_o["epoch"], "train_minutes": round(stop_o["minutes"], 2),
                "epoch_seconds_median": _epoch_seconds(offline),
                "normalize": "utterance (auto for a model that does not stream)",
                "quieter": {"db": QUIETER_DB, "wer": q_base["wer"], "cer": q_base["cer"]},
                "after_silence": {"seconds": LEAD_S, "floor_dbfs": SILENT_MIC_DBFS, "wer": l_base["wer"], "cer": l_base["cer"]}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, [row, baseline], ["python", *sys.argv], round(time.monotonic() - started, 1),
               {"recipe": RECIPE, "test": TEST})
    print(json.dumps({"streaming": row, "offline": baseline}))


if __name__ == "__main__":
    main()
