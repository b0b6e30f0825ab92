import json
from pathlib import Path

import numpy as np
import pytest
import torch

from speechscale.config import FeatureConfig
from speechscale.data.features import FeatureExtractor
from tests.conftest import shared


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


def _fsdd_speakers(tmp_path, clips=8):
    """Eight of george's FSDD clips as speaker `a`; the same clips 12 dB quieter (`quiet`); and through a
    fixed first-order filter (y = x - 0.9 x[t-1], a tilted microphone) and 12 dB quieter (`tilted`)."""
    import soundfile as sf

    from speechscale.data.manifest import read_manifest

    src = shared("fsdd", "manifest.jsonl")
    rows = [json.loads(x) for x in src.read_text().splitlines() if '"george"' in x][:clips]
    out = []
    for r in rows:
        wav, rate = sf.read(src.parent / r["audio_filepath"], dtype="float32")
        versions = {"a": wav, "quiet": wav * 0.25,
                    "tilted": 0.25 * np.concatenate([wav[:1], wav[1:] - 0.9 * wav[:-1]])}
        for speaker, x in versions.items():
            path = tmp_path / f"{speaker}_{Path(r['audio_filepath']).name}"
            sf.write(path, x, rate, subtype="FLOAT")  # no requantization of the quieter copies
            out.append({"audio_filepath": str(path), "duration": r["duration"], "text": r["text"], "speaker": speaker})
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    utts, _ = read_manifest(tmp_path / "m.jsonl")
    return utts


def _features_by_speaker(utts, normalize):
    from speechscale.data.dataset import SpeechDataset
    from speechscale.data.text import CharTokenizer

    fx = FeatureExtractor(FeatureConfig(kind="logmel", n_mels=40, sample_rate=8000, normalize=normalize))
    ds = SpeechDataset(utts, fx, CharTokenizer())
    by: dict[str, list[torch.Tensor]] = {}
    for i, u in enumerate(utts):
        by.setdefault(u.extra["speaker"], []).append(ds[i]["feats"])  # (F, T)
    return by


def test_speaker_cmvn_takes_out_what_a_speakers_channel_adds_to_every_clip(tmp_path):
    utts = _fsdd_speakers(tmp_path)
    spk = _features_by_speaker(utts, "speaker")
    for speaker, feats in spk.items():  # over each speaker's frames: per-bin mean 0, std 1
        frames = torch.cat(feats, dim=1)
        assert frames.mean(dim=1).abs().max() < 1e-3 and (frames.std(dim=1) - 1).abs().max() < 1e-2, speaker
    # a level change alone leaves the features as they were, to a tenth of their unit spread (the log's
    # 1e-6 floor is not level-free: bins of near-silence move by up to 0.07 here)
    gap = [float((q - a).abs().mean()) for q, a in zip(spk["quiet"], spk["a"])]
    assert max(gap) < 0.1, gap
    # a fixed filter: per-utterance normalization keeps the tilt in every clip; the speaker's statistics
    # take most of it out (what remains is the filter's interaction with each clip's own spectrum)
    utt = _features_by_speaker(utts, "utterance")
    kept = np.mean([float((t - a).abs().mean()) for t, a in zip(utt["tilted"], utt["a"])])
    left = np.mean([float((t - a).abs().mean()) for t, a in zip(spk["tilted"], spk["a"])])
    assert left < 0.5 * kept, (left, kept)


def test_without_a_speaker_each_utterance_normalizes_per_bin_on_its_own(tmp_path):
    wav = torch.randn(8000) * 3 + 1
    cfg = dict(kind="logmel", n_mels=40, sample_rate=8000)
    alone = FeatureExtractor(FeatureConfig(**cfg, normalize="speaker"))(wav)
    torch.testing.assert_close(alone, FeatureExtractor(FeatureConfig(**cfg, normalize="feature"))(wav))
    assert alone.mean(dim=1).abs().max() < 1e-4


