"""The Python API (`speechscale.load`, `.transcribe`), model cards (`speechscale info`, MODEL.md beside
checkpoints and exports) and `--device` on the inference commands."""
import json
import re

import numpy as np
import pytest
import soundfile as sf
import torch

import speechscale
from speechscale.config import ConfigError
from speechscale.decoding.scoring import score_checkpoint
from speechscale.storage.cards import CARD_JSON, CARD_MD
from speechscale.storage.checkpoints import load_checkpoint
from tests.conftest import main_cli, shared

LDC_TEXT = "she had your dark suit in greasy wash water all year"


def test_importing_the_package_loads_no_torch():
    import subprocess
    import sys

    code = "import sys, speechscale; print('torch' in sys.modules, sorted(speechscale.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False ['Model', 'ModelFileError', 'Transcript', 'Word', '__version__', 'load', 'train']"


def test_a_checkpoint_carries_its_card_and_info_prints_it(ldc_checkpoint, capsys, tmp_path):
    ckpt = load_checkpoint(ldc_checkpoint)
    card = ckpt["card"]
    # recomputed from the weights and the data, not read back from the card
    model = speechscale.load(ldc_checkpoint).module
    assert card["model"]["parameters"] == sum(p.numel() for p in model.parameters())
    durations = [json.loads(x)["duration"] for x in shared("ldc93s1", "manifest.jsonl").read_text().splitlines()]
    assert card["training_data"] == {"manifests": ["manifest.jsonl"], "utterances": 1,
                                     "hours": round(durations[0] / 3600, 3), "speakers": None,
                                     "seconds": {k: round(durations[0], 2) for k in ("median", "p90", "max")}}
    first = {**json.loads(shared("ldc93s1", "manifest.jsonl").read_text().splitlines()[0]),
             "audio_filepath": str(shared("ldc93s1", "LDC93S1.wav"))}  # the recipe's val_slice: [0, 1]
    (tmp_path / "val.jsonl").write_text(json.dumps(first) + "\n")
    scores, _, _ = score_checkpoint(str(ldc_checkpoint), str(tmp_path / "val.jsonl"))
    assert card["validation"]["wer"] == scores["wer"] == 0.0 and card["alphabet"] == "abcdefghijklmnopqrstuvwxyz' "
    assert card["versions"]["torch"] == torch.__version__
    code, out, _ = main_cli(capsys, "info", str(ldc_checkpoint))
    assert code == 0 and out.startswith("# ds2-tiny\n") and f"{card['model']['parameters']:,}" in out
    assert "WER 0.00 %" in out and "1 utterances" in out and f"90 % under {round(durations[0], 2):g} s" in out
    # ds2-tiny's RNNs are bidirectional: the card says it cannot stream, and why, as the recognizer would refuse it
    assert card["streaming"]["streams"] is False and "bidirectional" in card["streaming"]["why"]
    assert "- **Streaming:** no: ds2-tiny has bidirectional RNNs" in out
    # the folder's MODEL.md and model_card.json describe last.pt, the newest checkpoint
    last = load_checkpoint(ldc_checkpoint.parent / "last.pt")["card"]
    assert json.loads((ldc_checkpoint.parent / CARD_JSON).read_text())["validation"] == last["validation"]
    assert "# ds2-tiny" in (ldc_checkpoint.parent / CARD_MD).read_text()


