"""`export --int8`: the weights of matrix products and LSTMs stored as 8-bit integers (onnxruntime's dynamic
quantization), counted against the model's own layers; the file stays close to the float one and transcribes
what the checkpoint transcribes; what cannot be quantized is one line."""
import json

import numpy as np
import pytest
import torch

from speechscale.bench.export import initial_checkpoint
from speechscale.export.exporter import export_model
from speechscale.export.runtime import ExportedModel
from tests.conftest import main_cli, shared


def _int8_elements(path) -> int:
    """Weight elements the ONNX file stores as int8 (its zero points, one per output channel, not counted)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    return sum(numpy_helper.to_array(t).size for t in graph.initializer
               if t.data_type == onnx.TensorProto.INT8 and "zero_point" not in t.name)


@pytest.mark.parametrize("model, integer_ops", [("lstm-ctc-tiny", {"DynamicQuantizeLSTM", "MatMulInteger"}),
                                                ("conformer-tiny", {"MatMulInteger"})])
def test_int8_stores_the_linear_and_lstm_weights_as_integers_and_stays_close(tmp_path, model, integer_ops):
    import onnx

    ckpt, comps = initial_checkpoint(model, tmp_path / "m.pt")
    float_out = export_model(ckpt, "onnx", tmp_path / "f.onnx")
    summary = export_model(ckpt, "onnx", tmp_path / "q.onnx", int8=True)
    weights = sum(p.numel() for m in comps.model.modules() if isinstance(m, torch.nn.LSTM)
                  for n, p in m.named_parameters() if n.startswith("weight"))  # weight_ih_lK, weight_hh_lK(_reverse)
    weights += sum(m.weight.numel() for m in comps.model.modules() if isinstance(m, torch.nn.Linear))
    total = sum(p.numel() for p in comps.model.parameters())
    assert _int8_elements(tmp_path / "q.onnx") == weights > 0
    assert summary["int8_share"] == round(weights / total, 4) and "int8_share" not in float_out
    assert summary["bytes"] < float_out["bytes"] - 2.9 * weights  # a byte a weight instead of four, and the scales
    onnx.checker.check_model(str(tmp_path / "q.onnx"), full_check=True)
    ops = {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    assert integer_ops <= ops and "LSTM" not in ops and "ConvInteger" not in ops  # convolutions stay float
    exported = {k: ExportedModel(tmp_path / f"{k}.onnx", "onnx") for k in ("f", "q")}
    card = exported["q"].description["card"]
    assert card["weights"].startswith("int8") and "weights" not in exported["f"].description["card"]
    torch.manual_seed(1)
    feats, lengths = torch.randn(2, comps.features.num_features, 300), torch.tensor([300, 211])
    (f, f_lens), (q, q_lens) = exported["f"](feats, lengths), exported["q"](feats, lengths)
    assert torch.equal(f_lens, q_lens)
    diff = max(float((f[b, :n] - q[b, :n]).abs().max()) for b, n in enumerate(f_lens.tolist()))
    assert 0 < diff < 0.1, diff  # rounded weights: close, not equal


@pytest.mark.slow  # the CLI end to end, in this process
def test_an_int8_file_transcribes_as_the_checkpoint_does_and_its_card_says_int8(ldc_checkpoint, tmp_path, cli):
    out = tmp_path / "ldc.int8.onnx"
    summary = json.loads(cli("export", "--checkpoint", str(ldc_checkpoint), "--format", "onnx", "--int8",
                             "--out", str(out)).stdout)
    assert summary["model"] == "ds2-tiny" and 0 < summary["int8_share"] < 0.01  # its GRUs and convolutions stay float
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    said = json.loads(cli("transcribe", "--checkpoint", str(out), "--json", wav).stdout)["text"]
    assert said == "she had your dark suit in greasy wash water all year"
    info = cli("info", str(out)).stdout
    assert "**Weights:** int8 (matrix products and LSTMs" in info
    assert "(onnx, int8 weights, exported)" in (tmp_path / "ldc.int8.onnx.MODEL.md").read_text()


def test_int8_without_anything_to_quantize_or_outside_onnx_is_one_line(ldc_checkpoint, tmp_path, capsys):
    code, _, err = main_cli(capsys, "export", "--checkpoint", str(ldc_checkpoint), "--format", "torchscript", "--int8",
                            "--out", str(tmp_path / "m.ts"))
    assert code == 2 and "--int8 goes with --format onnx" in err and len(err.strip().splitlines()) == 1
    ckpt, _ = initial_checkpoint("wav2letter+-tiny", tmp_path / "w.pt")  # convolutions only
    code, _, err = main_cli(capsys, "export", "--checkpoint", str(ckpt), "--format", "onnx", "--int8",
                            "--out", str(tmp_path / "w.onnx"))
    assert code == 2 and "wav2letter+-tiny has no matrix products or LSTMs" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "w.onnx").exists()


def test_bench_infer_runs_the_int8_file_beside_the_float_one():
    from speechscale.bench.infer import bench_infer

    shared("ldc93s1", "manifest.jsonl")  # the default audio
    rows = bench_infer(["lstm-ctc-tiny"], batch_size=2, seconds=2, steps=2, warmup=1,
                       modes=("eager", "onnx", "onnx-int8"))
    assert [(r["mode"], r["precision"]) for r in rows] == [("eager", "fp32"), ("onnx", "fp32"), ("onnx-int8", "int8")]
    assert rows[1]["max_abs_diff_vs_eager"] < 1e-4 < rows[2]["max_abs_diff_vs_eager"] < 0.1
    assert np.isfinite([r["rtfx"] for r in rows]).all()


@pytest.mark.slow  # the CLI end to end, in this process
def test_an_int8_streaming_step_streams_what_the_float_step_streams(conformer_streaming_checkpoint, tmp_path, capsys):
    said, summaries = {}, {}
    for name, flags in (("float", []), ("int8", ["--int8"])):
        out = tmp_path / f"step.{name}.onnx"
        code, printed, err = main_cli(capsys, "export", "--checkpoint", str(conformer_streaming_checkpoint), "--format",
                                      "onnx", "--streaming", *flags, "--out", str(out))
        assert code == 0, err
        summaries[name] = json.loads(printed)
        code, printed, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint",
                                      str(out), str(shared("ldc93s1", "LDC93S1.wav")))
        assert code == 0, err
        said[name] = " ".join(json.loads(x)["text"] for x in printed.splitlines() if json.loads(x)["type"] == "final")
    assert said["int8"] == said["float"] and len(said["int8"].split()) == 11, said  # LDC93S1's eleven words
    assert summaries["int8"]["streaming"] is True and summaries["int8"]["int8_share"] > 0.5  # attention and FFNs
    assert summaries["int8"]["bytes"] < summaries["float"]["bytes"] / 2
    assert "(onnx, the streaming step, int8 weights, exported)" in (tmp_path / "step.int8.onnx.MODEL.md").read_text()
