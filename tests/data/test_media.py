"""Audio in containers soundfile does not read (data.media): real files encoded by ffmpeg's encoders, decoded
through load_audio and decode_audio, against the soundfile-decoded original."""
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from speechscale.data.audio import AudioError, AudioTooLong, audio_info, decode_audio, load_audio
from speechscale.data.media import container_format
from tests.conftest import shared
from tests.media import CODECS, encode, video_only


@pytest.fixture(scope="module")
def ldc():
    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")  # 16 kHz mono, 2.9 s
    return wav, rate


def _best_lag_correlation(a: np.ndarray, b: np.ndarray, max_lag: int = 2500) -> float:
    """The highest correlation of a and b over shifts of up to max_lag samples (a codec's priming delays it)."""
    n = min(len(a), len(b)) - max_lag
    return max(float(np.corrcoef(a[lag:lag + n] if lag >= 0 else a[:n], b[:n] if lag >= 0 else b[-lag:-lag + n])[0, 1])
               for lag in range(-max_lag, max_lag + 1, 1))


@pytest.mark.parametrize("suffix", sorted(CODECS))
def test_compressed_containers_decode_to_the_original_from_a_path_and_from_bytes(ldc, tmp_path, suffix):
    wav, rate = ldc
    f = encode(wav, rate, tmp_path / f"clip.{suffix}", channels=2 if suffix == "m4a" else 1)
    with pytest.raises(sf.LibsndfileError):
        sf.info(f)  # soundfile alone cannot read it
    got = load_audio(f, 16000)
    assert np.array_equal(got, decode_audio(f.read_bytes(), f.name, 16000))
    assert abs(len(got) - len(wav)) < 0.1 * rate  # the codec's priming and padding, at most
    assert _best_lag_correlation(got, wav) > 0.98
    seconds, file_rate, channels = audio_info(f)
    assert (file_rate, channels) == (CODECS[suffix][2], 2 if suffix == "m4a" else 1)
    assert seconds == pytest.approx(len(got) / 16000, abs=0.01)


def test_a_bound_on_length_stops_decoding_and_a_video_without_sound_is_one_line(ldc, tmp_path):
    wav, rate = ldc
    said = {}
    for suffix in ("m4a", "webm", "aac"):
        f = encode(wav, rate, tmp_path / f"clip.{suffix}")
        with pytest.raises(AudioTooLong) as info:
            decode_audio(f.read_bytes(), f.name, 16000, max_seconds=1.0)
        said[suffix] = info.value.seconds
        assert len(load_audio(f, 16000, max_seconds=5.0)) == len(load_audio(f, 16000))
    assert said["m4a"] == pytest.approx(2.92, abs=0.1) and said["webm"] == pytest.approx(2.92, abs=0.1)  # headers
    assert 1.0 < said["aac"] < 1.2  # ADTS declares no length: decoding stopped just past the bound
    with pytest.raises(AudioError, match="no audio stream in it"):
        load_audio(video_only(tmp_path / "v.mp4"), 16000)


def test_a_truncated_container_or_a_playlist_is_refused_with_the_reason(ldc, tmp_path):
    wav, rate = ldc
    data = encode(wav, rate, tmp_path / "clip.m4a").read_bytes()
    with pytest.raises(AudioError, match="not audio that PyAV can decode as mov") as info:
        decode_audio(data[:len(data) // 2], "half.m4a", 16000)
    assert "\n" not in str(info.value)
    # a playlist names other files: it is recognized as no container here, so ffmpeg never opens it
    secret = tmp_path / "secret.wav"
    sf.write(secret, wav, rate)
    for playlist in (f"#EXTM3U\n#EXTINF:3,\nfile://{secret}\n#EXT-X-ENDLIST\n", f"ffconcat version 1.0\nfile {secret}\n"):
        assert container_format(playlist.encode()[:16]) is None
        with pytest.raises(AudioError, match="not audio that soundfile can decode"):
            decode_audio(playlist.encode(), "list", 16000)


def test_without_pyav_a_container_says_which_extra_reads_it(ldc, tmp_path):
    wav, rate = ldc
    f = encode(wav, rate, tmp_path / "clip.webm")
    code = ("import sys; sys.modules['av'] = None\n"  # the import fails as it does where PyAV is not installed
            "from speechscale.data.audio import load_audio, AudioError\n"
            f"try:\n    load_audio({str(f)!r}, 16000)\nexcept AudioError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == f"{f}: audio in a matroska container needs PyAV: pip install 'speechscale[media]'"


def test_damaged_containers_decode_or_raise_audio_error_and_nothing_else(ldc, tmp_path):
    """Seeded random damage to real files: each either decodes within the bound or is one AudioError."""
    import random

    wav, rate = ldc
    files = {s: encode(wav, rate, tmp_path / f"clip.{s}").read_bytes() for s in ("m4a", "webm", "aac", "wma")}
    webm = files["webm"]
    with pytest.raises(AudioError, match="no decoder for its audio"):
        decode_audio(webm.replace(b"A_OPUS", b"A_ZZZZ"), "odd.webm", 16000)  # a codec id ffmpeg does not know
    rng, outcomes = random.Random(0), {"decoded": 0, "refused": 0}
    for _ in range(200):
        suffix = rng.choice(sorted(files))
        data = bytearray(files[suffix])
        for _ in range(rng.choice([1, 10, 100])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            got = decode_audio(bytes(data[:rng.randrange(16, len(data) + 1)]), f"damaged.{suffix}", 16000, 10.0)
            assert len(got) <= 10 * 16000 and np.isfinite(got).all()
            outcomes["decoded"] += 1
        except AudioError as e:
            assert "\n" not in str(e)
            outcomes["refused"] += 1
    assert outcomes["decoded"] > 0 and outcomes["refused"] > 0, outcomes
