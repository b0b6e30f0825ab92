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


def test_batches_of_every_length_share_the_compiled_shapes(tmp_path):
    """torch.compile specializes on the frames: unpadded, each batch of a new length would compile again (and past
    torch's recompile limit run eager). Padded to data.fixed_shapes (which trainer.compile implies: 8 when 0,
    test_cuda_graphs), four batches of eight different durations (FSDD's) compile one graph for one shape."""
    import json

    from torch._dynamo.utils import counters

    from tests.conftest import shared

    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()][:8]
    assert len({r["duration"] for r in rows}) == 8
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({**r, "audio_filepath": str(fsdd / r["audio_filepath"])}) + "\n" for r in rows))
    cfg = load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={tmp_path}/run",
                             "trainer.progress=false", "trainer.max_steps=4", "trainer.compile=true",
                             "data.max_batch_size=2", "data.fixed_shapes=1",
                             "model.name=wav2letter+-tiny", "features.kind=logmel", "features.n_mels=64",
                             "model.overrides={blocks: [{channels: 32, kernel: 11, stride: 2}, "
                             "{channels: 32, kernel: 5, dilation: 2}]}"])
    counters.clear()
    summary = Trainer(cfg).fit()
    assert summary["step"] == 4 and summary["nonfinite_grad"] == 0 and summary.get("unshaped_batches", 0) == 0
    assert counters["stats"]["unique_graphs"] == 1
