"""The streaming step as one fixed-shape graph: in PyTorch and exported to ONNX (run by onnxruntime), fed through
StreamingSession, its logits and text equal the offline model's on real files for every chunk size; its state
carries what the stream needs (dropping a piece breaks it); models that cannot stream are refused."""
import pytest
import torch

from speechscale.components import build_components, load_components
from speechscale.config import ConfigError, load_config
from speechscale.export.stream_runtime import OnnxStep, StepFeeder, TorchStep, is_stream_step
from speechscale.export.stream_step import UNKNOWN, StreamStep, export_stream_step
from tests.conftest import shared
from tests.serving.test_streaming import CHUNKS_MS, _files, _offline, _stream


@pytest.fixture(scope="module")
def onnx_step(streaming_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("step") / "step.onnx"
    summary = export_stream_step(streaming_checkpoint, out, chunk=32)
    assert summary["chunk"] == 32 and is_stream_step(out) and not is_stream_step(streaming_checkpoint)
    return out


def test_the_onnx_step_streams_the_offline_logits_and_text_for_every_file_and_chunk_size(streaming_checkpoint,
                                                                                           onnx_step):
    comps = load_components(streaming_checkpoint)
    files = _files()
    assert len(files) >= 20
    for k, path in enumerate(files):
        logits, text = _offline(comps, path)
        sizes = CHUNKS_MS if path.parent.name == "ldc93s1" else [CHUNKS_MS[k % 5]]
        for ms in sizes:
            session, _ = _stream(comps, path, ms, step=OnnxStep(onnx_step))
            streamed = torch.cat(session.logits)
            assert streamed.shape == logits.shape, (path.name, ms)
            torch.testing.assert_close(streamed, logits, atol=2e-4, rtol=1e-4)
            assert session.text == text, (path.name, ms)
            torch_session, _ = _stream(comps, path, ms)  # the layer-by-layer PyTorch stream: the same text
            assert torch_session.text == session.text


def test_the_step_in_pytorch_equals_the_offline_model_for_any_feature_chunking():
    """Random weights and normalization statistics, an LSTM variant too, lengths that end inside a chunk."""
    torch.manual_seed(0)
    for overrides in ([], ["model.overrides={rnn_type: lstm, rnn_layers: 2}"]):
        cfg = load_config(None, ["model.name=ds2-streaming-tiny", "features.normalize=none", *overrides])
        model = build_components(cfg).model.eval()
        for mod in model.modules():
            if getattr(mod, "running_mean", None) is not None:
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
        for frames in (11, 64, 203):
            feats = torch.randn(1, model.num_features, frames)
            with torch.no_grad():
                ref, lens = model(feats, torch.tensor([frames]))
            for pieces in ([frames], [1] * frames, [7, 30, 1, frames]):
                feeder, out, at = StepFeeder(TorchStep(model, chunk=16), model), [], 0
                for n in pieces:
                    piece = feats[0, :, at:at + n]
                    at += piece.shape[1]
                    out.append(feeder(piece))
                out.append(feeder(None, final=True))
                got = torch.cat([x for x in out if x is not None])
                assert got.shape[0] == int(lens[0])
                torch.testing.assert_close(got, ref[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("drop", [0, 1, 2, "last"])
def test_dropping_a_piece_of_the_steps_state_breaks_it(drop):
    """Each state tensor in turn is reset to zeros after every step: the logits then differ from the offline ones."""
    torch.manual_seed(1)
    model = build_components(load_config(None, ["model.name=ds2-streaming-tiny", "features.normalize=none"])).model
    model.eval()
    feats = torch.randn(1, model.num_features, 150)
    with torch.no_grad():
        ref, _ = model(feats, torch.tensor([150]))
    step = TorchStep(model, chunk=16)
    original = step.__call__

    def forgetful(feats_, frames_in, total, state):
        logits, valid, state = original(feats_, frames_in, total, state)
        i = len(state) - 1 if drop == "last" else drop
        state[i] = torch.zeros_like(state[i])
        return logits, valid, state

    feeder = StepFeeder(step, model)
    feeder.step = forgetful
    got = torch.cat([x for x in (feeder(feats[0]), feeder(None, final=True)) if x is not None])
    assert got.shape == ref[0].shape and not torch.allclose(got, ref[0], atol=1e-3)


def test_models_that_cannot_stream_are_refused_in_one_line(ldc_checkpoint, streaming_checkpoint, tmp_path):
    from speechscale.export.exporter import export_model

    with pytest.raises(ConfigError, match="cannot stream"):
        export_stream_step(ldc_checkpoint, tmp_path / "x.onnx")
    model = build_components(load_config(None, ["model.name=ds2-streaming-tiny", "features.normalize=none"])).model
    with pytest.raises(ValueError, match="multiple of the front end's time stride"):
        StreamStep(model, chunk=31)
    with pytest.raises(ConfigError, match="not an ONNX file"):
        OnnxStep(shared("ldc93s1", "LDC93S1.wav"))
    export_model(streaming_checkpoint, "onnx", tmp_path / "whole.onnx")  # the whole-utterance graph
    with pytest.raises(ConfigError, match="not a streaming step"):
        OnnxStep(tmp_path / "whole.onnx")
    assert UNKNOWN > 10 ** 12


def test_export_streaming_and_transcribe_stream_run_the_step_from_the_command_line(streaming_checkpoint, tmp_path,
                                                                                  capsys):
    import json

    from tests.conftest import main_cli

    out = tmp_path / "step.onnx"
    code, printed, err = main_cli(capsys, "export", "--checkpoint", str(streaming_checkpoint), "--format", "onnx",
                                  "--streaming", "--out", str(out))
    assert code == 0 and json.loads(printed)["streaming"] is True, err
    path = shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")
    _, text = _offline(load_components(streaming_checkpoint), path)
    code, printed, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint",
                                  str(out), str(path))
    rows = [json.loads(x) for x in printed.splitlines()]
    assert code == 0 and " ".join(r["text"] for r in rows if r["type"] == "final") == text, err
    code, _, err = main_cli(capsys, "transcribe", "--checkpoint", str(out), "--backend", "onnx", str(path))
    assert code == 2 and "a streaming step" in err and len(err.strip().splitlines()) == 1
    code, _, err = main_cli(capsys, "export", "--checkpoint", str(streaming_checkpoint), "--format", "torchscript",
                            "--streaming", "--out", str(tmp_path / "x.ts"))
    assert code == 2 and "--format onnx" in err
