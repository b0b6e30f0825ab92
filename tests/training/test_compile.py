"""trainer.compile: the compiled forward trains and computes what the eager model computes."""
import pytest
import torch

from speechscale.recipe import load_recipe
from speechscale.training.trainer import Trainer
from tests.distributed.launch import ldc_manifest

pytestmark = pytest.mark.slow  # torch.compile: 30 s of a cold inductor on 2 cores


def test_compiled_conv_model_trains_and_matches_eager(tmp_path):
    # Each graph costs ~10 s to compile here, so the test compiles one: batches of 2 (a batch of 1 would be
    # specialised into a second graph) and the comparison in the training step's own mode (train, with
    # grad, no dropout), which reuses that graph instead of compiling an eval/no_grad one.
    m = ldc_manifest(tmp_path / "data", copies=4)
    cfg = load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={tmp_path}",
                             "trainer.progress=false", "trainer.max_steps=2", "trainer.compile=true",
                             "data.max_batch_size=2",
                             "model.name=wav2letter+-tiny", "features.kind=logmel", "features.n_mels=64",
                             "model.overrides={blocks: [{channels: 32, kernel: 11, stride: 2}, "
                             "{channels: 32, kernel: 5, dilation: 2}]}"])
    trainer = Trainer(cfg)
    assert trainer.forward is not trainer.model
    summary = trainer.fit()
    assert summary["step"] == 2 and summary["nonfinite_grad"] == 0
    batch = next(iter(trainer.loader))
    assert trainer.model.training and batch.feats.shape[0] == 2
    eager, lens = trainer.model(batch.feats, batch.feat_lens)
    compiled, clens = trainer.forward(batch.feats, batch.feat_lens)
    assert torch.equal(lens, clens)
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)
