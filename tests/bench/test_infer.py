"""bench infer: batched inference RTFx per mode, each mode's log-probabilities checked against eager's."""
import json

import pytest
import torch

from tests.conftest import shared


def test_bench_infer_on_the_cpu_reports_rtfx_and_onnx_equal_to_eager(cli):
    shared("ldc93s1", "manifest.jsonl")  # the default audio
    proc = cli("bench", "infer", "--model", "ds2-tiny,conformer-tiny", "--batch-size", "3", "--seconds", "2",
               "--steps", "2", "--warmup", "1")
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert [(r["model"], r["mode"]) for r in rows] == [("ds2-tiny", "eager"), ("ds2-tiny", "onnx"),
                                                      ("conformer-tiny", "eager"), ("conformer-tiny", "onnx")]
    for r in rows:
        # RTFx is the batch's audio over the median batch time (rounded to 0.1 and 0.01 ms in the row)
        assert r["rtfx"] == pytest.approx(3 * 2 / (r["ms_per_batch"] / 1000), rel=1e-3, abs=0.06)
        assert r["ms_p10_p90"][0] <= r["ms_per_batch"] <= r["ms_p10_p90"][1]
    for r in rows[1::2]:
        assert r["max_abs_diff_vs_eager"] < 1e-4  # the exported file computes what the model computes
        eager = next(e for e in rows if e["model"] == r["model"] and e["mode"] == "eager")
        assert r["vs_eager"] == pytest.approx(eager["ms_per_batch"] / r["ms_per_batch"], rel=0.01)


def test_graphed_inference_needs_a_gpu(cli):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the gpu tier runs graphed inference")
    res = cli("bench", "infer", "--modes", "eager,graphed", "--device", "cpu", check=False)
    assert res.returncode != 0 and "graphed needs a CUDA device" in res.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the gpu tier)")
def test_graphed_inference_gives_eagers_log_probabilities_on_the_gpu():
    from speechscale.bench.infer import bench_infer

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        rows = bench_infer(["ds2-tiny", "conformer-tiny", "lstm-ctc-tiny"], batch_size=4, seconds=3, steps=2,
                           modes=("eager", "graphed"), device="cuda", precision="fp32")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    graphed = [r for r in rows if r["mode"] == "graphed"]
    assert len(graphed) == 3 and all("unavailable" not in r for r in graphed)
    assert all(r["max_abs_diff_vs_eager"] < 1e-3 for r in graphed), graphed
