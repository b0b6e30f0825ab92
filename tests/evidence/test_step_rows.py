"""BENCHMARKS.md's rows for issue #56, recomputed here from gpu-step.json and gpu-infer.json."""
import json
import statistics

from benchmarks import summary
from tests.conftest import ROOT

GPU = ROOT / "docs" / "figures" / "gpu"


def test_the_step_rows_are_their_json():
    rows = {r["what"]: r for r in summary.summary_rows(ROOT / "docs" / "figures")}
    res = json.loads((GPU / "gpu-step.json").read_text())["results"]
    bench = [r for r in res if r["kind"] == "bench"]
    for model, batch, goal in (("ds2-large", 32, 3500), ("ds2-large", 128, 6000), ("conformer", 32, 4500),
                               ("lstm-ctc", 32, 5000), ("wav2letter+", 32, 7500)):
        graphed = [r["audio_seconds_per_second_compute"] for r in bench if r["model"] == model
                   and r["batch_size"] == batch and r["utterance_seconds"] == 10 and r["precision"].startswith("bf16+graphs")]
        row = rows[f"{model} bf16 graphed, exact, batch {batch} x 10 s (issue #56)"]
        assert row["figure"].startswith(f"{max(graphed):,.0f} audio-s/s")
        assert (row["status"] == "reached") == (max(graphed) >= goal)
    log = next(r for r in res if r["kind"] == "train-log" and r["lease"] == "lease2")
    train = statistics.median(x["audio_s_per_s"] for x in log["rows"][1:])
    bench_rate = next(r for r in bench if r["file"] == "train-bench.jsonl")["audio_seconds_per_second_compute"]
    row = rows["`speechscale train` ds2-large bf16 graphed against `bench train` at its batch"]
    assert row["figure"].startswith(f"{100 * train / bench_rate:.0f} %") and row["status"].startswith("**not")
    ds2 = max(r["audio_seconds_per_second_compute"] for r in bench if r["model"] == "ds2-large" and r["batch_size"] == 32
              and r["utterance_seconds"] == 10 and r["precision"].startswith("bf16+graphs"))
    for r in (r for r in res if r["kind"] == "loader" and r["features"] == "step"):
        row = rows[f"loader cores per GPU, features on the device, augmentation {'on' if r['augment'] else 'off'} "
                   "(ds2-large's graphed rate)"]
        assert row["figure"].startswith(f"{ds2 / r['x_realtime_per_worker']:.2f} cores")
    infer = json.loads((GPU / "gpu-infer.json").read_text())["results"]
    for model in ("ds2-large", "conformer"):
        graphed, eager = (next(r for r in infer if r["model"] == model and r["mode"] == m) for m in ("graphed", "eager"))
        row = rows[f"{model} bf16 inference, batch 32 x 10 s, graphed against eager"]
        assert f"({graphed['rtfx'] / eager['rtfx']:.2f}x)" in row["figure"]
