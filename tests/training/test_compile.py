"""trainer.compile: the compiled forward trains and computes what the eager model computes."""
import pytest
import torch

from speechscale.recipe import load_recipe
from speechscale.training.trainer import Trainer
from tests.conftest import shared

pytestmark = pytest.mark.slow  # torch.compile takes about a minute on a CPU


def test_compiled_conv_model_trains_and_matches_eager(tmp_path):
    m = shared("ldc93s1", "manifest.jsonl")
    cfg = load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={tmp_path}",
                             "trainer.progress=false", "trainer.max_steps=2", "trainer.compile=true",
                             "model.name=wav2letter+-tiny", "features.kind=logmel", "features.n_mels=64",
                             "model.overrides={blocks: [{channels: 32, kernel: 11, stride: 2}, "
                             "{channels: 32, kernel: 5, dilation: 2}]}"])
    trainer = Trainer(cfg)
    assert trainer.forward is not trainer.model
    summary = trainer.fit()
    assert summary["step"] == 2 and summary["nonfinite_grad"] == 0
    batch = next(iter(trainer.val_loader))
    trainer.model.eval()
    with torch.no_grad():
        eager, lens = trainer.model(batch.feats, batch.feat_lens)
        compiled, clens = trainer.forward(batch.feats, batch.feat_lens)
    assert torch.equal(lens, clens)
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)
