"""Leave-one-speaker-out on FSDD: folds never train on the speaker they score, the table says what missed."""
import json
from pathlib import Path

import pytest
import torch

from benchmarks import loso_tables
from benchmarks.loso import (
    SPEAKERS,
    STAMP,
    check_fold,
    extra_training,
    fold_overrides,
    fold_train,
    summarize,
)
from tests.conftest import ROOT, shared
from tests.evidence.conftest import run_benchmarks


def test_each_fold_trains_on_the_other_three_speakers_and_validates_on_its_own():
    for held_out in SPEAKERS:
        over = fold_overrides(held_out)
        assert f"data.val_filter={{speaker: {held_out}}}" in over
        train = next(o for o in over if o.startswith("data.filter="))
        assert held_out not in train and all(s in train for s in SPEAKERS if s != held_out)


def _fold(speaker, greedy, lexicon):
    return {"held_out": speaker, "wer_greedy": greedy, "wer_lexicon": lexicon, "cer_greedy": greedy / 2,
            "cer_lexicon": lexicon / 2, "epochs": 36}


def test_the_summary_and_table_report_mean_worst_and_each_miss():
    folds = [_fold("george", 0.02, 0.01), _fold("jackson", 0.04, 0.01), _fold("lucas", 0.03, 0.02),
             _fold("nicolas", 0.15, 0.06)]
    summ = summarize(folds)
    assert summ["greedy"]["mean_wer"] == pytest.approx(0.06) and summ["greedy"]["worst_speaker"] == "nicolas"
    assert not summ["greedy"]["reached"] and summ["lexicon"]["mean_wer"] == pytest.approx(0.025)
    prov = {"date": "2026-11-24 15:00 UTC", "machine": "2 cores", "commit": "abc", "torch": "2.13.0",
            "command": "speechscale bench fsdd-loso --name x"}
    doc = {"provenance": prov, "seconds": 10, "results": {"config": "configs/fsdd.yaml", "overrides": [],
                                                          "folds": folds, "summary": summ,
                                                          "lexicon_end_boundary": True}}
    table = loso_tables.render_loso({"x": doc})
    assert "15.0 / 6.0 %" in table and "6.0 %" in table and "15.0 % (nicolas)" in table and "†" not in table
    assert "greedy: **not reached** (gap 1.0 points)" in table and "lexicon: **not reached** (gap 0.5 points)" in table
    # a result scored by the lexicon search before 17cb4e7 is marked, and the mark explained
    del doc["results"]["lexicon_end_boundary"]
    table = loso_tables.render_loso({"x": doc})
    assert "15.0 / 6.0† %" in table and "| 2.5† % |" in table and "† lexicon scored before" in table
    assert "without the held-out speaker's statistics" not in table
    for f, alone in zip(folds, (0.5, 0.6, 0.7, 0.8)):  # a speaker-CMVN result, also scored file by file
        f["wer_greedy_no_speaker"] = alone
    own = "| `x` | its own | 2.0 / 50.0 | 4.0 / 60.0 | 3.0 / 70.0 | 15.0 / 80.0 | 6.0 / 65.0 |"
    assert own in loso_tables.render_loso({"x": doc})
    for f, alone in zip(folds, (0.1, 0.2, 0.3, 0.4)):  # re-scored with the training speakers' prior added
        f.update(before={k: f[k] for k in ("wer_greedy", "wer_lexicon", "wer_greedy_no_speaker")},
                 wer_greedy_no_speaker=alone,
                 no_speaker_prior="train.jsonl, added at scoring")
    table = loso_tables.render_loso({"x": doc})
    assert own in table and "| `x` | its own + training speakers' (400 frames) | 2.0 / 10.0 | 4.0 / 20.0 | " \
        "3.0 / 30.0 | 15.0 / 40.0 | 6.0 / 25.0 |" in table
    assert "average of the fold's last N epoch checkpoints" not in table
    for f, avg in zip(folds, (0.01, 0.03, 0.05, 0.11)):  # also scored: the average of the last 3 checkpoints
        f.update(wer_greedy_average=avg, average_of=3)
    table = loso_tables.render_loso({"x": doc})
    assert "| `x` | 3 | 2.0 / 1.0 | 4.0 / 3.0 | 3.0 / 5.0 | 15.0 / 11.0 | 6.0 / 5.0 |" in table
    assert "average of the fold's last N epoch checkpoints" in table
    assert "its EMA weights" not in table
    for f, ema in zip(folds, (0.04, 0.02, 0.03, 0.07)):  # trained with trainer.ema_decay: its EMA weights scored
        f.update(wer_greedy_ema=ema, ema_decay=0.999)
    assert "| `x` | 0.999 | 2.0 / 4.0 | 4.0 / 2.0 | 3.0 / 3.0 | 15.0 / 7.0 | 6.0 / 4.0 |" in loso_tables.render_loso({"x": doc})


