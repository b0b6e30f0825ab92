"""deepspeech.pytorch's own checkpoints (../shared/data/deepspeech_pytorch, written by its code): read without OmegaConf
or Lightning and without running code from them, they give its probabilities (1e-4), frames, greedy text and offsets
on the fixture's recordings and, against an independent restatement of its model and front end, on recordings the
fixture does not hold; the unidirectional model streams (the API, `transcribe --stream`, the ONNX step, the
WebSocket) its offline text under the normalization a stream can compute; export and fine-tuning work on it; a bad or
hostile file is one line."""
import json
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from torch import nn

import speechscale
from speechscale.components import load_components
from speechscale.data.audio import load_audio
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.storage.deepspeech_pytorch import LIGHTNING
from speechscale.storage.errors import ModelFileError
from speechscale.storage.untrusted import archive_records, read_archive, read_model_bytes
from speechscale.streaming.phrases import MAX_ENDPOINT_FRAMES
from tests.conftest import main_cli, run_cli, shared

MODELS = ("bidirectional_gru", "unidirectional_lstm")
FILES = ("LDC93S1.wav", "LDC93S1_from44k.wav", "fsdd_16k.wav", "jfk_16k.wav", "yesno_16k.wav")
UNSEEN = [("fsdd", "recordings/3_jackson_7.wav"), ("fsdd", "recordings/8_nicolas_21.wav"),
          ("yesno", "0_1_0_0_1_0_1_1.wav"), ("ldc93s1", "LDC93S1_pcms16le_1_8000.wav"),
          ("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")]


def fixture(*parts: str):
    return shared("deepspeech_pytorch", *parts)


def expected() -> dict:
    return json.loads(fixture("expected.json").read_text())


def probabilities(comps, wav: np.ndarray) -> np.ndarray:
    """The imported model's softmax output (T', V) for a whole waveform."""
    feats = comps.features(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)))
    with torch.no_grad():
        logits, lens = comps.model(feats[None], torch.tensor([feats.shape[1]]))
    return logits[0, : int(lens[0])].softmax(-1).numpy()


def greedy(probs: np.ndarray, labels: list[str]) -> tuple[str, list[int]]:
    """deepspeech.pytorch's GreedyDecoder on (T, V) probabilities in its label order: text and character frames."""
    best, text, offsets = probs.argmax(1), "", []
    for t, k in enumerate(best):
        if labels[k] != "_" and not (t > 0 and best[t - 1] == k):
            text, offsets = text + labels[k], offsets + [t]
    return text, offsets


@pytest.mark.parametrize("model", MODELS)
def test_the_fixture_recordings_give_deepspeech_pytorchs_probabilities_frames_text_and_offsets(model):
    comps = load_components(fixture(f"{model}.ckpt"))
    want = expected()
    labels = want["labels"]
    assert comps.tokenizer.units == [c for c in labels if c != "_"] and comps.model_name == "deepspeech-pytorch"
    for name in FILES:
        ref = np.load(fixture(f"{model}.{name[:-4]}.probs.npy"))
        probs = probabilities(comps, load_audio(fixture("audio", name), 16000))
        assert probs.shape == ref.shape == (want["models"][model]["files"][name]["frames"], 29), name
        assert np.abs(probs - ref).max() <= 1e-4, (name, np.abs(probs - ref).max())
        text, offsets = greedy(probs, labels)
        assert text == want["models"][model]["files"][name]["transcription"], name
        assert offsets == want["models"][model]["files"][name]["offsets"], name
    api = speechscale.load(str(fixture(f"{model}.ckpt")), device="cpu")
    assert api.transcribe(str(fixture("audio", "LDC93S1.wav"))).text == "SHE HAD YOUR DARK SUIT IN GREASY WASH WATER ALL YEAR"


def test_eval_and_info_take_the_checkpoint_itself(tmp_path, capsys):
    """The reference in small letters and with punctuation is normalized into the model's capitals."""
    manifest = tmp_path / "ldc.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": str(fixture("audio", "LDC93S1.wav")), "duration": 2.92,
                                    "text": "She had your dark suit in greasy wash water all year."}) + "\n")
    code, printed, err = main_cli(capsys, "eval", "--checkpoint", str(fixture("bidirectional_gru.ckpt")), "--manifest",
                                  str(manifest), "--json")
    assert code == 0 and json.loads(printed)["wer"] == 0.0, err
    code, printed, err = main_cli(capsys, "info", str(fixture("unidirectional_lstm.ckpt")))
    assert code == 0 and "Imported from:** deepspeech.pytorch" in printed and "epoch 60" in printed, err