def test_an_export_carries_the_card_and_transcribes_through_the_api(ldc_checkpoint, tmp_path, capsys):
    out = tmp_path / "model.onnx"
    assert main_cli(capsys, "-q", "export", "--checkpoint", str(ldc_checkpoint), "--format", "onnx", "--out",
                    str(out))[0] == 0
    code, text, _ = main_cli(capsys, "info", str(out), "--json")
    card = json.loads(text)
    assert code == 0 and card["file"] == str(out)
    assert {k: v for k, v in card.items() if k != "file"} == load_checkpoint(ldc_checkpoint)["card"]
    assert (tmp_path / f"model.onnx.{CARD_MD}").is_file() and (tmp_path / f"model.onnx.{CARD_JSON}").is_file()
    wav = shared("ldc93s1", "LDC93S1.wav")
    onnx = speechscale.load(out)
    assert onnx.backend == "onnx" and onnx.transcribe(wav).text == LDC_TEXT
    trained = load_checkpoint(ldc_checkpoint)["card"]["training_data"]["seconds"]["p90"]
    assert onnx._asr.chunk_seconds == pytest.approx(1.5 * trained, abs=0.01)  # long audio cut as the checkpoint would
    with pytest.raises(ValueError, match="no nn.Module"):
        _ = onnx.module
    model = speechscale.load(ldc_checkpoint, device="cpu")
    assert model.backend == "torch" and model.device == "cpu"
    stereo, rate = sf.read(shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav"), dtype="float32")
    results = model.transcribe_batch([wav, stereo.mean(axis=1)], sample_rate=rate)
    file44 = model.transcribe(shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav"))  # down-mixed, resampled alike
    assert [r.text for r in results] == [LDC_TEXT, file44.text]
    assert results[0].words[0].word == "she" and results[1].duration == pytest.approx(len(stereo) / rate, 1e-3)
    assert isinstance(results[0], speechscale.Transcript) and isinstance(results[0].words[0], speechscale.Word)
    first = results[0].words[0]
    assert 0 <= first.start < first.end <= results[0].duration and 0 < first.confidence <= 1
    with pytest.raises(ValueError, match="mono"):
        model.transcribe(stereo, sample_rate=rate)
    # an array is checked as a file is: its rate, its samples (a file with NaN is an AudioError; an array too)
    wav_samples, wav_rate = sf.read(wav, dtype="float32")
    for bad_rate in [0, -8000, 100, 10**9, 16000.5, "16000", True]:
        with pytest.raises(ValueError, match="sample_rate must be a whole number of Hz from 4000 to 384000"):
            model.transcribe(wav_samples, sample_rate=bad_rate)
    for bad in [np.full(1600, np.nan, np.float32), np.r_[wav_samples, np.inf].astype(np.float32)]:
        with pytest.raises(ValueError, match="non-finite"):
            model.transcribe(bad)
    with pytest.raises(ValueError, match="expected mono float samples, got bytes"):
        model.transcribe(b"RIFF")
    assert model.transcribe(list(wav_samples), sample_rate=wav_rate).text == LDC_TEXT  # a plain list of numbers
    # integer PCM is scaled to full scale 1.0, as soundfile reads it (an int16 array read as floats was misheard)
    for dtype in ("int16", "int32"):
        pcm, _ = sf.read(wav, dtype=dtype)
        assert model.transcribe(pcm, sample_rate=wav_rate).text == LDC_TEXT, dtype
    u8 = np.clip(np.round(wav_samples * 128 + 128), 0, 255).astype(np.uint8)
    from speechscale.data.audio import as_waveform

    assert np.abs(as_waveform(u8) - wav_samples).max() <= 1 / 128 and as_waveform(np.int8([-128, 64]))[0] == -1.0
    for bad, said in [(np.zeros(1600, np.int64), "int8, int16, int32, uint8 PCM, got int64"),
                      (np.zeros(1600, np.complex64), "got complex64 values"), (np.zeros(1600, bool), "got bool")]:
        with pytest.raises(ValueError, match=said):
            model.transcribe(bad, sample_rate=wav_rate)


def test_device_flags_choose_where_the_model_runs(ldc_checkpoint, capsys, tmp_path):
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    code, out, _ = main_cli(capsys, "transcribe", "--device", "cpu", "--checkpoint", str(ldc_checkpoint), "--json", wav)
    assert code == 0 and json.loads(out)["text"] == LDC_TEXT
    for device, message in [("tpu", "is not a device"), ("cuda:0", "no CUDA device is available")]:
        if device.startswith("cuda") and torch.cuda.is_available():
            continue
        for cmd in (["transcribe", wav], ["eval", "--manifest", str(shared("ldc93s1", "manifest.jsonl"))],
                    ["serve", "--port", "0"]):
            code, _, err = main_cli(capsys, cmd[0], "--device", device, "--checkpoint", str(ldc_checkpoint), *cmd[1:])
            lines = [x for x in err.splitlines() if x.strip()]
            assert code == 2 and len(lines) == 1 and message in lines[0], (cmd, err)


def test_transcribe_runs_files_in_batches_and_keeps_their_order(ldc_checkpoint, capsys, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    wav8 = str(shared("ldc93s1", "LDC93S1_pcms16le_1_8000.wav"))
    silence = tmp_path / "silence.wav"
    sf.write(silence, np.zeros(16000, dtype=np.float32), 16000)
    files = [wav8, str(bad), str(silence), str(shared("ldc93s1", "LDC93S1.wav"))]
    code, out, _ = main_cli(capsys, "transcribe", "--batch-size", "3", "--checkpoint", str(ldc_checkpoint), "--json",
                            *files)
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 1 and [r["file"] for r in rows] == files and "error" in rows[1]
    model = speechscale.load(ldc_checkpoint)
    for i in (0, 2, 3):  # each file as in a batch of its own
        assert rows[i] == {"file": files[i], **model.transcribe(files[i]).to_dict()}, files[i]
    assert rows[3]["text"] == LDC_TEXT and rows[2]["duration"] == 1.0


def test_transcribe_takes_a_folder_as_every_audio_file_under_it(ldc_checkpoint, capsys, tmp_path):
    """A folder was one line, "is a directory": it is every audio file under it, by name, subfolders too."""
    import shutil

    folder = tmp_path / "calls"
    (folder / "b").mkdir(parents=True)
    shutil.copy(shared("ldc93s1", "LDC93S1.wav"), folder / "z.wav")
    shutil.copy(shared("ldc93s1", "LDC93S1_pcms16le_1_8000.wav"), folder / "b" / "a.wav")
    (folder / "notes.txt").write_text("not audio, not named so")
    (folder / "b" / "broken.flac").write_bytes(b"not audio")
    code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--json", str(folder))
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["file"] for r in rows] == [str(folder / "b" / "a.wav"), str(folder / "b" / "broken.flac"),
                                         str(folder / "z.wav")]
    assert code == 1 and "error" in rows[1] and rows[2]["text"] == LDC_TEXT
    assert rows[0]["text"] == speechscale.load(ldc_checkpoint).transcribe(str(folder / "b" / "a.wav")).text
    code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--format", "srt",
                              "--out-dir", str(tmp_path / "subs"), str(folder / "b"), str(folder / "z.wav"))
    assert sorted(p.name for p in (tmp_path / "subs").iterdir()) == ["a.srt", "z.srt"]
    # --out-dir with text or JSON: a file each, a folder's files under their paths in it (b/a.wav and a/a.wav differ)
    (folder / "a").mkdir()
    shutil.copy(folder / "b" / "a.wav", folder / "a" / "a.wav")
    for fmt, suffix in [("text", "txt"), ("json", "json")]:
        code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--format", fmt,
                                  "--out-dir", str(tmp_path / fmt), str(folder))
        written = sorted(p.relative_to(tmp_path / fmt).as_posix() for p in (tmp_path / fmt).rglob("*") if p.is_file())
        assert code == 1 and written == [f"a/a.{suffix}", f"b/a.{suffix}", f"z.{suffix}"]  # none for broken.flac
        assert f"{folder / 'z.wav'}\t{tmp_path / fmt / ('z.' + suffix)}" in out.splitlines() and "broken.flac" in out
    assert (tmp_path / "text" / "z.txt").read_text() == LDC_TEXT + "\n"
    # --skip-existing: a job resumed passes over the outputs that are there and writes the rest
    (tmp_path / "text" / "z.txt").write_text("kept\n")
    (tmp_path / "text" / "b" / "a.txt").unlink()
    code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), "--out-dir",
                              str(tmp_path / "text"), "--skip-existing", str(folder))
    assert (tmp_path / "text" / "z.txt").read_text() == "kept\n" and (tmp_path / "text" / "b" / "a.txt").is_file()
    assert f"{folder / 'z.wav'}\t{tmp_path / 'text' / 'z.txt'} (there already)" in out.splitlines()
    assert f"{folder / 'b' / 'a.wav'}\t{tmp_path / 'text' / 'b' / 'a.txt'}" in out.splitlines() and code == 1
    assert not list((tmp_path / "text").rglob(".*.tmp.*"))  # each file written whole, no temp left
    assert json.loads((tmp_path / "json" / "b" / "a.json").read_text()) == {"file": str(folder / "b" / "a.wav"),
                                                                            **rows[0]} | {"file": rows[0]["file"]}
    (tmp_path / "none").mkdir()
    code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(ldc_checkpoint), str(tmp_path / "none"))
    assert code == 2 and out == "" and "none: a folder with no audio files under it (named aac" in err
    assert err.count("\n") == 1