def test_rows_of_one_recipe_over_seeds_are_averaged_and_a_single_seed_carries_no_claim():
    def doc(overrides, greedy, date, config="configs/fsdd.yaml"):
        summ = {"greedy": {"mean_wer": greedy}, "lexicon": {"mean_wer": greedy / 2}}
        return {"provenance": {"date": date}, "results": {"config": config, "overrides": overrides,
                                                          "folds": [], "summary": summ}}
    docs = {"base": doc(["trainer.progress=false"], 0.30, "2026-11-24 10:00 UTC"),  # configs/fsdd.yaml: seed 1
            "base2": doc(["trainer.seed=2", "trainer.max_minutes=0"], 0.40, "2026-11-24 11:00 UTC"),  # no guard
            "base3": doc(["trainer.seed=3", "trainer.threads=1"], 0.35, "2026-11-24 12:00 UTC"),
            "base3-again": doc(["trainer.seed=3"], 0.38, "2026-11-24 13:00 UTC"),  # the later run of seed 3
            "warp": doc(["augment.freq_warp=0.1", "trainer.seed=2"], 0.20, "2026-11-24 14:00 UTC"),
            "partial": {"provenance": {"date": "x"}, "results": {"config": "c", "overrides": [], "summary": None}}}
    groups = loso_tables.loso_by_recipe(docs)
    assert set(groups) == {("configs/fsdd.yaml", ""), ("configs/fsdd.yaml", "augment.freq_warp=0.1")}
    assert groups["configs/fsdd.yaml", ""] == {
        1: {"greedy": 0.30, "lexicon": 0.15, "end_boundary": False, "name": "base"},
        2: {"greedy": 0.40, "lexicon": 0.20, "end_boundary": False, "name": "base2"},
        3: {"greedy": 0.38, "lexicon": 0.19, "end_boundary": False, "name": "base3-again"}}
    table = loso_tables.render_loso_seeds(docs)
    assert "| `configs/fsdd.yaml` | 1, 2, 3 | 36.0 % (30.0-40.0) | 18.0 % (15.0-20.0)† |  |" in table
    docs["base2"]["results"]["lexicon_end_boundary"] = True  # seed 2 scored by today's lexicon search
    assert "| 36.0 % (30.0-40.0) | 18.0 % (15.0-20.0)† (2 of 3 seeds) |" in loso_tables.render_loso_seeds(docs)
    assert "| `configs/fsdd.yaml` with `augment.freq_warp=0.1` | 2 | 20.0 % | 10.0 %† | **fewer than 3 seeds**" in table


def test_a_fold_folder_is_continued_only_by_the_recipe_that_started_it(tmp_path):
    fold = tmp_path / "george"
    check_fold(fold, "configs/fsdd.yaml", ["augment.tempo=[0.9, 1.1]"])  # nothing there yet
    fold.mkdir()
    (fold / STAMP).write_text(json.dumps({"config": "configs/fsdd.yaml", "overrides": ["augment.tempo=[0.9, 1.1]"],
                                          "extra_train": None}))
    check_fold(fold, "configs/fsdd.yaml", ["augment.tempo=[0.9, 1.1]", "trainer.max_minutes=0"])  # a guard only
    for config, overrides, extra in [("configs/fsdd.yaml", [], None), ("configs/fsdd_conformer.yaml",
                                      ["augment.tempo=[0.9, 1.1]"], None),
                                     ("configs/fsdd.yaml", ["augment.tempo=[0.9, 1.1]"], Path("synth.jsonl"))]:
        with pytest.raises(ValueError, match="holds a fold of another recipe"):
            check_fold(fold, config, overrides, extra)


