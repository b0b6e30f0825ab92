"""The model's streaming step exported to ONNX (run by onnxruntime, any batch size): fed through StreamingSession and
through a recognizer batching streams of different files and rates, its logits and text equal the offline model's
on real files for every chunk size; models that cannot stream are refused. The step itself in PyTorch:
tests/models/test_stream_step.py."""
import pytest
import torch

from speechscale.components import build_components, load_components
from speechscale.config import ConfigError, load_config
from speechscale.export.stream_runtime import OnnxStep, TorchStep, is_stream_step
from speechscale.export.stream_step import export_stream_step
from speechscale.models.streaming import UNKNOWN
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
            assert session.text == text, (path.name, ms)  # as the PyTorch stream's (tests/serving/test_streaming.py)


def test_the_onnx_step_batches_streams_of_different_files_and_rates(streaming_checkpoint, onnx_step):
    """Three streams (8, 16 and 44.1 kHz; 0.6-11 s) through one recognizer running the ONNX step: their rows share
    batches (padded to powers of two) until each ends, and each gets its own offline logits and text."""
    import soundfile as sf

    from speechscale.streaming.recognizer import Recognizer

    comps = load_components(streaming_checkpoint)
    rec = Recognizer(comps, step=OnnxStep(onnx_step))
    assert rec.chunk == 32
    paths = [shared("ldc93s1", "LDC93S1_pcms16le_1_8000.wav"), shared("jfk", "jfk.flac"), _files()[0]]
    audio = [sf.read(str(p), dtype="float32", always_2d=True) for p in paths]
    audio = [(wav.mean(axis=1), rate) for wav, rate in audio]
    streams = [rec.create_stream(rate) for _, rate in audio]
    for s in streams:
        s.keep_logits = []
    at = 0
    while any(not s.ended for s in streams):
        for s, (wav, rate) in zip(streams, audio):
            n = rate // 10
            if at * n < len(wav):
                s.push(wav[at * n:(at + 1) * n])
            elif not s.closed:
                s.close()
        rec.decode_streams(streams)
        for s in streams:
            s.events()
        at += 1
    for s, path in zip(streams, paths):
        logits, text = _offline(comps, path)
        torch.testing.assert_close(torch.cat(s.keep_logits), logits, atol=2e-4, rtol=1e-4)
        assert s.text == text, path.name


def test_models_that_cannot_stream_are_refused_in_one_line(ldc_checkpoint, streaming_checkpoint, tmp_path):
    from speechscale.export.exporter import export_model

    with pytest.raises(ConfigError, match="cannot stream"):
        export_stream_step(ldc_checkpoint, tmp_path / "x.onnx")
    model = build_components(load_config(None, ["model.name=ds2-streaming-tiny", "features.normalize=none"])).model
    with pytest.raises(ValueError, match="multiple of the front end's time stride"):
        TorchStep(model, chunk=31)
    with pytest.raises(ConfigError, match="multiple of the front end's time stride"):
        export_stream_step(streaming_checkpoint, tmp_path / "x.onnx", chunk=31)
    with pytest.raises(ConfigError, match="not an ONNX file"):
        OnnxStep(shared("ldc93s1", "LDC93S1.wav"))
    export_model(streaming_checkpoint, "onnx", tmp_path / "whole.onnx")  # the whole-utterance graph
    with pytest.raises(ConfigError, match="not a streaming step"):
        OnnxStep(tmp_path / "whole.onnx")
    assert UNKNOWN > 10 ** 12


def test_export_streaming_and_transcribe_stream_run_the_step_from_the_command_line(streaming_checkpoint, tmp_path,
                                                                                  capsys, s3):
    """Also from object storage (a real S3 server on loopback): the same lines as the local file."""
    import json

    import fsspec

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
    fsspec.filesystem("s3").pipe("ckpts/step.onnx", out.read_bytes())
    code, remote, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint",
                                 "s3://ckpts/step.onnx", str(path))
    assert code == 0 and [json.loads(x)["text"] for x in remote.splitlines()] == [r["text"] for r in rows], err
    code, _, err = main_cli(capsys, "transcribe", "--checkpoint", str(out), "--backend", "onnx", str(path))
    assert code == 2 and "a streaming step" in err and len(err.strip().splitlines()) == 1
    code, _, err = main_cli(capsys, "export", "--checkpoint", str(streaming_checkpoint), "--format", "torchscript",
                            "--streaming", "--out", str(tmp_path / "x.ts"))
    assert code == 2 and "--format onnx" in err