def test_a_file_without_its_speaker_is_shrunk_toward_the_training_speakers_prior(tmp_path):
    """transcribe and serve see one file, never its speaker's other clips: its own statistics are pooled with
    the training speakers' (features.speaker_prior, worth speaker_prior_frames frames). With the prior worth
    nothing it is plain per-bin CMVN; worth everything, the prior's own normalization; in between, closer to
    what its speaker's statistics give than its own alone (the LOSO figures are in BENCHMARKS.md)."""
    from speechscale.data.dataset import SpeechDataset
    from speechscale.data.features import pooled_prior
    from speechscale.data.text import CharTokenizer

    utts = [u for u in _fsdd_speakers(tmp_path) if u.extra["speaker"] == "tilted"]
    cfg = dict(kind="logmel", n_mels=40, sample_rate=8000, normalize="speaker")
    ds = SpeechDataset(utts, FeatureExtractor(FeatureConfig(**cfg)), CharTokenizer())
    prior = pooled_prior(ds.speakers)
    assert len(prior) == 80 and min(prior[40:]) > 0
    wavs = [torch.from_numpy(ds._wave(i)) for i in range(len(utts))]
    with_speaker = [ds[i]["feats"] for i in range(len(utts))]

    def alone(frames):
        fx = FeatureExtractor(FeatureConfig(**cfg, speaker_prior=prior, speaker_prior_frames=frames))
        return [fx(w) for w in wavs]

    own = [FeatureExtractor(FeatureConfig(**{**cfg, "normalize": "feature"}))(w) for w in wavs]
    for a, b in zip(alone(0), own):
        torch.testing.assert_close(a, b)
    for a, b in zip(alone(1e12), with_speaker):  # the prior here is this speaker's: the same features
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)

    def gap(feats):
        return float(np.mean([float((f - s).abs().mean()) for f, s in zip(feats, with_speaker)]))

    assert gap(alone(400)) < 0.5 * gap(own), (gap(alone(400)), gap(own))


def test_a_prior_of_the_wrong_size_is_one_clear_error():
    from speechscale.config import ConfigError

    with pytest.raises(ConfigError, match="speaker_prior holds 3 values; these features need 80"):
        FeatureExtractor(FeatureConfig(kind="logmel", n_mels=40, normalize="speaker", speaker_prior=[0.0, 1.0, 2.0]))


def _real_clips(rate):
    """Four recordings of different lengths (yesno, fsdd, ldc93s1), at `rate`."""
    from speechscale.data.audio import load_audio

    files = [shared("yesno", "0_0_0_0_1_1_1_1.wav"), shared("ldc93s1", "LDC93S1.wav"),
             shared("fsdd", "recordings", "0_george_0.wav"), shared("yesno", "1_0_1_0_1_0_0_1.wav")]
    return [torch.from_numpy(load_audio(f, rate)) for f in files]


@pytest.mark.parametrize("kind, normalize, remove_dc, preemphasis", [
    ("spectrogram", "utterance", False, 0.0), ("logmel", "feature", True, 0.97), ("spectrogram", "none", True, 0.0),
    ("logmel", "global", False, 0.0), ("logmel", "running", False, 0.0)])
def test_the_steps_batched_features_equal_the_loaders_row_by_row(kind, normalize, remove_dc, preemphasis):
    """features.device: a padded batch of real recordings through FeatureExtractor.batch, with each row's warp and
    SpecAugment draws, equals the loader's features of each recording alone to round-off, and is zero past each
    row's frames."""
    from speechscale.config import AugmentConfig
    from speechscale.data.augment import freq_warp, spec_augment, spec_draws

    fx = FeatureExtractor(FeatureConfig(kind=kind, normalize=normalize, remove_dc=remove_dc, preemphasis=preemphasis,
                                        n_mels=40))
    if normalize in ("global", "running"):
        from speechscale.data.features import global_stats

        fx.cfg.global_stats = global_stats(fx.raw(c) for c in _real_clips(16000))
    aug = AugmentConfig(freq_warp=0.1, freq_masks=2, freq_mask_width=8, time_masks=2, time_mask_width=15)
    clips = _real_clips(16000)
    g = torch.Generator().manual_seed(1)
    draws = [spec_draws(aug, g, fx.num_features, fx.num_frames(len(c))) for c in clips]
    alone = [spec_augment(freq_warp(fx(c), d[0]), d[1:], aug.freq_masks) for c, d in zip(clips, draws)]  # (F, T_i)
    lens = torch.tensor([len(c) for c in clips])
    waves = torch.zeros(len(clips), int(lens.max()))
    for i, c in enumerate(clips):
        waves[i, : len(c)] = c
    feats, frames = fx.batch(waves, lens, torch.tensor(draws, dtype=torch.float64), aug)
    assert frames.tolist() == [a.shape[1] for a in alone] and feats.shape[2] == max(frames.tolist())
    for i, a in enumerate(alone):
        torch.testing.assert_close(feats[i, :, : a.shape[1]], a, atol=2e-5, rtol=1e-5)
        assert float(feats[i, :, a.shape[1]:].abs().sum()) == 0.0


