import numpy as np
import pytest
import torch

from speechscale.config import AugmentConfig
from speechscale.data.audio import load_audio
from speechscale.data.augment import WaveAugment
from speechscale.data.wsola import wsola
from tests.conftest import shared

SR = 8000


def _f0(wav: np.ndarray, sr: int = SR) -> float:
    """Pitch (Hz) of the loudest 100 ms: the autocorrelation peak between 60 and 400 Hz."""
    n = int(0.1 * sr)
    starts = range(0, len(wav) - n, n // 4)
    i = max(starts, key=lambda s: float(np.sum(wav[s:s + n] ** 2)))
    seg = wav[i:i + n] - wav[i:i + n].mean()
    ac = np.correlate(seg, seg, "full")[n - 1:]
    lo, hi = sr // 400, sr // 60
    return sr / (lo + int(np.argmax(ac[lo:hi])))


@pytest.fixture(scope="module")
def voiced():
    """Real speech: two FSDD speakers' 'zero' and 'nine' (voiced throughout, with a clear pitch)."""
    return [load_audio(shared("fsdd", "recordings", name), SR) for name in ("0_george_5.wav", "9_jackson_7.wav")]


@pytest.mark.parametrize("factor", [0.8, 1.25])
def test_tempo_changes_duration_and_keeps_the_pitch_on_real_speech(voiced, factor):
    for wav in voiced:
        out = wsola(wav, factor, SR)
        assert out.dtype == np.float32 and abs(len(out) - len(wav) / factor) <= 1
        assert abs(_f0(out) / _f0(wav) - 1) < 0.03
        # resampling at the same factor moves the pitch with it: the check above could fail
        sped = WaveAugment(AugmentConfig(speed=[factor, factor]), SR)(wav, torch.Generator())
        assert abs(_f0(sped) / _f0(wav) - factor) < 0.05


def test_tempo_one_is_the_identity_and_bad_factors_are_refused(voiced):
    np.testing.assert_array_equal(wsola(voiced[0], 1.0, SR), voiced[0])
    with pytest.raises(ValueError, match="tempo factor must be positive"):
        wsola(voiced[0], 0.0, SR)


def test_augment_tempo_draws_in_its_range_reproducibly(voiced):
    wav = voiced[1]
    aug = WaveAugment(AugmentConfig(tempo=[0.85, 1.15]), SR)
    assert aug.active
    lengths = {len(aug(wav, torch.Generator().manual_seed(s))) for s in range(6)}
    assert len(lengths) > 3 and all(len(wav) / 1.15 - 2 <= n <= len(wav) / 0.85 + 2 for n in lengths)
    a, b = (aug(wav, torch.Generator().manual_seed(3)) for _ in range(2))
    np.testing.assert_array_equal(a, b)
