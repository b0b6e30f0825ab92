"""Export to ONNX and TorchScript: every registry model keeps a dynamic time axis and matches PyTorch."""
import json

import pytest
import torch

from speechscale.components import build_components
from speechscale.config import to_dict
from speechscale.export.exporter import EXAMPLE_FRAMES, LogProbs, export_model
from speechscale.export.runtime import ExportedModel
from speechscale.models.registry import MODELS
from speechscale.recipe import load_recipe
from tests.conftest import main_cli, shared

SMALL = ["ds2-tiny", "wav2letter+-tiny", "lstm-ctc-tiny", "conformer-tiny"]
# deepspeech-pytorch is ds2's class with LSTM layers and no output bias: its imports are exported, at their size,
# in tests/storage/test_deepspeech_pytorch.py, and ds2-large covers the same layers at full size
LARGE = [m for m in MODELS if m not in SMALL and m != "deepspeech-pytorch"]


def _checkpoint(tmp_path, model, overrides=None):
    """A format-3 checkpoint of `model` with its initial weights (seeded), written by torch.save."""
    torch.manual_seed(0)
    cfg = load_recipe(None, [f"model.name={model}", *([f"model.overrides={overrides}"] if overrides else [])])
    comps = build_components(cfg)
    path = tmp_path / f"{model}.pt"
    torch.save({"format_version": 3, "config": to_dict(cfg), "model": comps.model.state_dict()}, path)
    return path, LogProbs(comps.model.eval())


def _parity(tmp_path, model, fmt, overrides=None):
    ckpt, reference = _checkpoint(tmp_path, model, overrides)
    out = tmp_path / f"{model}.{fmt}"
    summary = export_model(ckpt, fmt, out)
    assert summary["format"] == fmt and out.stat().st_size > 0
    exported = ExportedModel(out, fmt)
    torch.manual_seed(1)
    frames = [EXAMPLE_FRAMES + 164, EXAMPLE_FRAMES - 90]  # neither is the example's length
    feats = torch.randn(2, exported.components().features.num_features, max(frames))
    lengths = torch.tensor(frames)
    with torch.no_grad():
        want, want_lens = reference(feats, lengths)
    got, got_lens = exported(feats, lengths)
    assert got.shape == want.shape and torch.equal(got_lens, want_lens)
    for b, n in enumerate(want_lens.tolist()):  # padded frames beyond each length are not compared
        assert float((got[b, :n] - want[b, :n]).abs().max()) < 1e-3, (model, fmt)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("model", SMALL)
def test_small_models_export_with_a_dynamic_time_axis(tmp_path, model, fmt):
    _parity(tmp_path, model, fmt)
    if fmt == "onnx":  # the description appended to the exported bytes leaves a model that onnx itself reads
        import onnx

        onnx.checker.check_model(str(tmp_path / f"{model}.onnx"), full_check=True)
        meta = {p.key: p.value for p in onnx.load(str(tmp_path / f"{model}.onnx")).metadata_props}
        assert json.loads(meta["speechscale"])["config"]["model"]["name"] == model
    comps = ExportedModel(tmp_path / f"{model}.{fmt}", fmt).components()  # the file runs the weights
    assert all(p.is_meta for p in comps.model.parameters())


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("model, overrides", [("ds2-tiny", "{rnn_bias: false}"), ("lstm-ctc-tiny", "{bias: false}")])
def test_recurrent_models_without_biases_export_and_match(tmp_path, model, overrides, fmt):
    _parity(tmp_path, model, fmt, overrides)
    rnn = ExportedModel(tmp_path / f"{model}.{fmt}", fmt).components().model.rnns[0].rnn
    assert not any("bias" in n for n, _ in rnn.named_parameters())


# Full-size presets: ONNX for each (the format whose limits grow with the model: protobuf size, the exporter's
# shape inference over deep graphs). TorchScript traces the same code at any size, so a full-size preset is
# traced only where it sets options no tiny preset above has: ds2-large (concatenated directions, an FC
# layer) and ds2-streaming (one direction, lookahead). Issue #20 §4: the other four took 15 s of CPU.
TRACED_FULL = ["ds2-large", "ds2-streaming"]
FULL = [(m, "onnx") for m in LARGE] + [(m, "torchscript") for m in TRACED_FULL]


@pytest.mark.slow
@pytest.mark.parametrize("model, fmt", FULL, ids=[f"{m}-{f}" for m, f in FULL])
def test_full_size_models_export_with_a_dynamic_time_axis(tmp_path, model, fmt):
    _parity(tmp_path, model, fmt)


