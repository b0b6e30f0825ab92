"""Mixed precision on CPU: every model trains in every mode, fp16 loss scaling persists, the watchdog fires."""
import math

import pytest
import torch

from speechscale.recipe import load_recipe
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.precision import LossScaleCollapsed, Precision, resolve_precision, step_if
from speechscale.training.trainer import Trainer
from tests.conftest import shared

FEATURES = {"ds2-tiny": [], "wav2letter+-tiny": ["features.kind=logmel", "features.n_mels=64"],
            "lstm-ctc-tiny": ["features.kind=logmel", "features.n_mels=40"],
            "conformer-tiny": ["features.kind=logmel", "features.n_mels=40"]}
# Each model family, narrowed: bf16 on a CPU without bf16 instructions (AVX2 only) is emulated at ~0.08x
# of fp32, and this test is about the precision plumbing, not the preset's size (bench train has the sizes).
NARROW = {"ds2-tiny": "{conv: [{channels: 8, kernel: [11, 11], stride: [2, 2]}], rnn_hidden: 64, rnn_layers: 2, "
                      "dropout: 0.0}",
          "wav2letter+-tiny": "{blocks: [{channels: 48, kernel: 11, stride: 2}, {channels: 48, kernel: 5, repeat: 2}]}",
          "lstm-ctc-tiny": "{layers: 2, hidden: 64, projection: 48, stride: 2, dropout: 0.0}",
          "conformer-tiny": "{d_model: 48, layers: 2, heads: 2, conv_kernel: 7, subsampling_channels: 16, dropout: 0.0}"}


def _ldc(out, *extra):
    m = shared("ldc93s1", "manifest.jsonl")
    return load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={out}",
                              "trainer.progress=false", "optim.warmup_steps=0", "optim.lr=0.003",
                              "optim.schedule=constant", "trainer.max_steps=100", "features.sample_rate=8000",
                              f"model.overrides={NARROW['ds2-tiny']}", *extra])


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("model", sorted(FEATURES))
def test_each_model_trains_in_each_precision_with_finite_falling_loss(model, precision, tmp_path):
    trainer = Trainer(_ldc(tmp_path, f"model.name={model}", f"trainer.precision={precision}",
                           f"model.overrides={NARROW[model]}", *FEATURES[model]))
    assert trainer.precision.mode == precision
    batch = next(iter(trainer.loader))
    losses = [float(trainer.train_step(batch)) for _ in range(8)]
    assert all(math.isfinite(x) for x in losses), losses
    assert trainer.sync() is not None
    # fp16 may skip a step or two while the dynamic scale backs off from 65536; the others never skip
    assert trainer.state.counters["nonfinite_grad"] <= (2 if precision == "fp16" else 0)
    assert sum(losses[-2:]) < 0.8 * sum(losses[:2]), losses


@pytest.mark.slow
def test_fp16_scaler_state_survives_a_checkpoint_round_trip(tmp_path):
    cfg = ["trainer.precision=fp16", "trainer.loss_scale_init=1024", "trainer.max_steps=3"]
    first = Trainer(_ldc(tmp_path / "a", *cfg))
    first.fit()
    scale = first.precision.loss_scale()
    first.precision.scaler.update(new_scale=scale / 8)  # a state no fresh scaler would have
    path = first.save("probe.pt")
    state = load_checkpoint(path)  # weights_only
    assert state["precision"]["mode"] == "fp16" and state["precision"]["scaler"]["scale"] == scale / 8
    second = Trainer(_ldc(tmp_path / "b", *cfg, f"trainer.resume={path}"))
    assert second.precision.loss_scale() == scale / 8
    assert second.precision.scaler.state_dict()["_growth_tracker"] == first.precision.scaler.state_dict()["_growth_tracker"]


@pytest.mark.slow
def test_watchdog_stops_the_run_when_the_loss_scale_collapses(tmp_path):
    trainer = Trainer(_ldc(tmp_path, "trainer.precision=fp16", "trainer.loss_scale_init=0.001",
                           "trainer.min_loss_scale=1e-5", "trainer.log_every=1", "trainer.max_steps=50"))
    initial = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    for p in trainer.model.parameters():  # every gradient overflows, at any scale
        p.register_hook(lambda g: g * float("inf"))
    with pytest.raises(LossScaleCollapsed, match="loss scale collapsed"):
        trainer.fit()
    assert trainer.state.step < 15  # 0.001 halves below 1e-5 in 7 steps: stopped soon, not after 50
    assert trainer.state.counters["nonfinite_grad"] == trainer.state.step
    saved = load_checkpoint(tmp_path / "checkpoints" / "last.pt")  # written at an epoch end before the collapse
    assert saved["training"]["step"] < trainer.state.step
    assert all(torch.equal(saved["model"][k], v) for k, v in initial.items())  # no overflowed update applied


@pytest.mark.slow
def test_cli_reports_a_collapsed_scale_in_one_line(tmp_path, cli):
    m = shared("ldc93s1", "manifest.jsonl")
    # a learning rate of 1e30 blows the weights up after the first steps; fp16 then overflows for good
    proc = cli("-q", "train", "--config", "configs/ldc93s1.yaml", f"trainer.out_dir={tmp_path}",
               "trainer.precision=fp16", "trainer.loss_scale_init=0.01", "optim.lr=1e30", "optim.warmup_steps=0",
               "trainer.log_every=1",
               "optim.grad_clip=0", "trainer.max_steps=200", f"data.train_manifest={m}", f"data.root={m.parent}",
               "features.sample_rate=8000", f"model.overrides={NARROW['ds2-tiny']}", check=False)
    assert proc.returncode == 3, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert lines[-1].startswith("speechscale train: stopped: fp16 loss scale collapsed")


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_fused_optimizers_skip_a_flagged_step_on_the_device(name):
    from speechscale.config import OptimConfig
    from speechscale.training.optim import build_optimizer

    model = torch.nn.Linear(4, 3)
    opt = build_optimizer(model, OptimConfig(name=name), fused=True)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(5, 4)).sum().backward()
    step_if(opt, torch.tensor(True))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    step_if(opt, torch.tensor(False))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    if name == "adamw":  # the skipped step did not advance Adam's step count
        assert all(float(s["step"]) == 1 for s in opt.state.values())


def test_auto_precision_is_fp32_on_cpu_and_modes_are_checked_when_the_recipe_loads():
    from speechscale.config import ConfigError

    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert Precision("bf16", torch.device("cpu")).dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="trainer.precision='fp8' is unknown"):
        load_recipe(None, ["trainer.precision=fp8"])


def test_fp16_on_a_cpu_is_named_as_slow_when_the_run_starts(tmp_path, caplog):
    """`speechscale bench train --precision fp32,fp16` on a CPU: fp16 steps take many times fp32's (torch emulates
    them); the run still trains, with a warning that says so."""
    import logging

    from tests.training.tiny import ldc_config

    with caplog.at_level(logging.WARNING, logger="speechscale.training.trainer"):
        Trainer(ldc_config(tmp_path / "a", "trainer.max_steps=1", "trainer.precision=fp32", "trainer.device=cpu"))
        assert "emulates half-precision" not in caplog.text and "become English words" not in caplog.text
        trainer = Trainer(ldc_config(tmp_path / "b", "trainer.max_steps=1", "trainer.precision=fp16",
                                     "trainer.device=cpu"))
    assert trainer.precision.mode == "fp16" and "precision=fp16 on a CPU" in caplog.text