def test_a_run_folder_loads_its_best_checkpoint_and_the_module_is_public(ldc_checkpoint, tmp_path):
    run = ldc_checkpoint.parent.parent  # trainer.out_dir: checkpoints/best.pt inside
    model = speechscale.load(run, device="cpu")
    assert model.path == str(ldc_checkpoint) and model.transcribe(shared("ldc93s1", "LDC93S1.wav")).text == LDC_TEXT
    assert isinstance(model.module, torch.nn.Module)
    reference = speechscale.load(ldc_checkpoint, device="cpu").module.state_dict()
    assert all(torch.equal(v, reference[k]) for k, v in model.module.state_dict().items())
    assert model.components.normalizer("She, HAD!") == "she had" and model.components.tokenizer is not None
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="without checkpoints/best.pt or checkpoints/last.pt"):
        speechscale.load(tmp_path / "empty")


def test_the_cli_takes_a_run_folder_and_the_api_a_url(ldc_checkpoint, tmp_path, capsys):
    """The API loaded a run folder and the CLI did not ("is a directory"); the API turned memory://x into
    memory:/x ("checkpoint not found")."""
    import fsspec

    run, wav = ldc_checkpoint.parent.parent, str(shared("ldc93s1", "LDC93S1.wav"))
    code, out, err = main_cli(capsys, "transcribe", "--checkpoint", str(run), "--json", wav)
    assert code == 0 and json.loads(out)["text"] == LDC_TEXT, err
    code, out, _ = main_cli(capsys, "info", "--json", str(run))
    assert code == 0 and json.loads(out)["model"]["name"] == "ds2-tiny"
    (tmp_path / "empty").mkdir()
    code, _, err = main_cli(capsys, "eval", "--checkpoint", str(tmp_path / "empty"), "--manifest", "m.jsonl")
    assert code == 2 and "without checkpoints/best.pt or checkpoints/last.pt" in err and err.count("\n") == 1
    fsspec.filesystem("memory").pipe("/speechscale-api/best.pt", ldc_checkpoint.read_bytes())
    remote = speechscale.load("memory://speechscale-api/best.pt", device="cpu")
    assert remote.path == "memory://speechscale-api/best.pt" and remote.transcribe(wav).text == LDC_TEXT


