"""`python -m benchmarks.transfer`: German from an English model, against scratch and a fresh output layer."""
import json

import pytest
import torch

from benchmarks import tables, transfer
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.init import output_layer
from speechscale.training.trainer import Trainer
from tests.training.tiny import ldc_config


@pytest.mark.protocol  # a measurement protocol end to end: make test-evidence
def test_the_transfer_bench_trains_each_arm_from_where_it_says(tmp_path):
    source_run = tmp_path / "english"
    Trainer(ldc_config(source_run, "features.sample_rate=16000", "trainer.max_steps=2")).fit()  # the demo's features
    source = source_run / "checkpoints" / "last.pt"
    out = tmp_path / "transfer-de.json"
    assert transfer.main(["--source", str(source), "--work", str(tmp_path / "work"), "--seeds", "1", "--epochs", "1",
                          "--minutes", "0.3", "--test-minutes", "0.1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    res = doc["results"]
    assert [(r["arm"], r["seed"], r["epochs"]) for r in res["runs"]] == [(a, 1, 1) for a in transfer.ARMS]
    assert res["new_symbols"] == "äöüß" and set(res["summary"]) == set(transfer.ARMS)

    corpus = tmp_path / "work" / "de"
    train = [json.loads(x) for x in (corpus / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (corpus / "test.jsonl").read_text().splitlines()]
    assert res["corpus"]["utterances"] == {"train": len(train), "test": len(test)}
    assert {r["speaker"] for r in train} <= set(transfer.VOICES) and {r["speaker"] for r in test} == {"de+m6"}
    assert any(set("äöüß") & set(r["text"]) for r in train + test)

    saved = load_checkpoint(source)["model"]
    old = load_checkpoint(source)["config"]["text"]["alphabet"]
    runs = {arm: load_checkpoint(tmp_path / "work" / f"{arm}-seed1" / "checkpoints" / "last.pt")["model"]
            for arm in transfer.ARMS}
    head = output_layer(Trainer(ldc_config(tmp_path / "probe", f"text.alphabet={json.dumps(transfer.ALPHABET)}",
                                           "features.sample_rate=16000", "trainer.max_steps=1")).model,
                        len(transfer.ALPHABET) + 1)
    body = [k for k in saved if not k.startswith(head + ".") and saved[k].is_floating_point() and saved[k].ndim > 1]

    def moved(arm, keys):
        return max(float((runs[arm][k] - saved[k]).abs().max()) for k in keys)

    # a step at the warm-up's first learning rate moves a weight by far less than a fresh initialization does
    assert moved("init_from", body) < 1e-3 and moved("init_from_fresh_output", body) < 1e-3
    front = [k for k in body if k.startswith("conv")]
    assert moved("init_from_frozen_front", front) == 0 and moved("init_from", front) > 0
    assert moved("scratch", body) > 1e-2
    rows = torch.tensor([old.index(c) + 1 for c in transfer.ALPHABET if c in old])
    ids = torch.tensor([i + 1 for i, c in enumerate(transfer.ALPHABET) if c in old])
    w = head + ".weight"
    assert float((runs["init_from"][w][ids] - saved[w][rows]).abs().max()) < 1e-3
    assert float((runs["init_from_fresh_output"][w][ids] - saved[w][rows]).abs().max()) > 1e-2

    block = tables.render("transfer-de", doc)
    assert "ä, ö, ü, ß new" in block and "from scratch" in block and "output layer started fresh" in block