def test_extra_training_data_joins_the_folds_speakers_and_never_the_held_out_one(tmp_path):
    fsdd = shared("fsdd", "manifest.jsonl")
    extra = tmp_path / "synth" / "train.jsonl"
    extra.parent.mkdir()
    extra.write_text(json.dumps({"audio_filepath": "audio/a.wav", "duration": 0.5, "text": "five",
                                 "voice": "en-us+m1"}) + "\n")
    overrides = extra_training(fold_train("lucas", tmp_path / "fold"), extra, tmp_path / "fold")
    assert overrides == [f"data.train_manifest={tmp_path / 'fold' / 'train_extra.jsonl'}", "data.filter={}"]
    rows = [json.loads(x) for x in (tmp_path / "fold" / "train_extra.jsonl").read_text().splitlines()]
    speakers = [r.get("speaker") for r in rows]
    assert set(speakers) == {"george", "jackson", "nicolas", None} and speakers.count(None) == 1
    assert rows[-1]["audio_filepath"] == str(extra.parent / "audio" / "a.wav")  # absolute, as every row
    assert len(rows) == 1 + sum(1 for x in fsdd.read_text().splitlines() if '"lucas"' not in x)


def test_benchmarks_md_loso_table_is_what_the_committed_json_renders():
    folder = ROOT / "docs" / "figures" / "loso"
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    from benchmarks.tables import pages_text

    block = loso_tables.loso_block(pages_text(ROOT / "BENCHMARKS.md"))
    if not docs:  # nothing measured yet: no table may claim otherwise
        assert block is None
    else:
        assert block == loso_tables.render_loso(docs), "BENCHMARKS.md's LOSO table drifted from docs/figures/loso/*.json"


def _check_fold_figures(work, fold, capsys):
    """The fold's extra figures recomputed by other routes. Without the speaker: the Python API's transcript of each
    test file on its own (what `transcribe` sees), scored by jiwer. The averaged and EMA checkpoints: their
    weights rebuilt here from the step files and from last.pt's EMA, then scored by `speechscale eval`."""
    import jiwer

    import speechscale
    from tests.conftest import main_cli

    rows = [json.loads(x) for x in (work / "test.jsonl").read_text().splitlines()]
    ckpts = work / "checkpoints"
    model = speechscale.load(ckpts / "last.pt", device="cpu")
    hyps = [model.transcribe(r["audio_filepath"]).text for r in rows]
    refs = [model.components.normalizer(r["text"]) for r in rows]
    assert fold["wer_greedy_no_speaker"] == pytest.approx(jiwer.wer(refs, hyps), abs=1e-4)
    newest = sorted(ckpts.glob("step-*.pt"), key=lambda p: int(p.stem[5:]))[-2:]
    steps = [torch.load(p, weights_only=True)["model"] for p in newest]
    average = torch.load(ckpts / "average-last-2.pt", weights_only=True)["model"]
    last = torch.load(ckpts / "last.pt", weights_only=True)
    ema = torch.load(ckpts / "ema.pt", weights_only=True)["model"]
    for k, v in average.items():
        want = (steps[0][k].double() + steps[1][k].double()) / 2 if v.is_floating_point() else steps[1][k]
        torch.testing.assert_close(v, want.to(v.dtype), msg=k)
        assert torch.equal(ema[k], last["ema"]["weights"].get(k, last["model"][k]).to(v.dtype)), k
    for name, key in (("average-last-2.pt", "wer_greedy_average"), ("ema.pt", "wer_greedy_ema")):
        code, out, err = main_cli(capsys, "eval", "--checkpoint", str(ckpts / name), "--manifest",
                                  str(work / "test.jsonl"), "--json")
        assert code == 0, err
        assert json.loads(out.strip().splitlines()[-1])["wer"] == pytest.approx(fold[key], abs=1e-4), key


