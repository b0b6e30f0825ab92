"""`trainer.init_from`: a run that starts from another run's weights, with its own optimizer and schedule."""
import pytest
import torch

from speechscale.config import ConfigError
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.trainer import Trainer
from tests.training.tiny import ldc_config


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A 3-step run's last.pt."""
    out = tmp_path_factory.mktemp("source")
    Trainer(ldc_config(out, "trainer.max_steps=3")).fit()
    return out / "checkpoints" / "last.pt"


def test_a_run_starts_from_the_weights_and_nothing_else(source, tmp_path):
    saved = load_checkpoint(source)
    fresh = Trainer(ldc_config(tmp_path / "fresh", "trainer.max_steps=2"))
    tuned = Trainer(ldc_config(tmp_path / "tuned", "trainer.max_steps=2", f"trainer.init_from={source}"))
    for name, value in tuned.model.state_dict().items():
        assert torch.equal(value, saved["model"][name]), name
    assert not all(torch.equal(v, saved["model"][k]) for k, v in fresh.model.state_dict().items())
    assert tuned.state.step == 0 and not tuned.optimizer.state  # a fresh optimizer and step count
    tuned.fit()
    assert tuned.state.step == 2
    moved = load_checkpoint(tmp_path / "tuned" / "checkpoints" / "last.pt")["model"]
    assert any(not torch.equal(moved[k], saved["model"][k]) for k in moved)  # it trained from there


def test_resume_wins_over_init_from(source, tmp_path):
    Trainer(ldc_config(tmp_path / "run", "trainer.max_steps=1")).fit()
    own = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["model"]
    again = Trainer(ldc_config(tmp_path / "run", "trainer.max_steps=2", "trainer.resume=auto",
                         f"trainer.init_from={source}"))
    assert again.state.step == 1
    for name, value in again.model.state_dict().items():
        assert torch.equal(value, own[name]), name


@pytest.mark.parametrize("extra, message", [
    (["features.sample_rate=16000"], "features.sample_rate 8000 (this run: 16000)"),
    (["model.overrides={rnn_hidden: 48}"], "does not fit model ds2-tiny"),
    (["model.name=ds2-small"], "model.name 'ds2-tiny' (this run: 'ds2-small')"),
])
def test_a_checkpoint_that_does_not_fit_is_a_one_line_error(source, tmp_path, extra, message):
    with pytest.raises(ConfigError, match="trainer.init_from") as err:
        Trainer(ldc_config(tmp_path / "x", "trainer.max_steps=1", f"trainer.init_from={source}", *extra))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_checkpoint_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="trainer.init_from: checkpoint not found"):
        Trainer(ldc_config(tmp_path / "x", "trainer.max_steps=1", f"trainer.init_from={tmp_path / 'nope.pt'}"))
