"""The streaming Conformer live: for real files at 8, 16 and 44.1 kHz, streamed in pieces of any size with model
chunks of 4 and 16 output frames, the logits and text equal the same checkpoint's offline ones with attention in
chunks of that size, in PyTorch and through its ONNX step; its full-context transcript is the training text. With
a right context, each step waits for the frames after its chunk and the same holds."""
import json

import numpy as np
import pytest
import soundfile as sf
import torch

from speechscale.components import load_components
from speechscale.export.stream_runtime import OnnxStep
from speechscale.export.stream_step import export_stream_step
from speechscale.storage.checkpoints import load_checkpoint, save_checkpoint
from speechscale.streaming.recognizer import Recognizer
from tests.conftest import shared
from tests.serving.test_streaming import CHUNKS_MS, _files, _offline, _stream

LDC = "she had your dark suit in greasy wash water all year"


def _offline_chunked(comps, path, chunk):
    comps.model.set_chunk(chunk)
    try:
        return _offline(comps, path)
    finally:
        comps.model.set_chunk(None)


@pytest.fixture(scope="module")
def comps(conformer_streaming_checkpoint):
    return load_components(conformer_streaming_checkpoint)


def test_the_streamed_logits_and_text_equal_the_chunked_offline_ones_for_every_file_and_chunk(comps):
    assert comps.features.cfg.normalize == "global" and _offline(comps, shared("ldc93s1", "LDC93S1.wav"))[1] == LDC
    files = [*sorted(shared("ldc93s1").glob("*.wav")), shared("jfk", "jfk.flac"), *_files()[:4]]
    pairs = 0
    for k, path in enumerate(files):
        for chunk in (4, 16):
            logits, text = _offline_chunked(comps, path, chunk)
            ms = CHUNKS_MS[(k + chunk) % len(CHUNKS_MS)]
            session, events = _stream(comps, path, ms, chunk_ms=chunk * 40)  # 40 ms per output frame
            assert session.recognizer.chunk == 4 * chunk
            torch.testing.assert_close(torch.cat(session.logits), logits, atol=2e-4, rtol=1e-4,
                                       msg=lambda m, p=path.name, c=chunk: f"{p} chunk {c}: {m}")
            assert session.text == text, (path.name, chunk)
            pairs += 1
    assert pairs == 2 * len(files)