@pytest.mark.slow
@pytest.mark.protocol
def test_bench_fsdd_loso_runs_a_fold_end_to_end(tmp_path, capsys):
    shared("fsdd", "manifest.jsonl")
    md = tmp_path / "B.md"
    md.write_text("# B\n")
    # one fold, two epochs of a narrow model on the dataset's own test split of the training speakers
    proc = run_benchmarks("fsdd-loso", "--name", "probe", "--held-out", "nicolas", "--out", str(tmp_path / "out"),
                   "--work", str(tmp_path / "work"), "--benchmarks", str(md), "trainer.max_epochs=2",
                   "model.overrides={rnn_hidden: 32, rnn_layers: 1}", "data.cache_audio=false",
                   "data.filter={speaker: [george, jackson, lucas], split: test}",
                   "data.val_filter={speaker: nicolas, split: test}", "features.normalize=speaker",
                   "trainer.ema_decay=0.9", timeout=600)
    doc = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert doc["provenance"]["command"].startswith("python -m benchmarks fsdd-loso")
    (fold,) = doc["results"]["folds"]
    assert fold["held_out"] == "nicolas" and fold["utterances"] == 500 and fold["epochs"] == 2
    assert fold["average_of"] == 2  # the two epoch checkpoints averaged (recomputed below)
    assert fold["wer_greedy"] >= 0 and fold["wer_lexicon"] >= 0  # an untrained model's lexicon output can be > 1
    assert doc["results"]["summary"] is None  # three folds missing: no mean is claimed
    run_cfg = json.loads(Path(tmp_path / "work" / "probe" / "nicolas" / "config.json").read_text())
    assert "nicolas" not in run_cfg["data"]["filter"]["speaker"]
    assert run_cfg["trainer"]["resume"] == "auto"  # the same command again continues a fold cut short
    assert "incomplete" in loso_tables.loso_block(md.read_text()) and "updated" in proc.stdout
    assert doc["results"]["lexicon_end_boundary"] and "†" not in loso_tables.loso_block(md.read_text())
    assert fold["no_speaker_prior"] == "checkpoint" and fold["ema_decay"] == 0.9  # training saved the prior
    _check_fold_figures(tmp_path / "work" / "probe" / "nicolas", fold, capsys)
    assert "its EMA weights" in loso_tables.loso_block(md.read_text())

    # --rescore: the same last.pt scored again; the earlier figures stay, greedy (same model, same decoder) agrees
    doc["results"].pop("lexicon_end_boundary")
    fold["wer_lexicon"] = 9.9  # as if an older search had scored it
    (tmp_path / "out" / "probe.json").write_text(json.dumps(doc))
    last = tmp_path / "work" / "probe" / "nicolas" / "checkpoints" / "last.pt"
    prior = torch.load(last, weights_only=True)["config"]["features"]["speaker_prior"]
    for path in last.parent.glob("*.pt"):  # as a run saved them before training wrote the prior
        ckpt = torch.load(path, weights_only=True)
        ckpt["config"]["features"].pop("speaker_prior", None)  # last.pt is a hard link of a step file
        torch.save(ckpt, path)
    run_benchmarks("fsdd-loso", "--name", "probe", "--rescore", "--out", str(tmp_path / "out"),
            "--work", str(tmp_path / "work"), "--benchmarks", str(md), timeout=600)
    again = json.loads((tmp_path / "out" / "probe.json").read_text())
    (new,) = again["results"]["folds"]
    assert new["before"]["wer_lexicon"] == 9.9 and new["wer_lexicon"] != 9.9
    assert new["wer_greedy"] == new["before"]["wer_greedy"] == fold["wer_greedy"]
    assert new["wer_greedy_ema"] == fold["wer_greedy_ema"]  # the same EMA weights written out again
    # the prior added at scoring is the one training wrote: the same figures without the speaker
    assert new["no_speaker_prior"] == "added at scoring" and new["wer_greedy_no_speaker"] == fold["wer_greedy_no_speaker"]
    assert torch.load(last.with_name("last-prior.pt"), weights_only=True)["config"]["features"]["speaker_prior"] == prior
    assert again["results"]["lexicon_end_boundary"] and "--rescore" in again["rescored"]["command"]
    assert again["provenance"] == doc["provenance"]  # the training run's provenance stays
    assert "990.0 →" in loso_tables.loso_block(md.read_text())
    other = run_benchmarks("fsdd-loso", "--name", "probe", "--held-out", "nicolas", "--out", str(tmp_path / "out"),
                    "--work", str(tmp_path / "work"), "--benchmarks", "", "trainer.max_epochs=3", check=False)
    assert other.returncode != 0 and "holds a fold of another recipe" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1  # before any training, in one line
    bad = run_benchmarks("fsdd-loso", "--name", "probe", "--rescore", "--out", str(tmp_path / "out"),
                  "--work", str(tmp_path / "elsewhere"), "--benchmarks", "", check=False)
    assert bad.returncode != 0 and "has no last.pt" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