@pytest.mark.slow  # the CLI end to end, in this process (make test runs it; make test-fast does not)
@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_exported_model_transcribes_as_the_checkpoint_does(ldc_checkpoint, tmp_path, fmt, cli):
    out = tmp_path / f"ldc.{fmt}"
    summary = json.loads(cli("export", "--checkpoint", str(ldc_checkpoint), "--format", fmt, "--out",
                             str(out)).stdout)
    assert summary["out"] == str(out) and summary["model"] == "ds2-tiny"
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    torch_text = json.loads(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", wav).stdout)["text"]
    exported = json.loads(cli("transcribe", "--backend", fmt, "--checkpoint", str(out), "--json", wav).stdout)
    assert exported["text"] == torch_text == "she had your dark suit in greasy wash water all year"
    found = json.loads(cli("transcribe", "--checkpoint", str(out), "--json", wav).stdout)  # --backend auto
    assert found["text"] == torch_text


def test_a_torchscript_file_whose_bytes_changed_is_refused_in_one_line(ldc_checkpoint, capsys, tmp_path):
    """torch.jit.load does not check the CRC-32 each record of the file was written with: a flipped bit in a weight
    would transcribe with that weight changed."""
    import zipfile

    out, good = tmp_path / "ldc.torchscript", tmp_path / "good.torchscript"
    export_model(str(ldc_checkpoint), "torchscript", out)
    good.write_bytes(out.read_bytes())
    data = bytearray(out.read_bytes())
    with zipfile.ZipFile(out) as archive:
        record = max(archive.infolist(), key=lambda r: r.file_size)
    data[data.index(record.filename.encode(), record.header_offset) + len(record.filename) + 100] ^= 0x01
    out.write_bytes(bytes(data))
    changed, kept = torch.jit.load(str(out)).state_dict(), ExportedModel(good, "torchscript").module.state_dict()
    assert sum(not torch.equal(v, kept[k]) for k, v in changed.items()) == 1  # what loading without the check gives
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    code, _, err = main_cli(capsys, "transcribe", "--checkpoint", str(out), wav)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"ldc.torchscript is damaged: its record {record.filename} does not match the CRC-32" in err


@pytest.mark.parametrize("int8", [False, True])
def test_an_onnx_file_whose_bytes_changed_is_refused_in_one_line(ldc_checkpoint, capsys, tmp_path, caplog, int8):
    """onnxruntime loads an ONNX file whose weight bytes changed without a word: the CRC-32 export writes into the
    file's metadata is checked before it runs. A file another tool rewrote (its metadata no longer last) and one
    exported without the entry load unchecked."""
    import zlib

    import numpy as np
    import onnx
    import onnxruntime

    out = tmp_path / "ldc.onnx"
    export_model(str(ldc_checkpoint), "onnx", out, int8=int8)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # written whole, then renamed
    good = out.read_bytes()
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    check = json.loads(meta["speechscale.crc32"])  # recomputed here from the file's own bytes
    assert check["crc32"] == zlib.crc32(meta["speechscale"].encode(), zlib.crc32(good[:check["bytes"]]))
    weight = max(onnx.load(str(out)).graph.initializer, key=lambda t: len(t.raw_data)).raw_data
    data = bytearray(good)
    data[good.index(weight) + 3] ^= 0x20  # an exponent bit of the first value of the largest weight
    out.write_bytes(bytes(data))
    runs = []
    for raw in (good, bytes(data)):  # what loading without the check gives: the same graph, other outputs
        session = onnxruntime.InferenceSession(raw, providers=["CPUExecutionProvider"])
        num = session.get_inputs()[0].shape[1]
        feats = np.random.default_rng(0).standard_normal((1, num, 120), np.float32)
        runs.append(session.run(None, {"features": feats, "lengths": np.array([120])})[0])
    assert not np.array_equal(*runs)
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    for command in (["transcribe", "--checkpoint", str(out), wav], ["info", str(out)]):
        code, _, err = main_cli(capsys, *command)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "ldc.onnx is damaged: its bytes do not match the CRC-32 written with them" in err
    # damage that onnxruntime cannot parse is named as damage too (checked before it reads the file)
    data = bytearray(good)
    data[1] ^= 0xFF  # the first field's value: no longer a protobuf onnxruntime reads
    out.write_bytes(bytes(data))
    code, _, err = main_cli(capsys, "info", str(out))
    assert code == 2 and "ldc.onnx is damaged: its bytes do not match" in err, err
    # a flipped letter in the description (the alphabet, the features) is caught too
    data = bytearray(good)
    at = good.rindex(b'"sample_rate"')
    data[at + 1] ^= 0x20
    out.write_bytes(bytes(data))
    code, _, err = main_cli(capsys, "info", str(out))
    assert code == 2 and "is damaged" in err, err
    # rewritten by onnx itself (another layout, the metadata kept): loads with a warning, unchecked
    model = onnx.load_from_string(good)
    model.doc_string = "simplified elsewhere"
    onnx.save(model, str(out))
    code, text, err = main_cli(capsys, "transcribe", "--checkpoint", str(out), wav)
    assert code == 0 and text.strip(), err
    assert "rewritten since speechscale export wrote it" in caplog.text
    # exported before the entry existed: the same bytes without it load unchecked
    del model.metadata_props[[p.key for p in model.metadata_props].index("speechscale.crc32")]
    model.doc_string = ""
    onnx.save(model, str(out))
    assert main_cli(capsys, "info", str(out))[0] == 0


def test_exported_models_behind_a_url_transcribe_as_local_ones(ldc_checkpoint, capsys, tmp_path, s3):
    """An export on object storage (a real S3 server on loopback) is read from there, known by its name (.onnx,
    .ts): the same text as the local file, its card from `info`, and its checksum checked (the error names the
    URL)."""
    import fsspec

    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    fs = fsspec.filesystem("s3")
    for name, fmt in (("ldc.onnx", "onnx"), ("ldc.ts", "torchscript")):
        export_model(str(ldc_checkpoint), fmt, tmp_path / name)
        fs.pipe(f"ckpts/models/{name}", (tmp_path / name).read_bytes())
        code, local, err = main_cli(capsys, "transcribe", "--checkpoint", str(tmp_path / name), wav)
        assert code == 0, err
        code, remote, err = main_cli(capsys, "transcribe", "--checkpoint", f"s3://ckpts/models/{name}", wav)
        assert code == 0 and remote == local and remote.strip(), err
    code, out, err = main_cli(capsys, "info", "s3://ckpts/models/ldc.onnx")
    assert code == 0 and "ds2-tiny" in out, err
    data = bytearray((tmp_path / "ldc.onnx").read_bytes())
    data[len(data) // 3] ^= 0x01
    fs.pipe("ckpts/models/bad.onnx", bytes(data))
    code, _, err = main_cli(capsys, "transcribe", "--checkpoint", "s3://ckpts/models/bad.onnx", wav)
    assert code == 2 and err.count("\n") == 1 and "s3://ckpts/models/bad.onnx is damaged" in err, err
    code, _, err = main_cli(capsys, "transcribe", "--checkpoint", "s3://ckpts/models/none.onnx", wav)
    assert code == 2 and "s3://ckpts/models/none.onnx: no such exported model" in err, err


def test_a_file_that_is_not_an_export_is_one_clear_error(ldc_checkpoint, capsys, tmp_path):
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    for backend in ("onnx", "torchscript"):
        code, _, err = main_cli(capsys, "transcribe", "--backend", backend, "--checkpoint", str(ldc_checkpoint), wav)
        expected = {"onnx": "not an ONNX file", "torchscript": "not a TorchScript file"}[backend]
        assert code == 2 and expected in err, err
        assert len(err.strip().splitlines()) == 1
    (tmp_path / "torn.onnx").write_bytes(b"\x08\x07" + bytes(range(256)) * 20)  # a torn or foreign ONNX file
    for command in (["info", str(tmp_path / "torn.onnx")], ["transcribe", "--checkpoint", str(tmp_path / "torn.onnx"), wav]):
        code, _, err = main_cli(capsys, *command)
        assert code == 2 and "torn.onnx: not an ONNX file" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = main_cli(capsys, "export", "--checkpoint", str(tmp_path / "none.pt"), "--format", "onnx",
                            "--out", str(tmp_path / "x.onnx"))
    assert code == 2 and "checkpoint not found" in err
    # `info` reads an ONNX file's card without running it: a missing file, one that is not ONNX, and a real ONNX
    # graph that speechscale did not write are each one line
    import onnx
    from onnx import TensorProto, helper

    foreign, garbage = tmp_path / "foreign.onnx", tmp_path / "garbage.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])), foreign)
    garbage.write_bytes(b"not a protobuf at all" * 10)
    for path, expected in [(tmp_path / "none.onnx", "no such exported model"), (garbage, "not an ONNX file"),
                           (foreign, "not an ONNX file written by speechscale export")]:
        code, _, err = main_cli(capsys, "info", str(path))
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err
