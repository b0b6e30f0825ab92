"""The export latency bench: the three backends time the same clip, side by side."""
from speechscale.bench.export import bench_export


def test_bench_export_times_torch_onnx_and_torchscript_side_by_side():
    (row,) = bench_export(["ds2-tiny"], seconds=1.0, repeats=3, warmup=1)
    assert row["model"] == "ds2-tiny"
    for k in ("torch", "onnx", "torchscript"):
        assert 0 < row[f"{k}_ms"] <= row[f"{k}_p90_ms"]
    # the ratio is of the unrounded medians; the printed milliseconds are rounded to 0.01
    assert abs(row["onnx_vs_torch"] - row["torch_ms"] / row["onnx_ms"]) < 0.02 + 0.01 * row["onnx_vs_torch"]
