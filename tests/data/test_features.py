import numpy as np
import torch

from speechscale.config import FeatureConfig
from speechscale.data.features import FeatureExtractor


def test_spectrogram_matches_a_numpy_reference():
    cfg = FeatureConfig(normalize="none")
    fx = FeatureExtractor(cfg)
    wav = np.random.default_rng(0).standard_normal(8000).astype(np.float32)
    got = fx(torch.from_numpy(wav)).numpy()  # (161, frames)
    win, hop = 320, 160
    padded = np.pad(wav, (win // 2, win // 2), mode="reflect")
    window = np.hamming(win)
    frames = [padded[i * hop: i * hop + win] * window for i in range(1 + len(wav) // hop)]
    ref = np.log1p(np.abs(np.fft.rfft(np.stack(frames), axis=1))).T
    assert got.shape == ref.shape == (161, fx.num_frames(8000))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_normalized_per_utterance():
    fx = FeatureExtractor(FeatureConfig())
    f = fx(torch.randn(16000) * 3 + 1)
    assert abs(float(f.mean())) < 1e-4 and abs(float(f.std()) - 1) < 1e-3


def test_logmel_and_rates():
    fx = FeatureExtractor(FeatureConfig(kind="logmel", n_mels=40, sample_rate=8000))
    f = fx(torch.randn(8000))
    assert f.shape == (40, 101) and fx.num_features == 40 and torch.isfinite(f).all()
    assert FeatureExtractor(FeatureConfig(sample_rate=8000)).num_features == 81


def test_dc_offset_removed_and_preemphasis_matches_a_numpy_reference():
    wav = np.random.default_rng(1).standard_normal(8000).astype(np.float32)
    plain = FeatureExtractor(FeatureConfig(normalize="none"))
    no_dc = FeatureExtractor(FeatureConfig(normalize="none", remove_dc=True))
    assert not torch.allclose(plain(torch.from_numpy(wav + 0.5)), plain(torch.from_numpy(wav)), atol=1e-3)
    np.testing.assert_allclose(no_dc(torch.from_numpy(wav + 0.5)), no_dc(torch.from_numpy(wav - wav.mean())),
                               atol=1e-4)  # an offset no longer changes the features
    emph = FeatureExtractor(FeatureConfig(normalize="none", preemphasis=0.97))
    ref = np.concatenate([wav[:1], wav[1:] - 0.97 * wav[:-1]]).astype(np.float32)
    np.testing.assert_allclose(emph(torch.from_numpy(wav)), plain(torch.from_numpy(ref)), atol=1e-5)
