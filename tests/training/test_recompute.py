"""`trainer.activation_checkpointing`: each block recomputes its activations in the backward pass; the outputs and
gradients are those of the plain model, bit for bit, and autograd keeps a fraction of the tensors."""
import pytest
import torch
from torch import nn

from speechscale.config import Config, ConfigError, from_dict
from speechscale.models import build_model
from speechscale.models.registry import RECOMMENDED_FEATURES
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.graphs import step_shapes
from speechscale.training.recompute import recompute_blocks, saved_bytes
from speechscale.training.trainer import Trainer
from tests.training.tiny import ldc_config

# the activations autograd keeps without recomputation over those kept with it, at least (measured on this batch:
# about 3.8, 2.6, 13 and 7.2); dropout stays at each preset's own, so the recomputed masks must match too
LEAST_SAVING = {"conformer-tiny": 3.0, "ds2-tiny": 1.8, "lstm-ctc-tiny": 8.0, "wav2letter+-tiny": 4.0}


@pytest.mark.parametrize("name", sorted(LEAST_SAVING))
def test_recomputed_blocks_give_the_same_outputs_and_gradients_and_keep_less(name):
    feats = RECOMMENDED_FEATURES.get(name, {}).get("n_mels", 161)  # ds2: the 20 ms spectrogram's bins
    x = torch.randn(4, feats, 300, generator=torch.Generator().manual_seed(1))  # (B, F, T)
    lengths = torch.tensor([300, 260, 200, 120])
    runs = {}
    for recompute in (False, True):
        torch.manual_seed(0)
        model = build_model(name, None, feats, 29).train()
        blocks = recompute_blocks(model) if recompute else 0
        out = {}
        torch.manual_seed(2)  # the same dropout draws for both
        kept = saved_bytes(lambda out=out, model=model: out.setdefault("y", model(x, lengths)[0]))
        out["y"].float().square().mean().backward()
        runs[recompute] = (out["y"].detach(), [p.grad for p in model.parameters()], kept, blocks)
    (y0, g0, kept0, _), (y1, g1, kept1, blocks) = runs[False], runs[True]
    assert blocks >= 3 and torch.equal(y0, y1)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(g0, g1))
    assert kept0 / kept1 >= LEAST_SAVING[name], (kept0, kept1)
    model.eval()  # no gradients recorded: the blocks run as they are
    with torch.no_grad():
        assert saved_bytes(lambda: model(x, lengths)) == 0


def test_a_model_without_blocks_is_a_config_error():
    with pytest.raises(ConfigError, match="Linear has no stack of blocks"):
        recompute_blocks(nn.Linear(3, 3))


def test_training_with_recomputation_ends_at_the_same_weights(tmp_path):
    """Two steps with and without it: the same weights to the bit, and the checkpoint's tensors are the model's
    (recomputation changes no parameter name)."""
    plain = Trainer(ldc_config(tmp_path / "plain", "trainer.max_steps=2"))
    plain.fit()
    recomputed = Trainer(ldc_config(tmp_path / "re", "trainer.max_steps=2", "trainer.activation_checkpointing=true"))
    recomputed.fit()
    a = load_checkpoint(tmp_path / "plain" / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "re" / "checkpoints" / "last.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cuda_graphs_are_left_off_with_recomputation():
    from speechscale.components import build_components
    from speechscale.data.manifest import Utterance

    utts = [Utterance("x.wav", 1 + i / 10, "a", "a", 1) for i in range(8)]
    cfg = from_dict(Config, {"trainer": {"activation_checkpointing": True}, "model": {"name": "ds2-tiny"}})
    comps = build_components(cfg)
    assert step_shapes(cfg, comps, utts, torch.device("cuda")) == (None, False)  # auto: eager, a decision only
    cfg = from_dict(Config, {"trainer": {"activation_checkpointing": True, "cuda_graphs": "on"},
                             "model": {"name": "ds2-tiny"}})
    with pytest.raises(ConfigError, match="cuda_graphs=on needs trainer.activation_checkpointing=false"):
        step_shapes(cfg, comps, utts, torch.device("cuda"))
