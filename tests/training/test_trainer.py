"""The training loop on real audio: bad input is counted not fatal, non-finite steps are skipped."""
import copy
import json
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from speechscale.recipe import load_recipe
from speechscale.training.trainer import Trainer
from tests.conftest import DATA, main_cli, run_cli, shared


@pytest.fixture
def tiny_corpus(tmp_path):
    """Three LDC93S1 copies at different rates, one truncated wav, one malformed line."""
    src = shared("ldc93s1")
    wav, sr = sf.read(src / "LDC93S1.wav", dtype="float32")
    lines = []
    for i, rate in enumerate([16000, 8000, 22050]):
        sf.write(tmp_path / f"u{i}.wav", wav if rate == sr else wav[:: max(1, sr // rate)], rate if rate != 22050 else sr)
        lines.append({"audio_filepath": f"u{i}.wav", "duration": 2.92, "text": "She had your dark suit."})
    (tmp_path / "broken.wav").write_bytes((src / "LDC93S1.wav").read_bytes()[:40])
    lines.append({"audio_filepath": "broken.wav", "duration": 2.92, "text": "she had"})
    rows = [json.dumps(x) for x in lines] + ['{"audio_filepath": oops}']
    (tmp_path / "m.jsonl").write_text("\n".join(rows) + "\n")
    return tmp_path


def _cfg(corpus, out, *extra):
    return load_recipe(None, [f"data.train_manifest={corpus}/m.jsonl", f"data.val_manifest={corpus}/m.jsonl",
                              f"trainer.out_dir={out}", "trainer.max_steps=3", "trainer.progress=false",
                              "data.batch_seconds=20", "model.overrides={rnn_hidden: 32, rnn_layers: 1}",
                              *extra])


def test_bad_lines_and_bad_audio_are_counted_and_the_run_finishes(tiny_corpus, tmp_path):
    trainer = Trainer(_cfg(tiny_corpus, tmp_path / "run"))
    assert trainer.data.report.reasons["malformed JSON"] == 1
    summary = trainer.fit()
    assert summary["bad_audio"] >= 1 and summary["step"] == 3
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()
    assert (tmp_path / "run" / "checkpoints" / "best.pt").is_file()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "val" for r in rows)
    assert any(p.name.startswith("events") for p in (tmp_path / "run" / "tensorboard").iterdir())


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_nonfinite_loss_and_gradient_skip_the_step(tiny_corpus, tmp_path, precision):
    # a narrow conv front end: bf16 and fp16 convolutions are emulated on an AVX2-only CPU
    trainer = Trainer(_cfg(tiny_corpus, tmp_path / "run", f"trainer.precision={precision}",
                           "model.overrides={conv: [{channels: 8, kernel: [11, 11], stride: [2, 2]}], "
                           "rnn_hidden: 32, rnn_layers: 1}"))
    batch = next(iter(trainer.loader))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    stats = {k: b.clone() for k, b in trainer.model.named_buffers() if k.endswith(("running_mean", "running_var"))}
    assert len(stats) >= 4
    bad = type(batch)(batch.feats * float("nan"), batch.feat_lens, batch.targets, batch.target_lens,
                      batch.texts, batch.indices, {})
    trainer.train_step(bad)
    assert trainer.sync() is None and trainer.state.counters["nonfinite_loss"] == 1
    param = next(trainer.model.parameters())
    handle = param.register_hook(lambda g: g * float("inf"))
    trainer.train_step(batch)
    handle.remove()
    assert trainer.sync() is None and trainer.state.counters["nonfinite_grad"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    trainer.optimizer_step([type(batch)(batch.feats[:0], batch.feat_lens[:0], batch.targets[:0], batch.target_lens[:0],
                                        [], [], {})])  # a rank's empty batch: the placeholder's silence runs
    buffers = dict(trainer.model.named_buffers())  # a step not taken (a NaN, a placeholder) left no trace in them
    assert all(torch.equal(buffers[k], b) for k, b in stats.items())
    loss = float(trainer.train_step(batch))
    assert math.isfinite(loss) and trainer.sync() == pytest.approx(loss)
    assert not all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    assert all(torch.isfinite(buffers[k]).all() and not torch.equal(buffers[k], b) for k, b in stats.items())
    assert trainer.state.counters["nonfinite_loss"] == 1 and trainer.state.counters["nonfinite_grad"] == 1
    taken = copy.deepcopy((trainer.model.state_dict(), trainer.optimizer.state_dict()))  # momentum, weight decay
    assert any(v["exp_avg"].abs().sum() > 0 for v in taken[1]["state"].values())
    trainer.optimizer_step([type(batch)(batch.feats[:0], batch.feat_lens[:0], batch.targets[:0], batch.target_lens[:0],
                                        [], [], {})])  # no sample on any rank: no update
    trainer.sync()
    after = (trainer.model.state_dict(), trainer.optimizer.state_dict())
    assert all(torch.equal(v, after[0][k]) for k, v in taken[0].items())
    assert all(torch.equal(v, after[1]["state"][i][k]) for i, st in taken[1]["state"].items() for k, v in st.items())


def test_a_run_whose_every_step_is_skipped_stops_as_diverged_with_its_weights_unchanged(tmp_path, capsys):
    """A learning rate far too high: after the first step every gradient is non-finite. The skipped steps change
    nothing (weights, normalization statistics), and after trainer.max_skipped_steps of them in a row the run stops
    in one line instead of spending its planned epochs on nothing."""
    from speechscale.cli import report
    from speechscale.storage.checkpoints import load_checkpoint
    from speechscale.training.recovery import Diverged

    m = shared("ldc93s1", "manifest.jsonl")
    trainer = Trainer(load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", "trainer.max_epochs=100",
                                         f"trainer.out_dir={tmp_path}/run", "trainer.progress=false", "optim.lr=1000",
                                         "optim.warmup_steps=0", "trainer.log_every=1", "trainer.max_skipped_steps=6",
                                         "model.overrides={rnn_hidden: 32, rnn_layers: 1}"]))
    with pytest.raises(Diverged, match="the last 6 steps .* were all skipped") as raised:
        trainer.fit()
    s = trainer.state
    good = s.step - 6  # the steps before these counted
    assert s.counters["nonfinite_loss"] + s.counters["nonfinite_grad"] == 6 and good >= 1
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")  # written at an epoch's end among them
    assert good < saved["training"]["step"] < s.step
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(v, saved["model"][k]), k
    assert report("speechscale train", raised.value) == 3
    said = capsys.readouterr().err
    assert said.startswith(f"speechscale train: stopped: the last 6 steps (to step {s.step})") and said.count("\n") == 1
    assert f"the weights are those of step {good}," in said


def test_labels_longer_than_the_output_frames_are_skipped(tmp_path):
    sf.write(tmp_path / "short.wav", np.random.default_rng(0).standard_normal(1600).astype(np.float32) * 0.1, 16000)
    sf.write(tmp_path / "ok.wav", np.random.default_rng(1).standard_normal(16000).astype(np.float32) * 0.1, 16000)
    rows = [{"audio_filepath": "short.wav", "duration": 0.1, "text": "a very long sentence for a tenth of a second"},
            {"audio_filepath": "ok.wav", "duration": 1.0, "text": "fine"}]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    trainer = Trainer(_cfg(tmp_path, tmp_path / "run"))
    assert trainer.data.utterances == 1
    assert trainer.data.report.reasons["label longer than the model's output frames"] == 1


@pytest.mark.parametrize("override, message", [
    ("trainer.max_stepz=3", "unknown key"),
    ("trainer.max_steps=lots", "expected an integer"),
    ("model.name=ds9", "model.name 'ds9' is unknown"),
    ("data.train_manifest=/nope/train.jsonl", "manifest not found"),
    ("optim.schedule=sometimes", "optim.schedule='sometimes' is unknown; choose one of cosine, linear"),
    ("trainer.out_dir=/proc/nope", "trainer.out_dir: cannot write to /proc/nope"),
    ("data.batch_seconds=2", "data.batch_seconds=2 is shorter than the longest training utterance"),
    ("features.window_ms=100000", "features.window_ms=100000.0 must be in (0, 1000]"),
    ("model.overrides={rnn_type: foo}", "rnn_type 'foo' is unknown"),
    ("trainer.max_skipped_steps=-1", "trainer.max_skipped_steps=-1 must be >= 0"),
    ("data.max_unreadable_batches=-3", "data.max_unreadable_batches=-3 must be >= 0"),
])
def test_bad_config_is_one_clear_line_before_any_work(override, message, tmp_path, capsys):
    if "batch_seconds" in override:
        shared("yesno", "manifest.jsonl")  # the check reads the recipe's manifest
    code, _, err = main_cli(capsys, "train", "--config", "configs/yesno.yaml", f"trainer.out_dir={tmp_path}/r",
                            f"data.root={DATA / 'yesno'}", override)
    assert code == 2
    lines = [x for x in err.splitlines() if "error" in x]
    assert len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_missing_config_file(tmp_path, cli):
    proc = cli("train", "--config", str(tmp_path / "none.yaml"), check=False)
    assert proc.returncode == 2 and "config file not found" in proc.stderr


@pytest.mark.parametrize("content, said", [("data: [\n", "not valid YAML"), ("- a\n", "must be a mapping"),
                                           (None, "not a YAML text file (a checkpoint is not a recipe")])
def test_a_config_that_is_no_recipe_is_one_line(tmp_path, capsys, content, said):
    """A YAML error, a list, or a binary file such as a checkpoint given as --config: one line, exit 2."""
    from tests.conftest import main_cli

    path = tmp_path / "c.yaml"
    if content is None:  # a real checkpoint, as a user might pass one
        from tests.training.tiny import ldc_config

        Trainer(ldc_config(tmp_path / "run", "trainer.max_steps=1")).fit()
        path = tmp_path / "run" / "checkpoints" / "last.pt"
    else:
        path.write_text(content)
    code, _, err = main_cli(capsys, "train", "--config", str(path), "--print-config")
    assert code == 2 and said in err and err.count("\n") == 1, err


def test_data_that_stays_unreadable_stops_the_run_at_its_last_step_and_a_resume_loses_nothing(tmp_path, capsys):
    """The audio folder vanishes after step 6 (an unmounted disk; a store down past its retries looks the same):
    instead of using up the planned epochs on nothing, the run stops after data.max_unreadable_batches batches in a
    row with nothing read (here across an epoch's end), its checkpoint at the position after step 6; with the
    audio back, trainer.resume=auto ends with the weights of a run that never lost it."""
    from speechscale.cli import report
    from speechscale.reporting.runs import load_run
    from speechscale.storage.checkpoints import load_checkpoint
    from speechscale.training.recovery import DataUnreadable

    trainer = _four_batch_epochs(tmp_path)
    straight = trainer(tmp_path / "straight")
    assert straight.fit()["step"] == 12
    failing = trainer(tmp_path / "failing", "data.max_unreadable_batches=6")
    step = failing.train_step

    def step_then_unmount(micro):
        loss = step(micro)
        if failing.state.step == 6:
            (tmp_path / "audio").rename(tmp_path / "away")
        return loss

    failing.train_step = step_then_unmount
    with pytest.raises(DataUnreadable, match="6 batches in a row had no utterance that could be read") as raised:
        failing.fit()  # 2 batches of epoch 1, its validation, 4 of epoch 2
    s = failing.state
    assert (s.epoch, s.step, s.consumed, s.samples_seen, s.counters["bad_audio"]) == (1, 6, 2, 6, 0)
    ckpt = load_checkpoint(tmp_path / "failing" / "checkpoints" / "last.pt")
    saved = ckpt["training"]
    assert (saved["epoch"], saved["step"], saved["consumed"], saved["counters"]["bad_audio"]) == (1, 6, 2, 0)
    assert load_run(tmp_path / "failing").status == "stopped by error: DataUnreadable"
    assert report("speechscale train", raised.value) == 3
    said = capsys.readouterr().err
    assert said.startswith("speechscale train: stopped: 6 batches in a row had no utterance that could be read (after "
                           "step 6, epoch 1 sample 2;") and said.count("\n") == 1
    assert "trainer.resume=auto" in said

    (tmp_path / "away").rename(tmp_path / "audio")
    resumed = trainer(tmp_path / "failing", "trainer.resume=auto")
    assert resumed.fit()["step"] == 12 and resumed.state.counters["bad_audio"] == 0
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    skipping = trainer(tmp_path / "skipping", "data.max_unreadable_batches=0")  # the old way: skip and count
    skipping.train_step = lambda micro, step=skipping.train_step: _unmount_after(step, micro, skipping, tmp_path)
    summary = skipping.fit()
    assert (summary["epoch"], summary["step"], summary["bad_audio"]) == (3, 6, 6)


def _unmount_after(step, micro, trainer, tmp_path):
    loss = step(micro)
    if trainer.state.step == 6:
        (tmp_path / "audio").rename(tmp_path / "away")
    return loss


def _four_batch_epochs(tmp_path):
    """A corpus in tmp_path/audio of 4 copies of LDC93S1, one a batch; returns trainer(out, *overrides)."""
    src = shared("ldc93s1")
    (tmp_path / "audio").mkdir()
    rows = []
    for i in range(4):
        (tmp_path / "audio" / f"u{i}.wav").write_bytes((src / "LDC93S1.wav").read_bytes())
        rows.append(json.dumps({"audio_filepath": f"audio/u{i}.wav", "duration": 2.92, "text": "she had your dark suit"}))
    (tmp_path / "m.jsonl").write_text("\n".join(rows) + "\n")

    def trainer(out, *more):
        return Trainer(load_recipe(None, [f"data.train_manifest={tmp_path}/m.jsonl", f"data.val_manifest={tmp_path}/m.jsonl",
                                          f"trainer.out_dir={out}", "trainer.max_epochs=3", "trainer.progress=false",
                                          "data.batch_seconds=3", "data.sortagrad=false", "features.sample_rate=8000",
                                          "model.overrides={rnn_hidden: 32, rnn_layers: 1}", *more]))
    return trainer


def test_a_stop_signal_amid_unreadable_batches_saves_the_position_before_them(tmp_path):
    """SIGTERM arrives while the audio is away, before data.max_unreadable_batches is reached; the stretch crosses
    an epoch's end, where the signal is acted on. The checkpoint is the position after the last step that read
    data, so with the audio back a resume reads those batches and ends with the weights of a run that never
    lost them (the position after them would have skipped two of the epoch's batches)."""
    import os
    import signal

    from speechscale.storage.checkpoints import load_checkpoint

    trainer = _four_batch_epochs(tmp_path)
    straight = trainer(tmp_path / "straight")
    straight.fit()
    cut = trainer(tmp_path / "cut")
    cut.train_step = lambda micro, step=cut.train_step: _unmount_after(step, micro, cut, tmp_path)
    check = cut.recovery.check_readable

    def check_then_signal(batch):
        check(batch)
        if cut.recovery.unreadable == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    cut.recovery.check_readable = check_then_signal
    assert cut.fit()["stopped_by"] == "SIGTERM"
    saved = load_checkpoint(tmp_path / "cut" / "checkpoints" / "last.pt")["training"]
    assert (saved["epoch"], saved["step"], saved["consumed"], saved["counters"]["bad_audio"]) == (1, 6, 2, 0)
    (tmp_path / "away").rename(tmp_path / "audio")
    resumed = trainer(tmp_path / "cut", "trainer.resume=auto")
    assert resumed.fit()["step"] == 12 and resumed.state.counters["bad_audio"] == 0
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_gradient_accumulation_equals_one_batch_of_the_same_samples(tmp_path):
    """2 micro-batches of 1 utterance per step == 1 batch of 2 (CTC mean per batch; identical clips keep
    the batch-norm statistics equal), also in the learning-rate schedule, which counts samples."""
    m = tmp_path / "m.jsonl"
    src = shared("ldc93s1")
    row = json.loads((src / "manifest.jsonl").read_text().splitlines()[0])
    row["audio_filepath"] = str(src / row["audio_filepath"])
    m.write_text((json.dumps(row) + "\n") * 4)
    common = [f"data.train_manifest={m}", f"data.val_manifest={m}", "trainer.progress=false", "trainer.max_steps=2",
              "data.sortagrad=false", "data.num_buckets=1", "model.overrides={rnn_hidden: 32, rnn_layers: 1}",
              "optim.warmup_steps=1", "optim.name=sgd"]  # Adam's first step is sign(g): float noise flips it
    whole = Trainer(load_recipe(None, [*common, f"trainer.out_dir={tmp_path}/a", "data.batch_seconds=6"]))
    whole.fit()
    accum = Trainer(load_recipe(None, [*common, f"trainer.out_dir={tmp_path}/b", "data.batch_seconds=3",
                                       "trainer.grad_accum=2"]))
    accum.fit()
    assert whole.state.step == accum.state.step == 2 and whole.state.samples_seen == accum.state.samples_seen == 4
    for (name, a), b in zip(whole.model.named_parameters(), accum.model.parameters()):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


def test_a_clip_shorter_or_longer_than_its_manifest_says_is_skipped_and_counted_not_fatal(tiny_corpus, tmp_path):
    """0.01 s of audio listed as 2.0 s used to end the run inside the DataLoader (STFT padding error); 40 s
    listed as 2.0 s (a mislabelled file, or a bomb) was decoded whole, past data.max_duration (30 s)."""
    sf.write(tiny_corpus / "tiny.wav", np.zeros(160, np.float32), 16000)
    sf.write(tiny_corpus / "long.flac", np.zeros(40 * 16000, np.float32), 16000)
    with (tiny_corpus / "m.jsonl").open("a") as f:
        f.write(json.dumps({"audio_filepath": "tiny.wav", "duration": 2.0, "text": "she"}) + "\n")
        f.write(json.dumps({"audio_filepath": "long.flac", "duration": 2.0, "text": "she"}) + "\n")
    summary = Trainer(_cfg(tiny_corpus, tmp_path / "run", "data.num_workers=1")).fit()
    assert summary["step"] == 3 and summary["too_short"] >= 1 and summary["bad_audio"] >= 1
    assert summary["too_long"] >= 1
    assert summary["train_skipped"] >= 1 + summary["too_short"] + summary["bad_audio"] + summary["too_long"]


@pytest.mark.slow
def test_a_time_cap_is_named_in_the_log_and_summary_and_logs_carry_no_progress_bars(tmp_path):
    from tests.distributed.launch import ldc_manifest, train_args

    m = ldc_manifest(tmp_path / "data", copies=8)
    args = [a for a in train_args(m, tmp_path / "run", "trainer.max_minutes=0.01") if a != "-q"]
    proc = run_cli(*args)  # stderr is a pipe here, as in a log file
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["stopped_by"] == "max_minutes" and summary["epoch"] < 50
    assert "trainer.max_minutes=0.01 reached in epoch" in proc.stderr
    assert "\r" not in proc.stderr and "it/s" not in proc.stderr  # no tqdm output off a terminal
    assert "epoch 1/50 step" in proc.stderr and "ETA" in proc.stderr  # 1-based, like the bar
    assert proc.stdout.count('"stopped_by"') == 1 and "done:" not in proc.stderr  # the summary once


def test_speaker_cmvn_training_saves_its_speakers_prior_for_files_that_come_alone(tmp_path):
    """normalize=speaker: the checkpoint's config carries the training speakers' pooled statistics, so
    transcribe and serve (one file, no speaker) shrink each file toward them (data/features.py)."""
    from speechscale.components import load_components
    from speechscale.data.features import pooled_prior

    src = shared("fsdd", "manifest.jsonl")
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    rows = [r for r in rows if r["speaker"] == "jackson"][:4] + [r for r in rows if r["speaker"] == "lucas"][:4]
    for r in rows:
        r["audio_filepath"] = str(src.parent / r["audio_filepath"])
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer = Trainer(load_recipe(None, [
        f"data.train_manifest={tmp_path}/m.jsonl", f"data.val_manifest={tmp_path}/m.jsonl", "data.num_workers=0",
        f"trainer.out_dir={tmp_path}/run", "trainer.max_steps=1", "trainer.progress=false", "features.sample_rate=8000",
        "features.normalize=speaker", "model.overrides={rnn_hidden: 16, rnn_layers: 1}"]))
    assert set(trainer.dataset.speakers) == {"jackson", "lucas"}
    trainer.fit()
    saved = load_components(tmp_path / "run" / "checkpoints" / "last.pt").features.cfg
    assert saved.speaker_prior == pooled_prior(trainer.dataset.speakers)
    assert len(saved.speaker_prior) == 2 * trainer.comps.features.num_features and saved.speaker_prior_frames == 400


def test_an_auto_alphabet_is_the_training_transcripts_and_resume_keeps_it(tmp_path, capsys, caplog):
    """text.alphabet=auto: the characters of the training transcripts (as data.filter selects them), kept in the
    checkpoint; a resume whose transcripts now need another alphabet stops in one line; a shard index's own."""
    import logging

    from speechscale.config import ConfigError
    from speechscale.storage.checkpoints import load_checkpoint
    from tests.training.tiny import ldc_config

    wav = shared("ldc93s1", "LDC93S1.wav")
    rows = [("Über die Straße", "a"), ("Größe und Café", "a"), ("Ça va, señor?", "b")]
    manifest = tmp_path / "de.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(wav), "duration": 2.92, "text": t, "spk": s}) + "\n"
                                for t, s in rows), encoding="utf-8")
    data = [f"data.train_manifest={manifest}", f"data.val_manifest={manifest}", "data.filter={spk: a}",
            "data.val_filter={spk: a}", "text.alphabet=auto"]
    with caplog.at_level(logging.WARNING, logger="speechscale.training.trainer"):
        trainer = Trainer(ldc_config(tmp_path / "run", *data, "trainer.max_steps=1"))
    assert "digits in the transcripts become English words" in caplog.text  # ß, ü: not English, digits still are
    letters = sorted({c for t, s in rows if s == "a" for c in t.lower() if c.isalpha()})  # recomputed by hand
    assert trainer.cfg.text.alphabet == "".join(letters) + " " and "ç" not in trainer.cfg.text.alphabet
    summary = trainer.fit()
    assert summary["train_utterances"] == 2 and summary["train_skipped"] == 0
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert saved["config"]["text"]["alphabet"] == trainer.cfg.text.alphabet
    resumed = Trainer(ldc_config(tmp_path / "run", *data, "trainer.max_steps=2", "trainer.resume=auto"))
    assert resumed.fit()["step"] == 2
    with pytest.raises(ConfigError, match="resume with the checkpoint's alphabet"):  # now with "ça va señor"
        Trainer(ldc_config(tmp_path / "run", *data[:-3], "text.alphabet=auto", "trainer.max_steps=3",
                           "trainer.resume=auto"))
    shards = tmp_path / "shards"
    assert main_cli(capsys, "data", "shard", str(manifest), "--out", str(shards))[0] == 0
    sharded = [f"data.train_manifest={shards / 'index.jsonl'}", f"data.val_manifest={manifest}", "text.alphabet=auto",
               "trainer.max_steps=1"]
    every = sorted({c for t, _ in rows for c in t.lower() if c.isalpha()})  # a shard index: all its transcripts
    assert Trainer(ldc_config(tmp_path / "sharded", *sharded)).cfg.text.alphabet == "".join(every) + " "
    index = shards / "index.jsonl"
    lines = [json.loads(x) for x in index.read_text(encoding="utf-8").splitlines()]
    index.write_text("".join(json.dumps({k: v for k, v in x.items() if k != "texts"}) + "\n" for x in lines))
    with pytest.raises(ConfigError, match="auto: .*does not hold its transcripts .*`data index`"):  # an older index
        Trainer(ldc_config(tmp_path / "sharded2", *sharded))
