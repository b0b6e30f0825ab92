"""features.device: the loader ships waveforms and the training step computes the features (STFT, log-mel or
log-linear, normalization, frequency warping, SpecAugment) on its device. Here the device is the CPU: the run
takes the same steps on the same utterances as one whose loader computes the features, to round-off."""
import dataclasses
import json

import pytest
import torch

from speechscale.config import ConfigError
from speechscale.training.trainer import Trainer
from tests.training.tiny import george_run, ldc_config

AUGMENT = ["augment.speed=[0.9, 1.1]", "augment.freq_warp=0.1", "augment.freq_masks=2", "augment.freq_mask_width=10",
           "augment.time_masks=2", "augment.time_mask_width=10"]


def _run(out, *extra):
    summary, trace, trainer = george_run(out, "data.num_workers=1", "features.kind=logmel", "features.n_mels=40",
                                         "features.normalize=feature", *AUGMENT, *extra)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return summary, trace, trainer, rows


@pytest.mark.parametrize("shapes", ["data.fixed_shapes=0", "data.fixed_shapes=2"])
def test_features_in_the_step_train_as_features_in_the_loader(tmp_path, shapes):
    """Also padded to fixed shapes after the step computed them (what a graphed GPU run does)."""
    loader, loader_trace, loader_trainer, loader_rows = _run(tmp_path / "loader", "trainer.log_every=1")
    step, step_trace, step_trainer, step_rows = _run(tmp_path / "step", "trainer.log_every=1", "features.device=cpu",
                                               shapes)
    loader_w, step_w = loader_trainer.model.state_dict(), step_trainer.model.state_dict()
    assert step_trace == loader_trace and len(loader_trace) == loader["step"] > 4
    losses = [[r["loss"] for r in rows if r["kind"] == "train"] for rows in (loader_rows, step_rows)]
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=1e-5)
    # round-off grows over the steps and differs by CPU, so each weight tensor is held to how far training moved
    # it: the runs differ by under a thousandth of that, where a SpecAugment mask one bin narrower differs by most
    cfg = loader_trainer.cfg  # a fresh Trainer of the same run holds its initial weights
    cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, out_dir=str(tmp_path / "init")))
    init = Trainer(cfg).model.state_dict()
    for k, v in loader_w.items():
        if v.is_floating_point():
            moved = float((v - init[k]).norm())
            assert moved > 0 and float((step_w[k] - v).norm()) <= 1e-3 * moved, k
    # the run log counts the same audio: frames on the host, from the waveforms' lengths
    assert [r["samples"] for r in step_rows if r["kind"] == "train"] == [
        r["samples"] for r in loader_rows if r["kind"] == "train"]
    assert step["val_loss"] == pytest.approx(loader["val_loss"], rel=1e-4)


@pytest.mark.parametrize("extra, match", [
    (["features.device=cuda", "trainer.device=cpu"], "features.device=cuda computes features in the training step, "
                                                     "on its device; this run trains on cpu"),
    (["features.device=cpu", "features.normalize=speaker"], "use features.normalize=utterance, feature or none"),
    (["features.device=gpu"], "features.device='gpu' is unknown; choose one of loader, cuda, cpu"),
])
def test_what_the_step_cannot_compute_is_a_one_line_error_before_work(tmp_path, extra, match):
    with pytest.raises(ConfigError, match=match):
        Trainer(ldc_config(tmp_path, "trainer.max_steps=1", *extra))


# ---- GPU (the gpu tier: pytest -m gpu on a CUDA machine) ----------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the gpu tier)")


@pytest.mark.gpu
@needs_cuda
def test_the_gpu_computes_the_loaders_features():
    from speechscale.config import AugmentConfig, FeatureConfig
    from speechscale.data.augment import freq_warp, spec_augment, spec_draws
    from speechscale.data.features import FeatureExtractor
    from tests.data.test_features import _real_clips

    fx = FeatureExtractor(FeatureConfig(kind="logmel", n_mels=40, normalize="utterance", preemphasis=0.97))
    aug = AugmentConfig(freq_warp=0.1, freq_masks=2, time_masks=2)
    clips = _real_clips(16000)
    g = torch.Generator().manual_seed(2)
    draws = [spec_draws(aug, g, fx.num_features, fx.num_frames(len(c))) for c in clips]
    lens = torch.tensor([len(c) for c in clips])
    waves = torch.zeros(len(clips), int(lens.max()))
    for i, c in enumerate(clips):
        waves[i, : len(c)] = c
    feats, frames = fx.batch(waves.cuda(), lens, torch.tensor(draws, dtype=torch.float64).cuda(), aug)
    assert feats.is_cuda and not frames.is_cuda
    for i, (c, d) in enumerate(zip(clips, draws)):
        alone = spec_augment(freq_warp(fx(c), d[0]), d[1:], aug.freq_masks)
        torch.testing.assert_close(feats[i, :, : alone.shape[1]].cpu(), alone, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@needs_cuda
def test_a_graphed_gpu_run_with_features_on_the_gpu_trains_as_with_features_in_the_loader(tmp_path):
    gpu = ["trainer.device=cuda", "trainer.precision=fp32", "trainer.cuda_graphs=on", "trainer.log_every=1"]
    _, loader_trace, _, loader_rows = _run(tmp_path / "loader", *gpu)
    _, step_trace, _, step_rows = _run(tmp_path / "step", *gpu, "features.device=cuda")
    assert step_trace == loader_trace
    losses = [[r["loss"] for r in rows if r["kind"] == "train"] for rows in (loader_rows, step_rows)]
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=2e-3, atol=1e-4)
