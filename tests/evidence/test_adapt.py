"""`bench fsdd-loso --adapt`: a fold adapted to its held-out speaker without labels, half by half, never
trained on the half it scores."""
import json

import jiwer
import pytest
import torch

from benchmarks import loso_tables
from benchmarks.adapt import halves
from benchmarks.decoding import split_manifest
from speechscale.decoding.metrics import ErrorRate
from speechscale.recipe import load_recipe
from speechscale.training.trainer import Trainer
from tests.conftest import main_cli, shared
from tests.evidence.conftest import main_benchmarks
from tests.training.tiny import NARROW

WORDS = "eight five four nine one seven six three two zero".split()


@pytest.fixture
def fold(tmp_path):
    """A LOSO fold folder as `bench fsdd-loso` leaves it, small: a narrow model trained an epoch on george's
    50 test-split clips, scored on 24 of nicolas's."""
    fsdd = shared("fsdd", "manifest.jsonl")
    out = tmp_path / "work" / "probe" / "nicolas"
    Trainer(load_recipe("configs/fsdd.yaml", [
        f"data.train_manifest={fsdd}", f"data.val_manifest={fsdd}", "data.filter={speaker: george, split: test}",
        "data.val_filter={speaker: nicolas, split: test}", f"trainer.out_dir={out}", "trainer.max_epochs=1",
        f"model.overrides={NARROW}", "trainer.progress=false", "features.normalize=speaker"])).fit()
    rows = split_manifest(fsdd, {"speaker": ["nicolas"], "split": ["test"]}, out / "test.jsonl")[::2][:24]
    (out / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "lm").mkdir()
    (out / "lm" / "lexicon.txt").write_text("\n".join(WORDS) + "\n")
    return out


@pytest.mark.slow
@pytest.mark.protocol
def test_each_half_is_labelled_by_the_model_trained_on_and_never_scored_by_its_own_adaptation(fold, tmp_path, capsys):
    doc = {"results": {"config": "configs/fsdd.yaml", "overrides": [], "summary": None,
                       "folds": [{"held_out": "nicolas", "wer_greedy": 0.5, "wer_lexicon": 0.4}]}}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "probe.json").write_text(json.dumps(doc))
    code, _, err = main_benchmarks(capsys, "fsdd-loso", "--name", "probe", "--adapt", "--adapt-epochs", "1",
                            "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--benchmarks", "")
    assert code == 0, err
    again = json.loads((tmp_path / "out" / "probe.json").read_text())
    (res,) = again["results"]["folds"]
    assert res["wer_greedy"] == 0.5 and again["adapted"]["commit"]  # the LOSO figures stay; provenance added
    work = fold / "adapt"
    test = [json.loads(x) for x in (fold / "test.jsonl").read_text().splitlines()]
    parts = halves(test)
    assert sorted(r["audio_filepath"] for h in parts for r in h) == sorted(r["audio_filepath"] for r in test)
    last = torch.load(fold / "checkpoints" / "last.pt", weights_only=True)["model"]
    labels = ErrorRate()
    for k in (0, 1):
        trained = [json.loads(x) for x in (work / f"train-half{k}.jsonl").read_text().splitlines()]
        paths = {r["audio_filepath"] for r in trained}
        assert not paths & {r["audio_filepath"] for r in parts[1 - k]}  # the scored half is never trained on
        assert {r["speaker"] for r in trained} == {"george", "nicolas"}  # the fold's data and the pseudo labels
        run = json.loads((work / f"half{k}" / "config.json").read_text())
        assert run["trainer"]["init_from"] == str(fold / "checkpoints" / "last.pt") and run["trainer"]["max_epochs"] == 1
        pseudo = {r["audio_filepath"]: r["text"] for r in trained if r["speaker"] == "nicolas"}
        assert set(" ".join(pseudo.values()).split()) <= set(WORDS)  # the lexicon search's words, never a reference
        labels.update([r["text"] for r in parts[k]], [pseudo.get(r["audio_filepath"], "") for r in parts[k]])
        tuned = torch.load(work / f"half{k}" / "checkpoints" / "last.pt", weights_only=True)["model"]
        assert any(not torch.equal(v, last[n]) for n, v in tuned.items())  # it trained from last.pt
    assert res["adapt_pseudo_label_wer"] == pytest.approx(labels.wer, abs=1e-4)
    assert res["adapt"] == {"epochs": 1, "lr": 5e-4, "halves": 2}
    # each figure recomputed: `speechscale eval --details` of the checkpoint on the half it scores, both halves'
    # transcripts pooled and scored by jiwer
    assert res["wer_lexicon_adapt_before"] == pytest.approx(labels.wer, abs=1e-4)  # last.pt's labelling pass
    lexicon = fold / "lm" / "lexicon.txt"
    for key, checkpoint, decoder in (
            ("wer_greedy_adapt_before", lambda k: fold / "checkpoints" / "last.pt", []),
            ("wer_greedy_adapted", lambda k: work / f"half{k}" / "checkpoints" / "last.pt", []),
            ("wer_lexicon_adapted", lambda k: work / f"half{k}" / "checkpoints" / "last.pt",
             ["--decoder", "lexicon", "--lexicon", str(lexicon)])):
        refs, hyps = [], []
        for k in (0, 1):  # half k's model scores the other half
            details = tmp_path / f"{key}-{k}.jsonl"
            code, _, err = main_cli(capsys, "eval", "--checkpoint", str(checkpoint(k)), "--manifest",
                                    str(work / f"half{1 - k}.jsonl"), "--details", str(details), "--json", *decoder)
            assert code == 0, err
            for row in map(json.loads, details.read_text().splitlines()):
                refs.append(row["reference"])
                hyps.append(row["hypothesis"])
        assert len(refs) == len(test)
        assert res[key] == pytest.approx(jiwer.wer(refs, hyps), abs=1e-4), key
    table = loso_tables.render_loso_adapted({"probe": again})
    assert "Unsupervised speaker adaptation" in table and "| `probe` | greedy |" in table

    code, _, err = main_benchmarks(capsys, "fsdd-loso", "--name", "probe", "--adapt", "--out", str(tmp_path / "out"),
                            "--work", str(tmp_path / "elsewhere"), "--benchmarks", "")
    assert code != 0 and "has no last.pt" in err and len(err.strip().splitlines()) == 1
