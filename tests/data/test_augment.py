import numpy as np
import pytest
import torch

from speechscale.config import AugmentConfig
from speechscale.data.augment import WaveAugment, spec_augment, spec_draws


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
    draws = spec_draws(cfg, torch.Generator().manual_seed(3), 80, 200)
    assert draws[0] == 1.0 and len(draws) == 1 + 2 * 4  # no warp; (start, width) per mask
    out = spec_augment(feats, draws[1:], cfg.freq_masks)
    changed = out != feats
    assert changed.any() and out.shape == feats.shape
    rows, cols = changed.all(dim=1), changed.all(dim=0)  # masked frequency rows / time columns
    assert rows.sum() <= 20 and cols.sum() <= 40
    assert (changed & ~rows[:, None] & ~cols[None, :]).sum() == 0  # nothing outside the masks changed
    assert spec_augment(feats, spec_draws(AugmentConfig(), torch.Generator(), 80, 200)[1:], 0) is feats


def test_pause_segments_and_word_crop_on_real_yesno_audio():
    from speechscale.data.audio import load_audio
    from speechscale.data.augment import pause_segments, word_crop
    from tests.conftest import shared

    wav = load_audio(shared("yesno", "0_0_0_0_1_1_1_1.wav"), 8000)  # "no no no no yes yes yes yes"
    segs = pause_segments(wav, 8000)
    assert len(segs) == 8 and all(a < b for a, b in segs)
    cfg = AugmentConfig(word_crop=1.0)
    seen, lead = set(), {"no": [], "yes": []}
    for seed in range(120):
        out, text = word_crop(wav, "no no no no yes yes yes yes", cfg, 8000, torch.Generator().manual_seed(seed))
        n = len(text.split())
        kept = pause_segments(out, 8000)
        assert 1 <= n <= 8 and len(kept) == n  # the cut keeps whole words only
        seen.add(text.split()[0])
        lead[text.split()[0]].append(kept[0][0])
    assert seen == {"no", "yes"}  # crops start on either word: the first-word prior is gone
    # ... and so does the lead's: a crop from a later word may start with as long a silence as the file's own
    # (before, only crops from the first word kept it, and a long lead meant "no"); most crops are compact
    assert max(lead["yes"]) > 0.6 * segs[0][0] and max(lead["no"]) > 0.6 * segs[0][0]
    assert min(lead["yes"]) < 0.4 * segs[0][0] and min(lead["no"]) < 0.4 * segs[0][0]
    long = sum(x > 0.4 * segs[0][0] for x in lead["no"] + lead["yes"])
    assert 10 <= long <= 50  # about a quarter of 120 with edges 0.25 (and some of them draw a short part)
    # edges 0: every crop compact, its first word after at most half a pause, whichever word it starts on
    compact = AugmentConfig(word_crop=1.0, word_crop_edges=0.0)
    bound = max(b[0] - a[1] for a, b in zip(segs, segs[1:])) // 2 + 160  # half the longest pause + a 20 ms frame
    assert bound < 0.6 * segs[0][0]  # shorter than the file's lead
    for seed in range(40):
        out, text = word_crop(wav, "no no no no yes yes yes yes", compact, 8000, torch.Generator().manual_seed(seed))
        assert pause_segments(out, 8000)[0][0] <= bound
    same = word_crop(wav, "three words only", cfg, 8000, torch.Generator().manual_seed(0))
    assert same[1] == "three words only" and same[0] is wav  # segment count != word count: unchanged


def test_trim_silence_keeps_the_word_and_cuts_only_silence_on_real_fsdd_audio():
    from speechscale.data.audio import load_audio
    from speechscale.data.augment import sound_span, trim_silence
    from tests.conftest import shared

    wav = load_audio(shared("fsdd", "recordings", "5_lucas_7.wav"), 8000)  # lucas: long margins
    start, end = sound_span(wav, 8000, -20.0)
    assert 0 < start < end < len(wav)
    cfg = AugmentConfig(trim_silence=1.0)
    lengths = set()
    for seed in range(20):
        out = trim_silence(wav, cfg, 8000, torch.Generator().manual_seed(seed))
        offset = next(i for i in range(len(wav) - len(out) + 1) if np.array_equal(wav[i:i + len(out)], out))
        assert offset <= start and offset + len(out) >= end  # a contiguous cut that contains the word
        lengths.add(len(out))
    assert len(lengths) > 10 and min(lengths) < (end - start) + 0.3 * (len(wav) - (end - start))
    assert trim_silence(wav, AugmentConfig(), 8000, torch.Generator()) is wav