# ---- an independent restatement of deepspeech.pytorch's DeepSpeech and its spectrogram, from its published code


def reference_features(wav: np.ndarray, rate: int = 16000) -> torch.Tensor:
    """librosa.stft as deepspeech.pytorch calls it (window "hamming": periodic; zeros padded), log1p, one mean and one
    (unbiased) deviation over the whole spectrogram; numpy in float64, then float32 as it hands on. (F, T)."""
    n_fft, hop = int(rate * 0.02), int(rate * 0.01)
    window = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    y = np.pad(wav.astype(np.float64), n_fft // 2)
    frames = 1 + (len(y) - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spect = torch.tensor(np.log1p(np.abs(np.fft.rfft(y[idx] * window, axis=1))).T, dtype=torch.float32)
    return (spect - spect.mean()) / spect.std()


class _Wrap(nn.Module):
    def __init__(self, **modules: nn.Module) -> None:
        super().__init__()
        for k, v in modules.items():
            setattr(self, k, v)


def reference_model(state: dict, cfg: dict) -> nn.Module:
    """deepspeech.pytorch's DeepSpeech module tree (its parameter names), the checkpoint's weights loaded."""
    bi = cfg["_type"] == "BiDirectionalConfig"
    h, rnn = cfg["hidden_size"], {"lstm": nn.LSTM, "gru": nn.GRU}[cfg["rnn_type"]]
    m = _Wrap(conv=_Wrap(seq_module=nn.Sequential(
        nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20),
        nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20))),
        rnns=nn.ModuleList([_Wrap(rnn=rnn(1312 if i == 0 else h, h, bidirectional=bi),
                                  **({"batch_norm": _Wrap(module=nn.BatchNorm1d(h))} if i else {}))
                            for i in range(cfg["hidden_layers"])]),
        fc=nn.Sequential(_Wrap(module=nn.Sequential(nn.BatchNorm1d(h), nn.Linear(h, 29, bias=False)))))
    if not bi:
        m.lookahead = nn.Sequential(_Wrap(conv=nn.Conv1d(h, h, cfg["lookahead_context"], groups=h, bias=False)),
                                    nn.Hardtanh(0, 20))
    m.load_state_dict(state)
    return m.eval()


def reference_probabilities(m: nn.Module, cfg: dict, spect: torch.Tensor) -> np.ndarray:
    """Its forward for one utterance, (T, N, H) as it computes it: (T', 29) softmax probabilities."""
    with torch.no_grad():
        x = m.conv.seq_module(spect[None, None])  # (1, 32, 41, T')
        x = x.view(1, -1, x.shape[3]).permute(2, 0, 1)  # (T', 1, 1312)
        for i, layer in enumerate(m.rnns):
            if i:
                x = layer.batch_norm.module(x.reshape(-1, x.shape[2])).view(x.shape)
            x = layer.rnn(x)[0]
            if cfg["_type"] == "BiDirectionalConfig":
                x = x.view(x.shape[0], x.shape[1], 2, -1).sum(2)
        if hasattr(m, "lookahead"):
            y = nn.functional.pad(x.permute(1, 2, 0), (0, cfg["lookahead_context"] - 1))
            x = m.lookahead[1](m.lookahead[0].conv(y)).permute(2, 0, 1)
        x = m.fc[0].module(x.reshape(-1, x.shape[2]))  # (T', 29)
    return x.softmax(-1).numpy()