def test_the_onnx_step_of_the_conformer_streams_the_same_logits(conformer_streaming_checkpoint, comps, tmp_path):
    out = tmp_path / "step.onnx"
    summary = export_stream_step(conformer_streaming_checkpoint, out, chunk=16)
    assert summary["model"] == "conformer-streaming-tiny"
    for path in (shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav"), shared("jfk", "jfk.flac")):
        logits, text = _offline_chunked(comps, path, 4)
        session, _ = _stream(comps, path, 100, step=OnnxStep(out))
        torch.testing.assert_close(torch.cat(session.logits), logits, atol=2e-4, rtol=1e-4)
        assert session.text == text


def with_right_context(checkpoint, right, out):
    """`checkpoint`'s weights reading `right` output frames after each chunk, saved to `out` (a right context adds
    no parameters) -> out."""
    state = load_checkpoint(checkpoint)
    state["config"]["model"]["overrides"]["right_context"] = right
    save_checkpoint(out, state)
    return out


@pytest.fixture(scope="module")
def lookahead_checkpoint(conformer_streaming_checkpoint, tmp_path_factory):
    """The same weights reading 2 output frames after each chunk."""
    return with_right_context(conformer_streaming_checkpoint, 2, tmp_path_factory.mktemp("lookahead") / "right2.pt")


def test_with_a_right_context_each_step_waits_for_the_frames_after_its_chunk_and_streams_the_chunked_logits(
        lookahead_checkpoint, tmp_path):
    """A stream is ready once its chunk and the 8 feature frames after it are in, not before; streamed in pieces
    of several sizes, in PyTorch and through the ONNX step, the logits and text equal the offline ones in chunks
    with the same right context, which differ from the ones without it."""
    comps = load_components(lookahead_checkpoint)
    assert comps.model.stream_lookahead == 8
    rec = Recognizer(comps, chunk_ms=160)
    stream = rec.create_stream(16000)
    wav, _ = sf.read(str(shared("ldc93s1", "LDC93S1.wav")), dtype="float32")
    hop, waiting = comps.features.hop_length, 0
    for i in range(0, hop * (rec.chunk + 20), hop):  # a feature frame at a time
        stream.push(wav[i:i + hop])
        rec.decode_streams([stream])
        if stream.fed:
            break
        waiting = stream.pending.shape[1]
    assert rec.chunk == 16 and waiting == rec.chunk + 7 and stream.fed == rec.chunk and stream.emitted == 4
    out = tmp_path / "step.onnx"
    assert export_stream_step(lookahead_checkpoint, out, chunk=16)["chunk"] == 16
    onnx = OnnxStep(out)
    assert onnx.lookahead == 8
    for k, path in enumerate((shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav"), shared("jfk", "jfk.flac"),
                              _files()[0])):
        logits, text = _offline_chunked(comps, path, 4)
        comps.model.cfg.right_context = 0
        try:
            plain, _ = _offline_chunked(comps, path, 4)
        finally:
            comps.model.cfg.right_context = 2
        assert plain.shape == logits.shape and not torch.allclose(plain, logits, atol=1e-3)
        for step in (None, onnx):
            session, _ = _stream(comps, path, CHUNKS_MS[k], step=step, chunk_ms=160)
            torch.testing.assert_close(torch.cat(session.logits), logits, atol=2e-4, rtol=1e-4)
            assert session.text == text
    assert np.isfinite(logits.numpy()).all()


def test_the_card_says_what_a_checkpoint_and_each_of_its_exports_do_with_a_stream(lookahead_checkpoint, tmp_path,
                                                                                   capsys):
    """`info` on the checkpoint states the 80 ms its right context reads past each step (the step's lookahead times
    the hop); on its offline ONNX file that the file runs whole utterances; on its streaming step that step's audio."""
    from tests.conftest import main_cli

    comps = load_components(lookahead_checkpoint)
    hop_ms = 1000 * comps.features.hop_length / comps.features.cfg.sample_rate
    ahead, frame = comps.model.stream_lookahead * hop_ms, comps.model.stream_stride * hop_ms
    assert (ahead, frame) == (80, 40)
    code, out, _ = main_cli(capsys, "info", str(lookahead_checkpoint))
    assert code == 0 and ("- **Streaming:** yes: a step's text is final once the model has read 80 ms past it "
                          "(`serve`, `transcribe --stream`; a step is 100 ms of audio unless set, rounded up to whole "
                          "40 ms frames)\n") in out
    offline, step = tmp_path / "model.onnx", tmp_path / "step.onnx"
    assert main_cli(capsys, "-q", "export", "--checkpoint", str(lookahead_checkpoint), "--format", "onnx",
                    "--out", str(offline))[0] == 0
    assert main_cli(capsys, "-q", "export", "--checkpoint", str(lookahead_checkpoint), "--format", "onnx",
                    "--streaming", "--chunk", "12", "--out", str(step))[0] == 0
    code, out, _ = main_cli(capsys, "info", str(offline), "--json")
    assert code == 0 and json.loads(out)["streaming"] == {"streams": True, "reads_ahead_ms": 80, "frame_ms": 40,
                                                          "export": "offline"}
    code, out, _ = main_cli(capsys, "info", str(step))
    assert code == 0 and "- **Streaming:** this file is the streaming step: 120 ms of audio a step, and it reads 80 ms " \
                         "past it\n" in out and out.startswith("# conformer-streaming-tiny\n")
    assert "the streaming step" in (tmp_path / "step.onnx.MODEL.md").read_text()


def test_a_streams_step_is_set_from_the_cli_and_the_python_api_and_streams_the_offline_text_in_its_chunks(
        conformer_streaming_checkpoint, comps, tmp_path, capsys):
    """`transcribe --stream --step-ms 160` and `load(ckpt).stream(step_ms=160)` step 4 output frames at a time: the
    text is the offline one with attention in chunks of 4; a step given where it cannot apply is a one-line error."""
    import speechscale
    from tests.conftest import main_cli

    path = shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")
    _, text = _offline_chunked(comps, path, 4)
    code, out, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--step-ms", "160",
                              "--checkpoint", str(conformer_streaming_checkpoint), str(path))
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and " ".join(r["text"] for r in rows if r["type"] == "final") == text, err
    session = speechscale.load(conformer_streaming_checkpoint).stream(step_ms=160)
    assert session.recognizer.chunk == 16  # 4 output frames of 4 feature frames
    assert speechscale.load(conformer_streaming_checkpoint).stream().recognizer.chunk == 12  # 100 ms: 3 frames
    for bad in (0, 10_001):
        with pytest.raises(ValueError, match="at most 10000 ms"):
            speechscale.load(conformer_streaming_checkpoint).stream(step_ms=bad)
    code, _, err = main_cli(capsys, "transcribe", "--stream", "--step-ms", "60000", "--checkpoint",
                            str(conformer_streaming_checkpoint), str(path))
    assert code == 2 and "at most 10000 ms" in err and len(err.strip().splitlines()) == 1
    code, _, err = main_cli(capsys, "serve", "--stream-step-ms", "60000", "--checkpoint",
                            str(conformer_streaming_checkpoint))
    assert code == 2 and "--stream-step-ms" in err and len(err.strip().splitlines()) == 1
    code, _, err = main_cli(capsys, "transcribe", "--step-ms", "160", "--checkpoint",
                            str(conformer_streaming_checkpoint), str(path))
    assert code == 2 and "goes with --stream" in err and len(err.strip().splitlines()) == 1
    step = tmp_path / "step.onnx"
    export_stream_step(conformer_streaming_checkpoint, step, chunk=16)
    code, _, err = main_cli(capsys, "transcribe", "--stream", "--step-ms", "160", "--checkpoint", str(step), str(path))
    assert code == 2 and "fixed when it is exported" in err and len(err.strip().splitlines()) == 1