def test_freq_warp_moves_a_harmonic_by_the_factor():
    from speechscale.config import FeatureConfig
    from speechscale.data.augment import freq_warp
    from speechscale.data.features import FeatureExtractor

    feats = FeatureExtractor(FeatureConfig(sample_rate=8000, normalize="none"))(torch.from_numpy(_tone(1.0, 8000, 1000.0)))
    peak = int(feats.mean(dim=1).argmax())  # 1000 Hz at 50 Hz per bin: bin 20
    cfg = AugmentConfig(freq_warp=0.2)
    moved = set()
    for seed in range(8):
        factor = spec_draws(cfg, torch.Generator().manual_seed(seed), feats.shape[0], feats.shape[1])[0]
        assert factor == pytest.approx(0.8 + 0.4 * float(torch.rand((), generator=torch.Generator().manual_seed(seed))))
        out = freq_warp(feats, factor)
        assert out.shape == feats.shape
        new_peak = int(out.mean(dim=1).argmax())
        assert abs(new_peak - peak * factor) <= 1
        moved.add(new_peak)
    assert len(moved) > 3
    assert freq_warp(feats, 1.0) is feats  # no warping: the features themselves


def test_channel_colours_real_speech_by_a_bounded_smooth_response():
    from speechscale.data.audio import load_audio
    from speechscale.data.augment import apply_response, channel_response
    from tests.conftest import shared

    wav = load_audio(shared("fsdd", "recordings", "6_george_3.wav"), 8000)  # "six": its /s/ lies above 3 kHz
    n = len(wav)
    spread = []
    for seed in range(6):
        gain = channel_response(n, 12.0, torch.Generator().manual_seed(seed))  # (n + 1,) dB
        assert gain.shape == (n + 1,) and np.abs(gain).max() <= 12.0 + 1e-9
        assert np.abs(np.diff(gain)).max() < 0.05  # smooth: a colour, not a comb
        out = apply_response(wav, gain)
        assert out.shape == wav.shape and out.dtype == np.float32
        x = np.abs(np.fft.rfft(wav.astype(np.float64), 2 * n)) ** 2
        y = np.abs(np.fft.rfft(out.astype(np.float64), 2 * n)) ** 2
        freqs = np.linspace(0, 4000, n + 1)
        for lo in range(0, 4000, 500):  # each 500 Hz band changes by the response's (power-weighted) gain there
            band = (freqs >= lo) & (freqs < lo + 500)
            want = 10 * np.log10((x[band] * 10 ** (gain[band] / 10)).sum() / x[band].sum())
            assert abs(10 * np.log10(y[band].sum() / x[band].sum()) - want) < 0.5
        spread.append(gain.max() - gain.min())
    assert max(spread) > 6 and len({round(s, 3) for s in spread}) == 6  # the draws differ, some strongly
    aug = WaveAugment(AugmentConfig(channel_db=12.0), 8000)
    assert aug.active
    np.testing.assert_array_equal(aug(wav, torch.Generator().manual_seed(4)), aug(wav, torch.Generator().manual_seed(4)))
    assert not np.array_equal(aug(wav, torch.Generator().manual_seed(4)), wav)


