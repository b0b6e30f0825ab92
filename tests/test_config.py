import torch
import pytest

from speechscale.config import Config, ConfigError, from_dict, load_config, to_dict


def test_every_shipped_config_loads():
    for name in ["demo", "fsdd", "yesno", "ldc93s1", "librispeech_ds2"]:
        cfg = load_config(f"configs/{name}.yaml")
        assert cfg.data.train_manifest and cfg.trainer.out_dir


def test_overrides_are_typed_and_round_trip_as_plain_data():
    cfg = load_config("configs/yesno.yaml", ["trainer.max_steps=7", "optim.lr=1e-4", "augment.speed=[0.9, 1.1]",
                                             "model.overrides={rnn_hidden: 64}"])
    assert cfg.trainer.max_steps == 7 and cfg.optim.lr == 1e-4 and cfg.augment.speed == [0.9, 1.1]
    assert from_dict(Config, to_dict(cfg)) == cfg


@pytest.mark.parametrize("override", ["trainer", "=3", "features.kind=wavelet", "trainer.progress=maybe",
                                      "data.batch_seconds=-1", "nosuch.key=1",
                                      "model.overrides={rnn_hidden:", "features.preemphasis=1.5",
                                      "augment.trim_silence=2", "augment.freq_warp=0.7"])
def test_bad_overrides_raise_config_error(override):
    with pytest.raises(ConfigError):
        load_config("configs/yesno.yaml", [override])


@pytest.mark.parametrize("override, message", [
    ("trainer.log_every=0", "trainer.log_every=0 must be at least 1"),
    ("data.num_workers=-1", "data.num_workers=-1 must be 0"),
    ("features.window_ms=100000", "features.window_ms=100000.0 must be in (0, 1000]"),
    ("optim.warmup_steps=-5", "optim.warmup_steps=-5 must be 0"),
    ("augment.speed=[1.1, 0.9]", "augment.speed=[1.1, 0.9] must be [] or [low, high] with 0 < low <= high"),
    ("augment.noise_snr_db=[40, 20]", "augment.noise_snr_db=[40.0, 20.0]"),
    ("optim.name=adam", "optim.name='adam' is unknown; choose one of adamw, sgd"),
    ("distributed.strategy=gossip", "distributed.strategy='gossip' is unknown"),
    ("trainer.precision=fp8", "trainer.precision='fp8' is unknown; choose one of auto, fp32, bf16, fp16"),
    ("model.overrides={rnn_type: foo}", "rnn_type 'foo' is unknown"),
    ("model.overrides={activation: swish}", "activation 'swish' is unknown"),
    ("model.overrides={rnn_merge: mean}", "rnn_merge 'mean' is unknown"),
    ("model.overrides={nope: 1}", "model.overrides: unknown key(s) nope"),
    ("model.overrides={conv: [{channels: 8}]}", "missing 2 required positional arguments: 'kernel' and 'stride'"),
    ("model.overrides={rnn_hidden: 0}", "hidden_size must be greater than zero"),
])
def test_values_that_used_to_crash_later_fail_when_the_config_loads(override, message):
    with pytest.raises(ConfigError) as info:
        load_config("configs/demo.yaml", [override])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_each_choice_has_one_list_used_by_validation_and_by_the_code_that_implements_it():
    from speechscale.data.features import FEATURE_KINDS, NORMALIZATIONS
    from speechscale.distributed import STRATEGIES
    from speechscale.distributed.adpsgd import VARIANTS
    from speechscale.training.optim import OPTIMIZERS, SCHEDULES, build_optimizer
    from speechscale.training.precision import PRECISIONS, Precision

    from speechscale.config import OptimConfig, _choices

    assert _choices() == {"features.kind": FEATURE_KINDS, "features.normalize": NORMALIZATIONS,
                          "text.digits": ("spell", "drop", "keep"), "optim.name": tuple(OPTIMIZERS),
                          "optim.schedule": SCHEDULES, "trainer.precision": ("auto", *PRECISIONS),
                          "distributed.strategy": tuple(STRATEGIES), "distributed.adpsgd.variant": VARIANTS}
    for name in OPTIMIZERS:  # every listed optimizer is built as itself, and an unknown one is refused
        opt = build_optimizer(torch.nn.Linear(2, 2), OptimConfig(name=name))
        assert type(opt).__name__.lower() == name
    with pytest.raises(ConfigError, match="optim.name='adam' is unknown"):
        build_optimizer(torch.nn.Linear(2, 2), OptimConfig(name="adam"))
    with pytest.raises(ConfigError, match="trainer.precision='fp8'"):
        Precision("fp8", torch.device("cpu"))


def test_model_constructors_raise_the_config_error_type():
    from speechscale.models.deepspeech2 import DeepSpeech2, DS2Config
    from speechscale.models.lstm_ctc import LSTMCTC, LSTMConfig

    with pytest.raises(ConfigError, match="activation"):
        DeepSpeech2(DS2Config(activation="gelu"), num_features=161, vocab_size=29)
    with pytest.raises(ConfigError, match="stride"):
        LSTMCTC(LSTMConfig(stride=0), num_features=40, vocab_size=29)


def test_print_config_lists_every_key_with_its_comment_and_loads_back(tmp_path):
    from speechscale.config import dump_config

    cfg = load_config("configs/demo.yaml", ["trainer.max_epochs=3", "augment.speed=[0.8, 1.2]"])
    text = dump_config(cfg)
    keys = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("  ")]
    assert len(keys) == sum(len(v) for v in to_dict(cfg).values())
    assert "  max_epochs: 3" in text and "# stop after this much wall time" in text
    assert all("#" in line for line in text.splitlines() if line.startswith("  "))  # every key has a comment
    (tmp_path / "c.yaml").write_text(text)
    assert load_config(tmp_path / "c.yaml") == cfg
