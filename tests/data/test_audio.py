import numpy as np
import pytest
import soundfile as sf

from speechscale.data.audio import AudioError, audio_info, decode_audio, load_audio
from tests.conftest import shared


def test_stereo_44k_downmixes_and_resamples_to_match_the_16k_original():
    ref = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    got = load_audio(shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav"), 16000)
    assert got.dtype == np.float32 and got.ndim == 1
    assert abs(got.shape[0] - ref.shape[0]) <= 2
    n = min(len(ref), len(got))
    corr = np.corrcoef(ref[:n], got[:n])[0, 1]
    assert corr > 0.95


def test_8k_upsamples_to_the_same_duration():
    wav = load_audio(shared("ldc93s1", "LDC93S1_pcms16le_1_8000.wav"), 16000)
    assert abs(wav.shape[0] / 16000 - 2.9249) < 0.01


def test_flac_24bit_stereo():
    wav = load_audio(shared("jfk", "jfk.flac"), 16000)
    assert abs(wav.shape[0] / 16000 - 11.0) < 0.01 and np.abs(wav).max() <= 1.0
    assert audio_info(shared("jfk", "jfk.flac"))[1:] == (44100, 2)


def test_ogg_any_rate(tmp_path):
    t = np.arange(22050) / 22050
    sf.write(tmp_path / "tone.ogg", (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 22050)
    wav = load_audio(tmp_path / "tone.ogg", 8000)
    assert abs(wav.shape[0] - 8000) < 50
    spectrum = np.abs(np.fft.rfft(wav))
    assert abs(np.argmax(spectrum) * 8000 / len(wav) - 440) < 5


def test_truncated_missing_and_empty_files_raise_audio_error(tmp_path):
    src = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(src[:30])
    (tmp_path / "junk.wav").write_bytes(b"not audio at all" * 10)
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    for name in ("cut.wav", "junk.wav", "empty.wav", "missing.wav"):
        with pytest.raises(AudioError):
            load_audio(tmp_path / name, 16000)


def test_each_unreadable_file_says_what_is_wrong(tmp_path):
    (tmp_path / "zero.wav").write_bytes(b"")
    (tmp_path / "folder.wav").mkdir()
    (tmp_path / "junk.wav").write_bytes(b"not audio at all" * 10)
    for name, says in [("missing.wav", "missing.wav: no such file"), ("zero.wav", "zero.wav: empty file (0 bytes)"),
                       ("folder.wav", "folder.wav: is a directory"),
                       ("junk.wav", "junk.wav: not audio that soundfile can decode")]:
        with pytest.raises(AudioError) as info:
            load_audio(tmp_path / name, 16000)
        assert str(info.value).endswith(says) or says in str(info.value), str(info.value)
        assert "System error" not in str(info.value)


def test_a_file_gone_after_its_check_is_unreadable_audio_not_an_os_error(tmp_path):
    """An outage mid-run: the file passed load_audio's check, then went away before it was opened. What the
    decoding step gives then is an AudioError (a skipped, counted utterance), not the FileNotFoundError that
    stopped a rank of tests/distributed/test_allreduce.py's outage test."""
    from speechscale.data.audio import _decode

    gone = str(tmp_path / "gone.wav")
    with pytest.raises(AudioError, match=r"gone\.wav: No such file or directory$"):
        _decode(gone, gone, 16000)


def test_a_bound_on_length_is_checked_from_the_header_and_never_decoded_past(tmp_path):
    import struct

    from speechscale.data.audio import AudioTooLong, decode_audio

    jfk = shared("jfk", "jfk.flac")
    with pytest.raises(AudioTooLong) as info:
        load_audio(jfk, 16000, max_seconds=5.0)
    assert round(info.value.seconds, 1) == 11.0
    assert np.array_equal(load_audio(jfk, 16000, max_seconds=12.0), load_audio(jfk, 16000))

    wav = tmp_path / "w.wav"
    sf.write(wav, np.zeros((1600, 9), dtype=np.float32), 16000)
    with pytest.raises(AudioError, match="9 channels"):
        load_audio(wav, 16000)
    sf.write(wav, np.zeros(1600, dtype=np.float32), 16000, subtype="PCM_16")
    data = wav.read_bytes()
    one_hz = data[:24] + struct.pack("<II", 1, 2) + data[32:]  # the header claims 1 sample per second
    with pytest.raises(AudioError, match="sample rate of 1 Hz"):
        decode_audio(one_hz, "upload", 16000, max_seconds=60.0)


def test_a_url_is_read_over_http_or_fsspec_and_a_bad_one_is_one_audio_error(serve, tmp_path):
    import fsspec

    from tests.media import encode

    wav_bytes = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    local = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    m4a = encode(local, 16000, tmp_path / "ldc.m4a")
    server = serve({"ldc.wav": wav_bytes, "ldc.m4a": m4a.read_bytes()})
    assert np.array_equal(load_audio(f"{server.url}/ldc.wav", 16000), local)
    assert np.array_equal(load_audio(f"{server.url}/ldc.m4a", 16000), load_audio(m4a, 16000))
    assert np.array_equal(load_audio(f"file://{shared('ldc93s1', 'LDC93S1.wav')}", 16000), local)  # a file URL
    fsspec.filesystem("memory").pipe("/speechscale-test/ldc.wav", wav_bytes)
    assert np.array_equal(load_audio("memory://speechscale-test/ldc.wav", 16000), local)
    for url, said in ((f"{server.url}/missing.wav", "HTTP 404"), ("memory://speechscale-test/none.wav", "no such file"),
                      ("zzz://host/a.wav", "Protocol not known")):
        with pytest.raises(AudioError) as info:
            load_audio(url, 16000)
        assert str(info.value).startswith(url + ": ") and said in str(info.value) and "\n" not in str(info.value)


def test_bytes_that_are_not_audio_are_named_not_shown_as_an_object():
    with pytest.raises(AudioError) as info:
        decode_audio(b"not audio at all" * 8, "upload", 16000)
    assert str(info.value).startswith("upload: not audio that soundfile can decode") and "BytesIO" not in str(info.value)