def test_add_silence_pads_real_speech_within_bounds_and_lays_a_floor_at_the_drawn_level():
    from speechscale.data.audio import load_audio
    from speechscale.data.augment import add_silence
    from tests.conftest import shared

    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    bare = AugmentConfig(silence=1.0, silence_max_s=0.5, silence_floor_db=[])
    leads = set()
    for seed in range(12):
        out = add_silence(wav, bare, 16000, torch.Generator().manual_seed(seed))
        extra = len(out) - len(wav)
        assert 0 <= extra <= 2 * 8000
        lead = next(i for i in range(extra + 1) if np.array_equal(out[i:i + len(wav)], wav))  # the speech, intact
        assert not out[:lead].any() and not out[lead + len(wav):].any()  # digital silence on both sides
        leads.add(lead)
    assert len(leads) == 12  # a fresh length each draw
    wide, floor = (AugmentConfig(silence=1.0, silence_max_s=1.0, silence_floor_db=f) for f in ([], [-60.0, -60.0]))
    for seed in range(5):
        plain = add_silence(wav, wide, 16000, torch.Generator().manual_seed(seed))
        noisy = add_silence(wav, floor, 16000, torch.Generator().manual_seed(seed))  # the same lengths drawn first
        assert len(noisy) == len(plain)
        noise = (noisy - plain).astype(np.float64)
        # white noise at -60 dBFS RMS under the whole utterance, silence and speech alike
        assert abs(10 * np.log10(np.mean(noise ** 2)) + 60) < 0.2
        assert abs(np.corrcoef(noise[:-1], noise[1:])[0, 1]) < 0.05
    gen = torch.Generator().manual_seed(3)
    assert add_silence(wav, AugmentConfig(), 16000, gen) is wav  # off: the input, and no draw taken
    assert torch.equal(torch.rand(4, generator=gen), torch.rand(4, generator=torch.Generator().manual_seed(3)))


def test_longest_seconds_bounds_what_augmentation_makes_of_an_utterance():
    from speechscale.data.augment import add_silence, longest_seconds

    cfg = AugmentConfig(silence=0.7, silence_max_s=0.4, speed=[0.9, 1.1], tempo=[0.8, 1.2])
    assert longest_seconds(cfg, 1.0) == pytest.approx((1.0 + 0.8) / 0.9 / 0.8)
    assert longest_seconds(AugmentConfig(silence_max_s=5.0), 1.0) == 1.0  # silence off adds nothing
    aug, wav, worst = WaveAugment(cfg, 16000), _tone(1.0), 0
    for seed in range(30):
        gen = torch.Generator().manual_seed(seed)
        worst = max(worst, len(aug(add_silence(wav, cfg, 16000, gen), gen)))
    assert 1.3 * 16000 < worst <= longest_seconds(cfg, 1.0) * 16000 + 20


@pytest.mark.parametrize("in_step", [False, True])
def test_the_training_dataset_adds_the_silence_the_loader_and_the_step_both_see(in_step):
    """The dataset draws the silence from its per-utterance generator, before the waveform augmentation, whether
    it ships features or (features.device) the waveform."""
    from speechscale.config import FeatureConfig
    from speechscale.data.augment import add_silence
    from speechscale.data.dataset import SpeechDataset
    from speechscale.data.features import FeatureExtractor
    from speechscale.data.manifest import read_manifest
    from speechscale.data.text import CharTokenizer, TextNormalizer
    from speechscale.storage.seeds import generator
    from tests.conftest import shared

    utts, _ = read_manifest(shared("ldc93s1", "manifest.jsonl"), normalize=TextNormalizer())
    fx = FeatureExtractor(FeatureConfig(kind="logmel", n_mels=40, sample_rate=16000, normalize="utterance"))
    cfg = AugmentConfig(silence=1.0, silence_max_s=0.5, gain_db=3)
    ds = SpeechDataset(utts, fx, CharTokenizer(), augment=cfg, seed=7, in_step=in_step)
    ds.epoch = 2
    item = ds[0]
    gen = generator(7, "item", 2, 0)
    wav = WaveAugment(cfg, 16000)(add_silence(ds._wave(0), cfg, 16000, gen), gen)
    assert len(wav) > len(ds._wave(0)) + 160  # lengthened by the silence
    if in_step:
        np.testing.assert_array_equal(item["wave"].numpy(), wav)
    else:
        torch.testing.assert_close(item["feats"], fx(torch.from_numpy(wav)))