@pytest.mark.parametrize("model", MODELS)
def test_recordings_the_fixture_does_not_hold_give_what_deepspeech_pytorchs_model_gives(model):
    """The restatement is first shown to give the fixture's probabilities; then ours equal it on other recordings."""
    path = fixture(f"{model}.ckpt")
    data = read_model_bytes(path)
    tree = read_archive(data, archive_records(data, path), path, LIGHTNING).tree
    cfg = tree["hyper_parameters"]["model_cfg"]
    ref_model = reference_model(tree["state_dict"], cfg)
    for name in ("LDC93S1.wav", "yesno_16k.wav"):
        mine = reference_probabilities(ref_model, cfg, reference_features(load_audio(fixture("audio", name), 16000)))
        assert np.abs(mine - np.load(fixture(f"{model}.{name[:-4]}.probs.npy"))).max() <= 1e-4
    comps = load_components(path)
    for corpus, name in UNSEEN:
        wav = load_audio(shared(corpus, name), 16000)
        ref = reference_probabilities(ref_model, cfg, reference_features(wav))
        probs = probabilities(comps, wav)
        assert probs.shape == ref.shape and np.abs(probs - ref).max() <= 1e-4, (name, np.abs(probs - ref).max())
        assert greedy(probs, expected()["labels"]) == greedy(ref, expected()["labels"])


# ---- streaming: one mean and deviation fixed at import, which a stream can compute


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The unidirectional model imported with statistics over the fixture's recordings, and its fine-tuning recipe."""
    folder = tmp_path_factory.mktemp("imported")
    manifest = folder / "stats.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(fixture("audio", n)), "duration": 1.0,
                                            "text": "x"}) + "\n" for n in FILES))
    out = folder / "uni.pt"
    proc = run_cli("import", "deepspeech-pytorch", str(fixture("unidirectional_lstm.ckpt")), "--out", str(out),
                   "--stats", str(manifest), "--recipe", str(folder / "finetune.yaml"))
    summary = json.loads(proc.stdout)
    assert summary["streams"] is True and summary["model"] == "deepspeech-pytorch", proc.stderr
    return out


def offline_under_stream_normalization(path, wav: np.ndarray) -> tuple[torch.Tensor, str]:
    """The imported model over a whole waveform, its features normalized as its streams normalize them."""
    from speechscale.decoding.greedy import greedy_decode

    comps = load_components(path)
    comps.features.cfg.normalize = comps.features.cfg.stream_normalize
    feats = comps.features(torch.from_numpy(wav))
    with torch.no_grad():
        logits, lens = comps.model(feats[None], torch.tensor([feats.shape[1]]))
    return logits[0], greedy_decode(logits, lens, comps.tokenizer)[0]


def test_the_imported_unidirectional_model_streams_its_offline_text_under_the_stream_normalization(imported, capsys,
                                                                                                 tmp_path):
    ckpt = load_checkpoint(imported)
    features = ckpt["config"]["features"]
    assert features["normalize"] == "utterance" and features["stream_normalize"] == "global"
    assert len(set(features["global_stats"])) == 2  # one mean, one deviation
    assert ckpt["card"]["streaming"]["normalize"] == "global" and "fixed at import" in ckpt["card"]["imported"][
        "normalization"]
    code, printed, err = main_cli(capsys, "export", "--checkpoint", str(imported), "--format", "onnx", "--streaming",
                                  "--out", str(tmp_path / "step.onnx"))
    assert code == 0, err
    model = speechscale.load(str(imported), device="cpu")
    for name in FILES:
        wav = load_audio(fixture("audio", name), 16000)
        _, text = offline_under_stream_normalization(imported, wav)
        stream = model.stream(sample_rate=16000)
        for piece in np.array_split(wav, 7):
            stream.accept(piece)
        stream.finish()
        assert stream.text == text, name
        for checkpoint in (imported, tmp_path / "step.onnx"):
            code, printed, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint",
                                          str(checkpoint), "--endpoint-frames", str(MAX_ENDPOINT_FRAMES),
                                          str(fixture("audio", name)))  # one phrase: a pause may fall inside a word
            rows = [json.loads(x) for x in printed.splitlines()]
            assert code == 0 and " ".join(r["text"] for r in rows if r["type"] == "final") == text, (name, err)
    offline = model.transcribe(str(fixture("audio", "LDC93S1.wav"))).text  # files: as deepspeech.pytorch
    assert offline == expected()["models"]["unidirectional_lstm"]["files"]["LDC93S1.wav"]["transcription"]