def test_the_api_names_a_wrong_argument_before_any_work(ldc_checkpoint):
    """train(None) said "manifest not found: ."; overrides given as one string were read a character at a time;
    transcribe(None) spoke of "object values"."""
    from speechscale.config import ConfigError

    for kwargs, said in [({"recipe": None}, "recipe: a built-in recipe's name"),
                         ({"recipe": "ldc93s1", "overrides": "trainer.max_steps=1"}, "overrides: a list of 'key=value'"),
                         ({"recipe": "ldc93s1", "overrides": [3]}, "overrides: a list"),
                         ({"recipe": "ldc93s1", "trainer": 5}, "trainer=...: expected a mapping"),
                         ({"recipe": "ldc93s1", "trainr": {"max_steps": 1}}, "unknown key(s) trainr")]:
        with pytest.raises(ConfigError, match=re.escape(said)):
            speechscale.train(**kwargs)
    model = speechscale.load(ldc_checkpoint, device="cpu")
    for bad in (None, 5, {"audio": []}):
        with pytest.raises(ValueError, match="expected a file path, a URL or mono samples"):
            model.transcribe(bad)
    # one file or waveform given to transcribe_batch was read a character (a sample) at a time: "/: is a directory"
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    for one in (wav, shared("ldc93s1", "LDC93S1.wav"), np.zeros(1600, np.float32), torch.zeros(1600), 5):
        with pytest.raises(ValueError, match="transcribe_batch takes a list of files or waveforms, got one"):
            model.transcribe_batch(one)
    assert [r.text for r in model.transcribe_batch((wav, wav))] == [LDC_TEXT] * 2


