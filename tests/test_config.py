import pytest
import torch

from speechscale.config import Config, ConfigError, from_dict, to_dict
from speechscale.recipe import load_recipe

YESNO = "data.root=../shared/data/yesno"  # the recipe reads its manifest from data.root (not read by these tests)


def test_every_shipped_config_loads():
    for name in ["demo", "fsdd", "yesno", "ldc93s1", "librispeech_ds2"]:
        cfg = load_recipe(f"configs/{name}.yaml", ["data.root=/data/corpus"])
        assert cfg.data.train_manifest.startswith("/data/corpus/") and cfg.trainer.out_dir


def test_the_librispeech_conformer_recipe_is_nemos_medium_conformer_over_three_subsets():
    """Never trained here: its data reads each imported subset under data.root, and its model is Conformer-CTC
    Medium's size with its output (NeMo publishes 30.7 M parameters with 128 word pieces)."""
    from speechscale.data.features import FeatureExtractor
    from speechscale.models.registry import build_model
    from speechscale.recipe import vocab_size

    cfg = load_recipe("librispeech_conformer", ["data.root=/data/ls"])
    assert cfg.data.mix == [f"/data/ls/train-{s}/manifest.jsonl" for s in ("clean-100", "clean-360", "other-500")]
    assert cfg.data.val_manifest == "/data/ls/dev-clean/manifest.jsonl" and cfg.features.n_mels == 80
    assert cfg.text.pieces == 128 and vocab_size(cfg.text) == 129  # learned when the run starts
    model = build_model(cfg.model.name, cfg.model.overrides, FeatureExtractor(cfg.features).num_features, 129)
    assert 30.2e6 < sum(p.numel() for p in model.parameters()) < 31e6


def test_overrides_are_typed_and_round_trip_as_plain_data():
    cfg = load_recipe("configs/yesno.yaml", [YESNO, "trainer.max_steps=7", "optim.lr=1e-4", "augment.speed=[0.9, 1.1]",
                                             "model.overrides={rnn_hidden: 64}"])
    assert cfg.trainer.max_steps == 7 and cfg.optim.lr == 1e-4 and cfg.augment.speed == [0.9, 1.1]
    assert from_dict(Config, to_dict(cfg)) == cfg


@pytest.mark.parametrize("override", ["trainer", "=3", "features.kind=wavelet", "trainer.progress=maybe",
                                      "data.batch_seconds=-1", "nosuch.key=1",
                                      "model.overrides={rnn_hidden:", "features.preemphasis=1.5",
                                      "augment.trim_silence=2", "augment.freq_warp=0.7",
                                      "features.speaker_prior_frames=-1", "features.running_prior_frames=-1"])
def test_bad_overrides_raise_config_error(override):
    with pytest.raises(ConfigError):
        load_recipe("configs/yesno.yaml", [YESNO, override])


