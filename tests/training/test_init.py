"""`trainer.init_from`: a run that starts from another run's weights, with its own optimizer and schedule."""
import pytest
import torch

from speechscale.config import ConfigError
from speechscale.models import MODELS, build_model
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.init import output_layer, symbol_rows
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


GERMAN = "' zyxwvutsrqponmlkjihgfedcbaäöüß"  # the source's letters in another order, four new ones, no "-"


def test_another_alphabet_keeps_each_known_symbols_trained_output(source, tmp_path, caplog):
    """A run in another language starts from the source's weights; each symbol both alphabets have keeps its
    output, a new one starts as a fresh model's, and nothing else changes. The log names what is new and, when
    every old symbol carries over, says none is dropped (it printed `not carried over: ''`)."""
    saved = load_checkpoint(source)
    old = saved["config"]["text"]["alphabet"]
    args = [f"text.alphabet={GERMAN!r}", "text.digits_language=de", "trainer.max_steps=2"]
    with caplog.at_level("INFO", logger="speechscale.training.init"):
        tuned = Trainer(ldc_config(tmp_path / "tuned", *args, f"trainer.init_from={source}"))
    assert "not carried over: none" in caplog.text and "''" not in caplog.text
    fresh = Trainer(ldc_config(tmp_path / "fresh", *args))
    head = output_layer(tuned.model, len(GERMAN) + 1)
    assert head == "fc.0"  # ds2-tiny without fc_hidden: one linear layer after the recurrent stack
    for name, value in tuned.model.state_dict().items():
        if not name.startswith(head + "."):
            assert torch.equal(value, saved["model"][name]), name
            continue
        assert value.shape[0] == len(GERMAN) + 1 == saved["model"][name].shape[0] + 4
        assert torch.equal(value[0], saved["model"][name][0])  # the blank
        for i, c in enumerate(GERMAN, start=1):
            want = saved["model"][name][old.index(c) + 1] if c in old else fresh.model.state_dict()[name][i]
            assert torch.equal(value[i], want), (name, c)
    # what the model says: each shared symbol's logit is the source model's, on the same input
    source_model = Trainer(ldc_config(tmp_path / "src", "trainer.max_steps=1", f"trainer.init_from={source}")).model
    feats, lengths = torch.randn(2, 81, 90), torch.tensor([90, 61])
    with torch.no_grad():
        a, _ = source_model.eval()(feats, lengths)
        b, _ = tuned.model.eval()(feats, lengths)
    shared_ids = [(GERMAN.index(c) + 1, old.index(c) + 1) for c in GERMAN if c in old]
    new_ids, old_ids = map(list, zip(*shared_ids))
    torch.testing.assert_close(b[..., [0] + new_ids], a[..., [0] + old_ids], rtol=0, atol=0)
    tuned.model.train()
    tuned.fit()
    assert tuned.state.step == 2
    card = (tmp_path / "tuned" / "checkpoints" / "MODEL.md").read_text()
    assert f"- **Started from:** `{source}`" in card and f"`{GERMAN}`" in card  # the card says where it began


def test_symbol_rows_maps_by_symbol_and_marks_the_new():
    assert symbol_rows("ab ", "b ca") == [0, 2, 3, -1, 1]
    assert symbol_rows("abc", "xyz") == [0, -1, -1, -1]


@pytest.mark.parametrize("name", ["ds2-tiny", "ds2-large", "wav2letter+-tiny", "lstm-ctc-tiny", "conformer-tiny"])
def test_the_output_layer_is_the_one_each_class_comes_from(name):
    """Nudging one row of the layer found moves that class's logit and no other, in every family."""
    assert name in MODELS
    torch.manual_seed(0)
    model = build_model(name, {}, 81, 31).eval()
    layer = model.get_submodule(output_layer(model, 31))
    feats, lengths = torch.randn(2, 81, 64), torch.tensor([64, 40])
    with torch.no_grad():
        before, _ = model(feats, lengths)
        layer.bias[7] += 1.0
        after, _ = model(feats, lengths)
    moved = (after - before).abs().amax(dim=(0, 1))  # (31,)
    assert moved[7] > 0.5 and moved[torch.arange(31) != 7].max() == 0


def test_frozen_parameters_keep_their_start_and_the_rest_trains(source, tmp_path):
    """trainer.freeze: the front end keeps the checkpoint's weights through training (its norms' statistics
    still move), the rest trains, and a resumed run ends where an uninterrupted one does."""
    args = ["trainer.max_steps=3", f"trainer.init_from={source}", "trainer.freeze=[convs, conv_norms]"]
    saved = load_checkpoint(source)["model"]
    run = Trainer(ldc_config(tmp_path / "frozen", *args))
    trained = {id(p) for g in run.optimizer.param_groups for p in g["params"]}
    assert all((id(p) in trained) != n.startswith("conv") for n, p in run.model.named_parameters())
    run.fit()
    after = load_checkpoint(tmp_path / "frozen" / "checkpoints" / "last.pt")["model"]
    params = {n for n, _ in run.model.named_parameters()}
    conv = [k for k in params if k.startswith("conv")]
    assert conv and all(torch.equal(after[k], saved[k]) for k in conv)
    assert "; kept as they were: convs, conv_norms" in (tmp_path / "frozen" / "checkpoints" / "MODEL.md").read_text()
    assert all(not torch.equal(after[k], saved[k]) for k in params if k.startswith("fc."))
    Trainer(ldc_config(tmp_path / "split", *args[1:], "trainer.max_steps=2")).fit()
    resumed = Trainer(ldc_config(tmp_path / "split", *args, "trainer.resume=auto"))
    assert resumed.state.step == 2
    resumed.fit()
    again = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(again[k], after[k]) for k in after)


def test_a_freeze_that_names_no_parameter_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="trainer.freeze: 'encoder' names no parameter") as err:
        Trainer(ldc_config(tmp_path / "x", "trainer.max_steps=1", "trainer.freeze=[convs, encoder]"))
    assert "its parts: conv_norms, convs, fc, fc_norm, rnns" in str(err.value) and "\n" not in str(err.value)


def test_a_run_folder_stands_for_its_checkpoint_in_init_from_and_resume(source, tmp_path):
    """init_from and resume took a run's folder for a file ("is a directory, not a checkpoint file"). init_from
    takes the folder's best.pt (else last.pt), resume its newest checkpoint."""
    run = source.parent.parent
    best = load_checkpoint(run / "checkpoints" / "best.pt")["model"]
    tuned = Trainer(ldc_config(tmp_path / "tuned", "trainer.max_steps=1", f"trainer.init_from={run}"))
    assert all(torch.equal(v, best[k]) for k, v in tuned.model.state_dict().items())
    moved = Trainer(ldc_config(tmp_path / "moved", "trainer.max_steps=5", f"trainer.resume={run}"))
    assert moved.state.step == load_checkpoint(source)["training"]["step"] == 3
    for folder, key in [(tmp_path / "empty", "trainer.init_from"), (tmp_path / "empty", "trainer.resume")]:
        folder.mkdir(exist_ok=True)
        with pytest.raises(ConfigError, match=f"{key}(: |=){folder}: a folder without") as err:
            Trainer(ldc_config(tmp_path / "x", "trainer.max_steps=1", f"{key}={folder}"))
        assert "\n" not in str(err.value)
