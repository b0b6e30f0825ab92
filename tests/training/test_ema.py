"""Weight averaging: the EMA kept during training (exact across a resume) and `speechscale average`."""
import json

import pytest
import torch

from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.ema import WeightAverage
from speechscale.training.trainer import Trainer
from tests.conftest import main_cli, shared
from tests.training.tiny import NARROW, ldc_config


def test_the_average_moves_by_the_scheduled_rate_and_copies_integer_state():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = WeightAverage(model, 0.99)
    before = {k: v.clone() for k, v in ema.weights.items()}
    with torch.no_grad():
        model[0].weight.add_(1.0)
    model[1].num_batches_tracked += 5
    ema.update(model, step=1)
    rate = ema.rate(1)
    assert rate == pytest.approx(2 / 11)  # early steps: (1 + t) / (10 + t), below the configured 0.99
    want = before["0.weight"] + (1 - rate) * (model[0].weight.detach() - before["0.weight"])
    torch.testing.assert_close(ema.weights["0.weight"], want)
    assert int(ema.weights["1.num_batches_tracked"]) == 5 and ema.rate(10_000) == 0.99
    state = ema.model_state(model)
    assert state["1.num_batches_tracked"].dtype == torch.long
    model.load_state_dict(state)  # loadable as it is


@pytest.mark.slow
def test_the_ema_is_checkpointed_and_a_resumed_run_continues_it_exactly(tmp_path):
    straight = Trainer(ldc_config(tmp_path / "a", "trainer.max_steps=6", "trainer.ema_decay=0.9"))
    straight.fit()
    first = Trainer(ldc_config(tmp_path / "b", "trainer.max_steps=3", "trainer.ema_decay=0.9"))
    first.fit()
    resumed = Trainer(ldc_config(tmp_path / "b", "trainer.max_steps=6", "trainer.ema_decay=0.9", "trainer.resume=auto"))
    assert resumed.state.step == 3
    resumed.fit()
    saved = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    assert saved["ema"]["decay"] == 0.9
    for name, value in straight.ema.weights.items():
        assert torch.equal(value, resumed.ema.weights[name]), name
        assert torch.equal(value, saved["ema"]["weights"][name].to(value.device))
    moved = [n for n in straight.ema.names if not torch.equal(straight.ema.weights[n], straight.model.state_dict()[n])]
    assert moved  # the average is not the weights themselves


@pytest.mark.slow
def test_average_writes_checkpoints_that_eval_and_export_use(tmp_path, cli):
    Trainer(ldc_config(tmp_path / "run", "trainer.max_steps=4", "trainer.ema_decay=0.9", "trainer.keep_checkpoints=4",
                 "trainer.checkpoint_every_steps=1")).fit()
    ckpts = tmp_path / "run" / "checkpoints"
    steps = sorted(ckpts.glob("step-*.pt"), key=lambda p: int(p.stem[5:]))
    assert len(steps) == 4
    out = cli("average", "--last", "2", "--dir", str(ckpts), "--out", str(tmp_path / "avg.pt")).stdout
    assert json.loads(out)["averaged_from"] == [str(p) for p in steps[-2:]]
    avg = load_checkpoint(tmp_path / "avg.pt")["model"]
    a, b = (load_checkpoint(p)["model"] for p in steps[-2:])
    for k, v in avg.items():
        if v.is_floating_point():
            torch.testing.assert_close(v, (a[k] + b[k]) / 2)
        else:
            assert torch.equal(v, b[k])
    cli("average", "--ema", str(ckpts / "last.pt"), "--out", str(tmp_path / "ema.pt"))
    last = load_checkpoint(ckpts / "last.pt")
    ema = load_checkpoint(tmp_path / "ema.pt")["model"]
    assert ema.keys() == last["model"].keys()
    for k, v in ema.items():  # the EMA weights the run kept, written as the model's
        assert torch.equal(v, last["ema"]["weights"].get(k, last["model"][k]).to(v.dtype)), k
    assert any(not torch.equal(ema[k], last["model"][k]) for k in ema)  # not the last weights themselves
    # the run's folder stands for its checkpoints folder (--dir) and its last.pt (--ema); as a checkpoint to average
    # it was "is a directory"
    run = tmp_path / "run"
    out = cli("average", "--last", "2", "--dir", str(run), "--out", str(tmp_path / "avg-run.pt")).stdout
    assert json.loads(out)["averaged_from"] == [str(p) for p in steps[-2:]]
    cli("average", "--ema", str(run), "--out", str(tmp_path / "ema-run.pt"))
    ema_run = load_checkpoint(tmp_path / "ema-run.pt")["model"]
    assert all(torch.equal(ema_run[k], ema[k]) for k in ema)
    bad = cli("average", str(run), "--out", str(tmp_path / "x.pt"), check=False)
    assert bad.returncode == 2 and f"a folder, not a checkpoint; a run's newest step files are averaged with " \
        f"--last N --dir {run}" in bad.stderr
    import jiwer

    import speechscale

    manifest = shared("ldc93s1", "manifest.jsonl")
    rows = [json.loads(x) for x in manifest.read_text().splitlines()]
    for name in ("avg.pt", "ema.pt"):  # each through the CLI, as a user runs them
        res = json.loads(cli("eval", "--checkpoint", str(tmp_path / name), "--manifest", str(manifest),
                             "--json").stdout.strip().splitlines()[-1])
        # the same figure recomputed independently: the Python API's transcripts of these weights, scored by jiwer
        model = speechscale.load(tmp_path / name, device="cpu")
        hyps = [model.transcribe(manifest.parent / r["audio_filepath"]).text for r in rows]
        refs = [model.components.normalizer(r["text"]) for r in rows]
        assert res["utterances"] == len(rows)
        assert res["wer"] == pytest.approx(jiwer.wer(refs, hyps) if any(hyps) else 1.0, abs=1e-9), (name, hyps)
        summary = json.loads(cli("export", "--checkpoint", str(tmp_path / name), "--format", "onnx", "--out",
                                 str(tmp_path / f"{name}.onnx")).stdout)
        assert summary["format"] == "onnx"


def test_average_refuses_mixed_models_a_missing_ema_and_ambiguous_arguments(tmp_path, capsys):
    for name, over in (("a", NARROW), ("b", "{rnn_hidden: 16, rnn_layers: 1}")):
        cfg = ldc_config(tmp_path / name, "trainer.max_steps=1", f"model.overrides={over}")
        trainer = Trainer(cfg)
        trainer.save("x.pt")
    a, b = tmp_path / "a" / "checkpoints" / "x.pt", tmp_path / "b" / "checkpoints" / "x.pt"
    for args, expected in ((["average", str(a), str(b)], "a different model"),
                           (["average", "--ema", str(a)], "holds no EMA weights"),
                           (["average", str(a), "--ema", str(a)], "one of them"),
                           (["average", "--last", "2", "--dir", str(a.parent)], "0 step-N.pt checkpoint(s), 2 asked")):
        code, _, err = main_cli(capsys, *args, "--out", str(tmp_path / "out.pt"))
        assert code != 0 and expected in err, (args, err)
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.pt").exists()