@pytest.mark.parametrize("override, message", [
    ("trainer.log_every=0", "trainer.log_every=0 must be at least 1"),
    ("data.num_workers=-1", "data.num_workers=-1 must be 0"),
    ("features.window_ms=100000", "features.window_ms=100000.0 must be in (0, 1000]"),
    ("optim.warmup_steps=-5", "optim.warmup_steps=-5 must be 0"),
    ("augment.speed=[1.1, 0.9]", "augment.speed=[1.1, 0.9] must be [] or [low, high] with 0 < low <= high"),
    ("augment.channel_db=-3", "augment.channel_db=-3.0 must be in [0, 40] (dB)"),
    ("augment.tempo=[0, 1.1]", "augment.tempo=[0.0, 1.1] must be [] or [low, high] with 0 < low <= high"),
    ("augment.noise_snr_db=[40, 20]", "augment.noise_snr_db=[40.0, 20.0]"),
    ("augment.silence=1.5", "augment.silence is a probability in [0, 1]"),
    ("augment.silence_max_s=-1", "augment.silence_max_s=-1.0 must be >= 0 (seconds)"),
    ("augment.silence_floor_db=[-40, -90]", "augment.silence_floor_db=[-40.0, -90.0] must be [] or [low, high] in dBFS"),
    ("augment.silence_floor_db=[-60, 6]", "augment.silence_floor_db=[-60.0, 6.0] must be [] or [low, high] in dBFS"),
    ("optim.name=adam", "optim.name='adam' is unknown; choose one of adamw, sgd"),
    ("distributed.strategy=gossip", "distributed.strategy='gossip' is unknown"),
    ("trainer.precision=fp8", "trainer.precision='fp8' is unknown; choose one of auto, fp32, bf16, fp16"),
    ("model.overrides={rnn_type: foo}", "rnn_type 'foo' is unknown"),
    ("model.overrides={activation: swish}", "activation 'swish' is unknown"),
    ("model.overrides={rnn_merge: mean}", "rnn_merge 'mean' is unknown"),
    ("model.overrides={nope: 1}", "model.overrides: unknown key(s) nope"),
    ("model.overrides={conv: [{channels: 8}]}", "missing 2 required positional arguments: 'kernel' and 'stride'"),
    ("model.overrides={rnn_hidden: 0}", "hidden_size must be greater than zero"),
    ("optim.lr=.inf", "optim.lr=inf must be a finite number"),  # trained a step of NaN weights
    ("data.train_slice=[5, 2]", "data.train_slice=[5, 2] and data.val_slice=[] must be line numbers from 0 with start"),
    ("augment.noise_snr_db=[20, .inf]", "augment.noise_snr_db[1]=inf must be a finite number"),
    ("model.overrides={dropout: .nan}", "model.overrides.dropout=nan must be a finite number"),
    ("trainer.max_minutes=.nan", "trainer.max_minutes=nan must be a finite number"),
])
def test_values_that_used_to_crash_later_fail_when_the_config_loads(override, message):
    with pytest.raises(ConfigError) as info:
        load_recipe("configs/demo.yaml", [override])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_each_choice_has_one_list_used_by_the_recipe_check_and_by_the_code_that_implements_it():
    from speechscale.config import OptimConfig
    from speechscale.data.features import FEATURE_DEVICES, FEATURE_KINDS, NORMALIZATIONS
    from speechscale.distributed import STRATEGIES
    from speechscale.distributed.adpsgd import VARIANTS
    from speechscale.recipe import choices
    from speechscale.training.optim import OPTIMIZERS, SCHEDULES, build_optimizer
    from speechscale.training.precision import PRECISIONS

    assert choices() == {"features.kind": FEATURE_KINDS, "features.normalize": NORMALIZATIONS,
                         "features.device": FEATURE_DEVICES, "text.digits": ("spell", "drop", "keep"),
                         "optim.name": tuple(OPTIMIZERS),
                         "optim.schedule": SCHEDULES, "trainer.precision": ("auto", *PRECISIONS),
                         "distributed.strategy": tuple(STRATEGIES), "distributed.adpsgd.variant": VARIANTS}
    for name in OPTIMIZERS:  # every listed optimizer is built as itself
        opt = build_optimizer(torch.nn.Linear(2, 2), OptimConfig(name=name))
        assert type(opt).__name__.lower() == name


def test_the_schema_checks_keys_and_types_and_the_recipe_checks_values():
    from speechscale.config import load_config

    assert load_config(None, ["optim.name=adam"]).optim.name == "adam"  # a value the schema cannot judge
    with pytest.raises(ConfigError, match="optim.name='adam' is unknown"):
        load_recipe(None, ["optim.name=adam"])
    with pytest.raises(ConfigError, match="expected a number"):
        load_config(None, ["optim.lr=fast"])


def test_the_schema_imports_no_component():
    import subprocess
    import sys

    code = ("import sys, speechscale.config; "
            "print(sorted(m for m in sys.modules if m.startswith('speechscale.') and m != 'speechscale.config'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_model_constructors_raise_the_config_error_type():
    from speechscale.models.deepspeech2 import DeepSpeech2, DS2Config
    from speechscale.models.lstm_ctc import LSTMCTC, LSTMConfig

    with pytest.raises(ConfigError, match="activation"):
        DeepSpeech2(DS2Config(activation="gelu"), num_features=161, vocab_size=29)
    with pytest.raises(ConfigError, match="stride"):
        LSTMCTC(LSTMConfig(stride=0), num_features=40, vocab_size=29)


def test_print_config_lists_every_key_with_its_comment_and_loads_back(tmp_path):
    from speechscale.config_dump import dump_config

    cfg = load_recipe("configs/demo.yaml", ["trainer.max_epochs=3", "augment.speed=[0.8, 1.2]"])
    text = dump_config(cfg)
    keys = [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("  ")]
    assert len(keys) == sum(len(v) for v in to_dict(cfg).values())
    assert "  max_epochs: 3" in text and "# stop after this much wall time" in text
    assert all("#" in line for line in text.splitlines() if line.startswith("  "))  # every key has a comment
    (tmp_path / "c.yaml").write_text(text)
    assert load_recipe(tmp_path / "c.yaml") == cfg


def test_a_renamed_key_is_still_read_from_recipes_and_checkpoints(caplog):
    from speechscale.config import load_config

    assert load_config(None, ["data.cache_features=true"]).data.cache_audio is True  # an old recipe or override
    assert "data.cache_features is now data.cache_audio" in caplog.text
    old = to_dict(Config())
    old["data"]["cache_features"] = old["data"].pop("cache_audio")  # a checkpoint's config before the rename
    old["data"]["cache_features"] = True
    assert from_dict(Config, old).data.cache_audio is True
