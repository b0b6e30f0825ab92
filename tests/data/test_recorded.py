"""Noise and reverberation from recordings: the SNR is the drawn one, a room keeps length and alignment."""
import json

import numpy as np
import pytest
import soundfile as sf
import torch

from speechscale.config import AugmentConfig, ConfigError
from speechscale.data.audio import load_audio
from speechscale.data.augment import WaveAugment
from speechscale.data.recorded import mix_at_snr, reverberate
from speechscale.recipe import load_recipe
from tests.conftest import shared

SR = 16000


def _speech():
    return load_audio(shared("ldc93s1") / "LDC93S1.wav", SR)


def _snr(clean, mixed):
    added = mixed.astype(np.float64) - clean
    return 10 * np.log10(np.mean(clean.astype(np.float64) ** 2) / np.mean(added ** 2))


def _room(length=4000, direct=60, seed=0):
    """A synthetic room: silence, the direct path, then an exponentially decaying diffuse tail."""
    rng = np.random.default_rng(seed)
    rir = np.zeros(length, dtype=np.float32)
    rir[direct] = 1.0
    tail = rng.standard_normal(length - direct - 1) * np.exp(-np.arange(length - direct - 1) / 600) * 0.3
    rir[direct + 1:] = tail
    return rir


def _manifest(folder, name, files):
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (wav, sr) in enumerate(files):
        sf.write(folder / f"{name}{i}.wav", wav, sr)
        rows.append(json.dumps({"audio_filepath": f"{name}{i}.wav"}))
    (folder / "manifest.jsonl").write_text("\n".join(rows) + "\n")
    return str(folder / "manifest.jsonl")


@pytest.mark.parametrize("snr", [0.0, 7.5, 20.0])
def test_real_noise_is_mixed_at_exactly_the_requested_snr(snr):
    speech = _speech()
    noise = load_audio(shared("jfk") / "jfk.flac", SR)[: speech.shape[0]]  # real speech as babble
    assert abs(_snr(speech, mix_at_snr(speech, noise, snr)) - snr) < 0.5


def test_wave_augment_draws_the_snr_from_the_range_and_uses_real_noise_files(tmp_path):
    speech = _speech()
    jfk = load_audio(shared("jfk") / "jfk.flac", 22050)  # another sample rate: resampled on load
    manifest = _manifest(tmp_path / "noise", "n", [(jfk[:8000], 22050)])  # shorter than the speech: tiled
    aug = WaveAugment(AugmentConfig(noise_manifest=manifest, noise_manifest_snr_db=[12.0, 12.0]), SR)
    out = aug(speech, torch.Generator().manual_seed(3))
    assert out.shape == speech.shape and abs(_snr(speech, out) - 12.0) < 0.5
    wide = WaveAugment(AugmentConfig(noise_manifest=manifest, noise_manifest_snr_db=[0.0, 30.0]), SR)
    seen = [_snr(speech, wide(speech, torch.Generator().manual_seed(s))) for s in range(6)]
    assert all(-0.5 < x < 30.5 for x in seen) and max(seen) - min(seen) > 3  # drawn, not fixed
    again = wide(speech, torch.Generator().manual_seed(4))
    np.testing.assert_array_equal(again, wide(speech, torch.Generator().manual_seed(4)))  # seeded


def test_reverberation_keeps_length_alignment_and_level():
    speech = _speech()
    dry_room = np.zeros(500, dtype=np.float32)
    dry_room[123] = 0.5  # a pure delayed direct path: the utterance comes back unchanged
    np.testing.assert_allclose(reverberate(speech, dry_room), speech, atol=1e-5)
    wet = reverberate(speech, _room())
    assert wet.shape == speech.shape
    clicks = np.zeros(16000, dtype=np.float32)
    clicks[[3000, 9000]] = 1.0
    echo = np.abs(reverberate(clicks, _room()))
    for at in (3000, 9000):  # the direct path sits at time 0: every event stays where it was
        assert int(np.argmax(echo[at - 500:at + 2000])) == 500
    rms = lambda x: float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))  # noqa: E731
    assert rms(wet) == pytest.approx(rms(speech), rel=1e-3)
    assert not np.allclose(wet, speech, atol=1e-3)  # and it is reverberant


def test_rir_manifest_reverberates_with_the_configured_probability(tmp_path):
    speech = _speech()
    manifest = _manifest(tmp_path / "rirs", "r", [(_room(seed=s), SR) for s in range(2)])
    always = WaveAugment(AugmentConfig(rir_manifest=manifest, rir_prob=1.0), SR)
    never = WaveAugment(AugmentConfig(rir_manifest=manifest, rir_prob=0.0), SR)
    assert always.active and not np.allclose(always(speech, torch.Generator().manual_seed(0)), speech, atol=1e-3)
    np.testing.assert_array_equal(never(speech, torch.Generator().manual_seed(0)), speech)


def test_bad_noise_settings_fail_in_one_line_before_work(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        WaveAugment(AugmentConfig(noise_manifest=str(tmp_path / "missing.jsonl")), SR)
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio_filepath": "gone.wav"}) + "\n")
    with pytest.raises(ConfigError, match="1 listed file"):
        WaveAugment(AugmentConfig(rir_manifest=str(tmp_path / "m.jsonl")), SR)
    with pytest.raises(ConfigError, match="noise_manifest_snr_db"):
        load_recipe(None, ["augment.noise_manifest_snr_db=[20, 5]"])
    with pytest.raises(ConfigError, match="rir_prob"):
        load_recipe(None, ["augment.rir_prob=1.5"])


def test_a_training_run_uses_noise_and_rooms_in_loader_workers(tmp_path):
    """Through the real loader: a worker process reads the noise and RIR files; the run trains."""
    from speechscale.training.trainer import train

    src = shared("ldc93s1")
    row = {"audio_filepath": str(src / "LDC93S1.wav"), "duration": 2.92, "text": "she had your dark suit"}
    (tmp_path / "m.jsonl").write_text((json.dumps(row) + "\n") * 4)
    noise = _manifest(tmp_path / "noise", "n", [(load_audio(shared("jfk") / "jfk.flac", SR), SR)])
    rirs = _manifest(tmp_path / "rirs", "r", [(_room(), SR)])
    cfg = load_recipe(None, [f"data.train_manifest={tmp_path}/m.jsonl", f"data.val_manifest={tmp_path}/m.jsonl",
                             f"trainer.out_dir={tmp_path}/run", "trainer.max_steps=2", "trainer.progress=false",
                             "data.num_workers=1", "model.overrides={rnn_hidden: 32, rnn_layers: 1}",
                             f"augment.noise_manifest={noise}", f"augment.rir_manifest={rirs}", "augment.rir_prob=1"])
    summary = train(cfg)
    assert summary["step"] == 2 and summary["bad_audio"] == summary["feature_error"] == 0