def test_the_imported_model_streams_over_the_websocket(imported, tmp_path):
    from tests.conftest import start_server
    from tests.distributed.launch import kill_group
    from tests.serving.test_stream_ws import _talk

    wav = load_audio(fixture("audio", "LDC93S1.wav"), 16000)
    proc, url = start_server(imported, tmp_path / "serve.log")
    try:
        pcm = (wav * 32767).round().astype("<i2").tobytes()
        frames = [pcm[i:i + 3200] for i in range(0, len(pcm), 3200)]
        messages, code, _ = _talk(url, {"type": "start", "sample_rate": 16000, "encoding": "pcm16"}, frames)
    finally:
        kill_group(proc)
    assert code == 1000 and messages[-1]["type"] == "end"
    pcm_wav = np.frombuffer(pcm, "<i2") / np.float32(32768)
    assert messages[-1]["text"] == offline_under_stream_normalization(imported, pcm_wav.astype(np.float32))[1]


def test_a_bidirectional_model_cannot_stream_and_says_so(capsys, tmp_path):
    code, _, err = main_cli(capsys, "import", "deepspeech-pytorch", str(fixture("bidirectional_gru.ckpt")), "--out",
                            str(tmp_path / "bi.pt"), "--stats", str(shared("ldc93s1", "manifest.jsonl")))
    assert code == 2 and "bidirectional" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bi.pt").exists()
    code, _, err = main_cli(capsys, "transcribe", "--stream", "--checkpoint", str(fixture("unidirectional_lstm.ckpt")),
                            str(fixture("audio", "fsdd_16k.wav")))
    assert code == 2 and "--stats" in err and len(err.strip().splitlines()) == 1


# ---- export and fine-tuning


def test_export_runs_the_imported_model_as_the_checkpoint_does(capsys, tmp_path):
    path = fixture("bidirectional_gru.ckpt")
    wav = load_audio(fixture("audio", "yesno_16k.wav"), 16000)
    want = expected()["models"]["bidirectional_gru"]["files"]["yesno_16k.wav"]["transcription"]
    for fmt, name in (("onnx", "m.onnx"), ("torchscript", "m.ts")):
        code, _, err = main_cli(capsys, "export", "--checkpoint", str(path), "--format", fmt, "--out",
                                str(tmp_path / name))
        assert code == 0, err
        assert speechscale.load(str(tmp_path / name), device="cpu").transcribe(wav, sample_rate=16000).text == want


