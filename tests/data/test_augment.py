import numpy as np
import pytest
import torch

from speechscale.config import AugmentConfig
from speechscale.data.augment import WaveAugment, spec_augment


def _tone(seconds=1.0, sr=16000, hz=440.0):
    t = np.arange(int(seconds * sr)) / sr
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@pytest.mark.parametrize("low, high", [(1.2, 1.2), (0.8, 0.8)])
def test_speed_changes_length_and_pitch_by_the_factor(low, high):
    aug = WaveAugment(AugmentConfig(speed=[low, high]), 16000)
    out = aug(_tone(), torch.Generator().manual_seed(0))
    assert abs(len(out) - 16000 / low) < 20
    peak_hz = np.argmax(np.abs(np.fft.rfft(out))) * 16000 / len(out)
    assert abs(peak_hz - 440 * low) < 5


def test_gain_and_noise_at_the_requested_snr():
    wav = _tone()
    gained = WaveAugment(AugmentConfig(gain_db=6), 16000)(wav, torch.Generator().manual_seed(1))
    ratio_db = 20 * np.log10(np.abs(gained).max() / np.abs(wav).max())
    assert -6.01 <= ratio_db <= 6.01 and abs(ratio_db) > 0.01
    noisy = WaveAugment(AugmentConfig(noise_snr_db=[10, 10]), 16000)(wav, torch.Generator().manual_seed(2))
    snr = 10 * np.log10(np.mean(wav ** 2) / np.mean((noisy - wav) ** 2))
    assert abs(snr - 10) < 0.5


def test_same_generator_seed_same_output():
    aug = WaveAugment(AugmentConfig(speed=[0.9, 1.1], gain_db=3, noise_snr_db=[20, 30]), 16000)
    a = aug(_tone(), torch.Generator().manual_seed(5))
    b = aug(_tone(), torch.Generator().manual_seed(5))
    np.testing.assert_array_equal(a, b)


def test_spec_augment_masks_bands_and_spans_only():
    feats = torch.randn(80, 200)
    cfg = AugmentConfig(freq_masks=2, freq_mask_width=10, time_masks=2, time_mask_width=20)
    out = spec_augment(feats, cfg, torch.Generator().manual_seed(3))
    changed = out != feats
    assert changed.any() and out.shape == feats.shape
    rows, cols = changed.all(dim=1), changed.all(dim=0)  # masked frequency rows / time columns
    assert rows.sum() <= 20 and cols.sum() <= 40
    assert (changed & ~rows[:, None] & ~cols[None, :]).sum() == 0  # nothing outside the masks changed
    assert spec_augment(feats, AugmentConfig(), torch.Generator()) is feats


def test_pause_segments_and_word_crop_on_real_yesno_audio():
    from speechscale.data.audio import load_audio
    from speechscale.data.augment import pause_segments, word_crop
    from tests.conftest import shared

    wav = load_audio(shared("yesno", "0_0_0_0_1_1_1_1.wav"), 8000)  # "no no no no yes yes yes yes"
    segs = pause_segments(wav, 8000)
    assert len(segs) == 8 and all(a < b for a, b in segs)
    cfg = AugmentConfig(word_crop=1.0)
    seen = set()
    for seed in range(40):
        out, text = word_crop(wav, "no no no no yes yes yes yes", cfg, 8000, torch.Generator().manual_seed(seed))
        n = len(text.split())
        assert 1 <= n <= 8 and len(pause_segments(out, 8000)) == n  # the cut keeps whole words only
        seen.add(text.split()[0])
    assert seen == {"no", "yes"}  # crops start on either word: the first-word prior is gone
    same = word_crop(wav, "three words only", cfg, 8000, torch.Generator().manual_seed(0))
    assert same[1] == "three words only" and same[0] is wav  # segment count != word count: unchanged
