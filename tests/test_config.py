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