def test_fine_tuning_starts_from_the_imported_weights(imported, tmp_path):
    """trainer.init_from with the recipe `import --recipe` wrote: the run starts from the imported weights, trains on
    LDC93S1 (upper-case text, as the model spells it) and writes a checkpoint that still transcribes it."""
    import yaml

    recipe = yaml.safe_load((imported.parent / "finetune.yaml").read_text())
    recipe["data"] = {"root": str(shared("ldc93s1")), "train_manifest": "manifest.jsonl",
                      "val_manifest": "manifest.jsonl", "train_slice": [0, 1], "val_slice": [0, 1], "num_workers": 0}
    recipe["optim"] = {"lr": 1e-5, "warmup_steps": 0, "schedule": "constant"}
    recipe["trainer"].update(max_steps=2, out_dir=str(tmp_path / "run"), seed=1)
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump(recipe))
    proc = run_cli("-q", "train", "--config", str(tmp_path / "ft.yaml"), check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tuned = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    start = load_checkpoint(imported)["model"]
    moved = max(float((tuned["model"][k] - v).abs().max()) for k, v in start.items()
                if not k.endswith(("running_mean", "running_var", "num_batches_tracked")))  # the trained parameters
    assert 0 < moved < 1e-2  # trained from the imported weights, not from scratch
    text = speechscale.load(str(tmp_path / "run" / "checkpoints" / "last.pt"), device="cpu").transcribe(
        str(fixture("audio", "LDC93S1.wav"))).text
    assert text == "SHE HAD YOUR DARK SUIT IN GREASY WASH WATER ALL YEAR"


# ---- bad and hostile files: one line, nothing run, nothing written


def _tree() -> dict:
    path = fixture("unidirectional_lstm.ckpt")
    data = read_model_bytes(path)
    return read_archive(data, archive_records(data, path), path, LIGHTNING).tree


def _fake_class(monkeypatch, module: str, name: str) -> type:
    """A class importable as MODULE.NAME in this test only: pickling its instances writes that name, as OmegaConf's own
    objects would (the reader must never import it)."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        if ".".join(parts[:i]) not in sys.modules:
            monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    cls = type(name, (), {"__module__": module})
    monkeypatch.setattr(sys.modules[module], name, cls, raising=False)
    return cls


class _Runs:
    """Pickled as a call of os.system: a file that runs a command when unpickled."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        import os

        return os.system, (self.command,)


def _hostile(kind: str, tmp_path, monkeypatch) -> tuple[object, str]:
    """(the tree to save, words its refusal holds)."""
    tree = _tree()
    if kind == "runs code":
        tree["hyper_parameters"]["model_cfg"]["hidden_size"] = _Runs(f"touch {tmp_path / 'ran'}")
        return tree, "posix.system"
    if kind == "another module":
        return {"state_dict": {"encoder.weight": torch.zeros(2, 2)}, "hyper_parameters": {"lr": 0.1},
                "epoch": 3}, "not a deepspeech.pytorch DeepSpeech checkpoint"
    if kind == "missing key":
        del tree["state_dict"]["fc.0.module.1.weight"]
        return tree, "has no fc.0.module.1.weight"
    if kind == "shapes":
        tree["hyper_parameters"]["model_cfg"]["hidden_size"] = 256
        return tree, "do not fit its model_cfg"
    if kind == "layers":
        tree["hyper_parameters"]["model_cfg"]["hidden_layers"] = 3
        return tree, "says 3 recurrent layers"
    if kind == "labels":
        tree["hyper_parameters"]["labels"] = tree["hyper_parameters"]["labels"][1:]
        return tree, "labels"
    if kind == "plain rnn":
        tree["hyper_parameters"]["model_cfg"]["rnn_type"] = "rnn"
        return tree, "GRU and LSTM layers only"
    if kind == "window":
        tree["hyper_parameters"]["spect_cfg"]["window"] = "hann"
        return tree, "Hamming windows only"
    if kind == "cycle":
        config = _fake_class(monkeypatch, "omegaconf.dictconfig", "DictConfig")()
        config._content = {"self": config}
        tree["hyper_parameters"]["model_cfg"] = config
        return tree, "nested more than"
    if kind == "laughs":
        config = _fake_class(monkeypatch, "omegaconf.dictconfig", "DictConfig")
        level = None
        for _ in range(40):
            node = config()
            node._content = {"a": level, "b": level}
            level = node
        tree["hyper_parameters"]["optim_cfg"] = level
        return tree, "more than 1000000 values"
    if kind == "unknown class":
        tree["hyper_parameters"]["optim_cfg"] = _fake_class(monkeypatch, "omegaconf.resolvers", "Evil")()
        return tree, "omegaconf.resolvers.Evil"
    raise AssertionError(kind)


HOSTILE = ("runs code", "another module", "missing key", "shapes", "layers", "labels", "plain rnn", "window", "cycle",
           "laughs", "unknown class")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_bad_or_hostile_deepspeech_pytorch_file_is_one_line_and_runs_nothing(kind, tmp_path, capsys, monkeypatch):
    tree, words = _hostile(kind, tmp_path, monkeypatch)
    bad = tmp_path / "bad.ckpt"
    torch.save(tree, bad)
    with pytest.raises(ModelFileError, match=words.replace(".", r"\.").replace("(", r"\(")):
        load_checkpoint(bad)
    for args in (("import", "deepspeech-pytorch", str(bad), "--out", str(tmp_path / "out.pt")),
                 ("transcribe", "--checkpoint", str(bad), str(fixture("audio", "fsdd_16k.wav")))):
        code, printed, err = main_cli(capsys, *args)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "out.pt").exists() and not (tmp_path / "ran").exists()


def test_the_code_file_does_run_code_when_unpickled_whole(tmp_path, monkeypatch):
    """The control: the same file under an unrestricted torch.load runs its command (in a child process)."""
    tree, _ = _hostile("runs code", tmp_path, monkeypatch)
    torch.save(tree, tmp_path / "bad.ckpt")
    subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(tmp_path / 'bad.ckpt')!r}, "
                    "weights_only=False)"], capture_output=True, timeout=120)
    assert (tmp_path / "ran").exists()