@pytest.mark.parametrize("junk, words", [
    ({"chunk": 10 ** 9}, "has chunk 1000000000"),
    ({"state": {"h": [1, 1 << 20, 1 << 20]}}, "names state 'h', which is not an input"),
    ("a string", "is not a mapping"),
])
def test_a_streaming_step_with_a_junk_description_is_one_line_before_any_state(streaming_checkpoint, tmp_path,
                                                                               capsys, junk, words):
    """A step file whose description asks for a chunk of 10^9 frames, a state of 10^12 values or is not a mapping
    (from a stranger, or another tool): transcribe --stream and info refuse it in one line, before a stream
    allocates its state."""
    import json

    import onnx

    from tests.conftest import main_cli

    out = tmp_path / "step.onnx"
    export_stream_step(streaming_checkpoint, out)
    model = onnx.load(str(out))
    kept = [(p.key, p.value) for p in model.metadata_props if p.key != "speechscale.crc32"]
    del model.metadata_props[:]
    for key, value in kept:
        if key == "speechscale":
            desc = json.loads(value)
            desc["stream_step"] = {**desc["stream_step"], **junk} if isinstance(junk, dict) else junk
            value = json.dumps(desc)
        model.metadata_props.add(key=key, value=value)
    bad = tmp_path / "junk.onnx"
    onnx.save(model, str(bad))
    path = str(shared("ldc93s1", "LDC93S1.wav"))
    for command in (["transcribe", "--stream", "--no-realtime", "--checkpoint", str(bad), path], ["info", str(bad)]):
        code, _, err = main_cli(capsys, *command)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and words in lines[0] and "junk.onnx" in lines[0], err


def test_one_opener_runs_the_onnx_step_for_the_api_and_the_websocket_route(streaming_checkpoint, onnx_step, tmp_path):
    """streaming.opener: `speechscale.load(step.onnx).stream()` and `serve --stream-step step.onnx` run the step in
    onnxruntime, as `transcribe --stream` does, and give the offline text; the step file transcribes nothing whole."""
    import numpy as np

    import speechscale
    from speechscale.data.audio import load_audio
    from tests.conftest import start_server
    from tests.distributed.launch import kill_group
    from tests.serving.test_stream_ws import _talk

    path = shared("ldc93s1", "LDC93S1.wav")
    _, text = _offline(load_components(streaming_checkpoint), path)
    model = speechscale.load(str(onnx_step), device="cpu")
    assert model.backend == "onnx-step" and model.components.model_name == "ds2-streaming-tiny"
    wav = load_audio(path, 16000)
    session = model.stream(sample_rate=16000)
    for piece in np.array_split(wav, 9):
        session.accept(piece)
    session.finish()
    assert session.text == text
    with pytest.raises(ValueError, match="runs streams only"):
        model.transcribe(wav, sample_rate=16000)
    with pytest.raises(ConfigError, match="fixed when it is exported"):
        model.stream(step_ms=200)
    proc, url = start_server(streaming_checkpoint, tmp_path / "serve.log", "--stream-step", str(onnx_step))
    try:
        pcm = (wav * 32767).round().astype("<i2").tobytes()
        messages, code, _ = _talk(url, {"type": "start", "sample_rate": 16000, "encoding": "pcm16"},
                                  [pcm[i:i + 3200] for i in range(0, len(pcm), 3200)])
    finally:
        kill_group(proc)
    pcm_text = _offline(load_components(streaming_checkpoint), path)[1]
    assert code == 1000 and messages[-1] == {"type": "end", "text": pcm_text}