def test_a_torch_tensor_is_transcribed_as_the_same_samples_in_an_array(ldc_checkpoint):
    """A PyTorch toolkit refused torch tensors ("expected a file path, a URL or mono samples (an array), got
    Tensor"): each is read as its values, PCM integers scaled as an array's, half precision widened."""
    model = speechscale.load(ldc_checkpoint, device="cpu")
    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    pcm, _ = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="int16")
    want = model.transcribe(wav, sample_rate=rate)
    assert want.text == LDC_TEXT
    for tensor in [torch.from_numpy(wav), torch.from_numpy(wav).requires_grad_(), torch.from_numpy(pcm),
                   torch.from_numpy(wav.astype(np.float64))]:
        got = model.transcribe(tensor, sample_rate=rate)
        assert got.to_dict() == want.to_dict(), tensor.dtype
    from speechscale.data.audio import as_waveform

    half = as_waveform(torch.from_numpy(wav).to(torch.bfloat16))  # NumPy has no bfloat16
    assert half.dtype == np.float32 and np.array_equal(half, torch.from_numpy(wav).to(torch.bfloat16).float().numpy())
    assert np.abs(half - wav).max() <= 2 ** -8 * np.abs(wav).max()
    assert model.transcribe(torch.from_numpy(wav).half(), sample_rate=rate).text == LDC_TEXT
    with pytest.raises(ValueError, match=r"mono waveform \(T,\), got shape \(2, "):
        model.transcribe(torch.from_numpy(np.stack([wav, wav])), sample_rate=rate)
    with pytest.raises(ValueError, match="int8, int16, int32, uint8 PCM, got int64"):
        model.transcribe(torch.zeros(1600, dtype=torch.int64), sample_rate=rate)
    with pytest.raises(ValueError, match="non-finite"):
        model.transcribe(torch.full((1600,), float("nan")), sample_rate=rate)


def test_evaluate_scores_a_manifest_as_eval_does(ldc_checkpoint, tmp_path, capsys):
    """A notebook had to shell out to `speechscale eval` for a WER."""
    manifest = shared("ldc93s1", "manifest.jsonl")
    code, out, _ = main_cli(capsys, "eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest), "--json",
                            "--decoder", "beam", "--beam-width", "4")
    printed = json.loads(out)
    for decoder in ("greedy", "beam"):
        got = speechscale.load(ldc_checkpoint, device="cpu", decoder=decoder, beam_width=4).evaluate(manifest)
        want = score_checkpoint(str(ldc_checkpoint), str(manifest))[0] if decoder == "greedy" else printed
        assert got == {k: want[k] for k in got} and got["utterances"] == 3, decoder
    model = speechscale.load(ldc_checkpoint, device="cpu")
    with pytest.raises(ValueError, match="manifest not found"):
        model.evaluate(tmp_path / "none.jsonl")
    with pytest.raises(ValueError, match="batch_seconds must be a positive number"):
        model.evaluate(manifest, batch_seconds=0)
    onnx = tmp_path / "m.onnx"
    assert main_cli(capsys, "-q", "export", "--checkpoint", str(ldc_checkpoint), "--format", "onnx", "--out",
                    str(onnx))[0] == 0
    with pytest.raises(ValueError, match=r"evaluate scores a checkpoint, not an export \(onnx; "):
        speechscale.load(onnx).evaluate(manifest)
