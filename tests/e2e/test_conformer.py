"""Conformer-CTC through the whole product, as the other registry models go: trained by the CLI to an exact
LDC93S1 transcript, resumed bit-exactly, served over HTTP, exported to ONNX with the same text."""
import json
import urllib.request

import pytest
import torch

from speechscale.recipe import load_recipe
from speechscale.training.trainer import Trainer
from tests.conftest import data_root, shared, start_server
from tests.distributed.launch import kill_group

LDC = "she had your dark suit in greasy wash water all year"
CONFORMER = ["model.name=conformer-tiny", "features.kind=logmel", "features.n_mels=40"]


@pytest.mark.slow
def test_a_resumed_conformer_run_equals_one_trained_straight_through(tmp_path):
    m = shared("ldc93s1", "manifest.jsonl")

    def cfg(out, *extra):
        return load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={out}",
                                  "trainer.progress=false", "trainer.max_epochs=0", *CONFORMER,
                                  "model.overrides={layers: 2}", *extra])  # dropout on: masks must follow the step

    straight = Trainer(cfg(tmp_path / "a", "trainer.max_steps=4"))
    straight.fit()
    Trainer(cfg(tmp_path / "b", "trainer.max_steps=2")).fit()
    resumed = Trainer(cfg(tmp_path / "b", "trainer.max_steps=4", "trainer.resume=auto"))
    assert resumed.state.step == 2
    resumed.fit()
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.slow
def test_a_trained_conformer_transcribes_served_and_exported(tmp_path, cli):
    """The CLI commands run in this process (`cli`: no interpreter start-up each); the server is a process."""
    wav = shared("ldc93s1", "LDC93S1.wav")
    out = tmp_path / "run"
    summary = json.loads(cli("-q", "train", "--config", "configs/ldc93s1.yaml", f"trainer.out_dir={out}", data_root("ldc93s1"),
                                 *CONFORMER, "model.overrides={dropout: 0.0}").stdout.strip().splitlines()[-1])
    assert summary["wer"] == 0.0 and summary["stopped_by"] == "target_wer"
    ckpt = out / "checkpoints" / "last.pt"
    proc, url = start_server(ckpt, tmp_path / "serve.log")
    try:
        req = urllib.request.Request(url + "/v1/transcribe", data=wav.read_bytes(),
                                     headers={"Content-Type": "audio/wav"})
        with urllib.request.urlopen(req, timeout=120) as r:
            served = json.load(r)
    finally:
        kill_group(proc)
    assert served["text"] == LDC and [w["word"] for w in served["words"]] == LDC.split()
    cli("export", "--checkpoint", str(ckpt), "--format", "onnx", "--out", str(tmp_path / "c.onnx"))
    exported = json.loads(cli("transcribe", "--backend", "onnx", "--checkpoint", str(tmp_path / "c.onnx"),
                                  "--json", str(wav)).stdout)
    assert exported["text"] == LDC