def test_global_statistics_are_every_training_frames_per_bin_mean_and_std():
    """normalize=global: the statistics over real recordings equal numpy's over all their frames together; each
    frame is normalized by them alone (the same frame in a longer recording gives the same values); without
    statistics, or with the wrong count, a one-line error names the key."""
    from speechscale.config import ConfigError
    from speechscale.data.features import global_stats

    fx = FeatureExtractor(FeatureConfig(normalize="global"))
    clips = _real_clips(16000)
    raws = [fx.raw(c) for c in clips]
    frames = np.concatenate([r.double().numpy() for r in raws], axis=1)  # (F, all frames)
    stats = np.array(global_stats(raws))
    np.testing.assert_allclose(stats[:161], frames.mean(axis=1), atol=1e-5)
    np.testing.assert_allclose(stats[161:], frames.std(axis=1), atol=1e-5)
    with pytest.raises(ConfigError, match="features.global_stats"):
        fx(clips[0])
    fx.cfg.global_stats = list(stats)
    got = fx(clips[0]).numpy()
    np.testing.assert_allclose(got, (raws[0].numpy() - stats[:161, None]) / (stats[161:, None] + 1e-5), atol=1e-4)
    longer = fx(torch.cat([clips[0], clips[1]])).numpy()
    np.testing.assert_allclose(longer[:, 5:50], got[:, 5:50], atol=1e-4)  # frame by frame: no utterance statistic
    with pytest.raises(ConfigError, match="global_stats holds 3 values"):
        FeatureExtractor(FeatureConfig(normalize="global", global_stats=[0.0, 1.0, 2.0]))


def test_running_normalization_is_the_training_sets_with_the_mean_of_the_frames_so_far():
    """normalize=running on a real recording equals a frame-by-frame loop in numpy: frame t less the training set's
    mean and the mean of frames 0..t (the training set's mean weighing features.running_prior_frames), over the
    training set's std; a frame depends on no later frame, and chunks with the carry between them equal the whole."""
    from speechscale.config import ConfigError
    from speechscale.data.features import global_stats

    clips = _real_clips(16000)
    fx = FeatureExtractor(FeatureConfig(kind="logmel", n_mels=40, normalize="running", running_prior_frames=30))
    with pytest.raises(ConfigError, match="features.normalize=running needs the training set's statistics"):
        fx(clips[1])
    fx.cfg.global_stats = global_stats(fx.raw(c) for c in clips)
    mean, std = np.array(fx.cfg.global_stats[:40]), np.array(fx.cfg.global_stats[40:])
    raw = fx.raw(clips[1]).double().numpy()  # (40, T)
    want, total = np.zeros_like(raw), np.zeros(40)
    for t in range(raw.shape[1]):
        total += raw[:, t] - mean
        want[:, t] = (raw[:, t] - mean - total / (t + 1 + 30)) / (std + 1e-5)
    got = fx(clips[1])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-4)
    assert float((got - fx.normalize(fx.raw(clips[1]), None)).abs().max()) == 0.0
    static = (raw - mean[:, None]) / (std[:, None] + 1e-5)  # normalize=global: differs where the level drifted
    assert np.abs(want - static)[:, 50:].mean() > 0.05
    x = fx.raw(clips[1])[None]  # (1, 40, T)
    head, carry = fx.running(x[..., :37])
    torch.testing.assert_close(head, got[None, :, :37], atol=0, rtol=0)  # no frame reads a later one
    parts = [head]
    for a, b in [(37, 38), (38, 120), (120, x.shape[2])]:
        part, carry = fx.running(x[..., a:b], carry=carry)
        parts.append(part)
    torch.testing.assert_close(torch.cat(parts, dim=2)[0], got, atol=1e-6, rtol=0)


def test_the_step_has_no_speaker_statistics():
    from speechscale.config import ConfigError

    fx = FeatureExtractor(FeatureConfig(normalize="speaker"))
    with pytest.raises(ConfigError, match="features.normalize=speaker needs the features computed in the loader"):
        fx.batch(torch.zeros(1, 4000), torch.tensor([4000]))
