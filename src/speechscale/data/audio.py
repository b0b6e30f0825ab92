"""Audio I/O: any file soundfile reads (wav/flac/ogg/mp3/...), or PyAV in the containers it does not (m4a/mp4,
webm, aac, wma, amr: data.media) -> mono float32 at the requested rate.

    >>> wav = load_audio("data/jfk/jfk.flac", 16000)  # doctest: +SKIP
    >>> wav.dtype, wav.ndim                                     # doctest: +SKIP
    (dtype('float32'), 1)
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr

from ..storage.files import is_remote, read_bytes
from .audio_bounds import MAX_CHANNELS, MAX_RATE, MIN_RATE, AudioError, AudioTooLong  # noqa: F401 - named from here
from .media import container_format, read_media

MAX_REMOTE_BYTES = 2 << 30  # an audio file read from a URL
SPAN_SLACK_S = 0.1  # a segment may end this far past its recording's end (durations written rounded)


def check_rate(rate: Any) -> int:
    """`rate` when it is a whole number of Hz that audio may have (MIN_RATE-MAX_RATE); ValueError otherwise."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(f"sample_rate must be a whole number of Hz from {MIN_RATE} to {MAX_RATE}, got {rate!r}")
    return int(rate)


PCM_DTYPES = ("int8", "int16", "int32", "uint8")  # integer samples read as PCM: full scale is 1.0


AUDIO_EXTENSIONS = frozenset({"flac", "wav", "mp3", "ogg", "opus", "oga", "m4a", "mp4", "aac", "webm", "mkv", "wma",
                              "amr", "sph", "aif", "aiff", "aifc", "au", "w64", "caf", "audio"})


def audio_files_under(folder: Path) -> list[Path]:
    """The audio files (by their names' extensions, AUDIO_EXTENSIONS) anywhere under `folder`, in name order."""
    return sorted(p for p in folder.rglob("*") if p.suffix[1:].lower() in AUDIO_EXTENSIONS and p.is_file())


def as_waveform(samples: Any) -> np.ndarray:
    """(T,) float32 of mono `samples`: float samples as they are, 8/16/32-bit PCM (an int16 array, say) scaled to
    full scale 1.0, a list of numbers as floats, a torch tensor as its values (on any device, any float width);
    ValueError when they are not one channel of finite numbers."""
    if is_tensor(samples):
        samples = _tensor_values(samples)
    if isinstance(samples, (bytes, bytearray, str)):
        raise ValueError(f"expected mono float samples, got {type(samples).__name__} (decode a file's bytes first, "
                         "or give its path)")
    try:  # a list of numbers is floats, never PCM
        raw = np.asarray(samples, dtype=np.float64) if isinstance(samples, (list, tuple)) else np.asarray(samples)
    except (TypeError, ValueError) as e:
        raise ValueError(f"expected mono float samples, got {type(samples).__name__} ({e})") from None
    if raw.dtype.kind in "iu":
        if raw.dtype.name not in PCM_DTYPES:
            raise ValueError(f"expected float samples or {', '.join(PCM_DTYPES)} PCM, got {raw.dtype.name} samples "
                             "(convert them to float32 in [-1, 1])")
        half = 2.0 ** (8 * raw.dtype.itemsize - 1)
        wav = ((raw.astype(np.float64) - (half if raw.dtype.kind == "u" else 0.0)) / half).astype(np.float32)
    elif raw.dtype.kind == "f":
        wav = raw.astype(np.float32, copy=False)
    else:
        raise ValueError(f"expected mono float samples, got {raw.dtype.name} values")
    if wav.ndim != 1:
        raise ValueError(f"expected a mono waveform (T,), got shape {wav.shape}; average the channels first")
    if not np.isfinite(wav).all():
        raise ValueError("the waveform holds non-finite samples (NaN or infinity)")
    return wav


def is_tensor(samples: Any) -> bool:
    """Whether `samples` is a torch tensor (told without importing torch)."""
    return type(samples).__module__.split(".")[0] == "torch" and hasattr(samples, "detach")


def _tensor_values(tensor: Any) -> np.ndarray:
    """A torch tensor's values on the host as NumPy: PCM integers kept (as_waveform scales them), floats narrower
    than float32 (bf16, fp16, which NumPy lacks or rounds) widened; its device and autograd graph left behind."""
    t = tensor.detach().cpu()
    if t.is_floating_point() and t.element_size() < 4:
        t = t.float()
    return t.resolve_conj().numpy() if t.is_complex() else t.numpy()


def check_file(path: str | Path, error: type[Exception]) -> None:
    """Raise `error` saying what is wrong when local `path` is missing, a directory or empty."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as e:
        raise error(f"{path}: {e.strerror or e}") from None
    if p.is_dir():
        raise error(f"{path}: is a directory")
    if size == 0:
        raise error(f"{path}: empty file (0 bytes)")


def resample(wav: np.ndarray, orig_sr: int, sample_rate: int) -> np.ndarray:
    """Resample mono float32 audio with soxr (high quality)."""
    if orig_sr == sample_rate:
        return wav
    return soxr.resample(wav, orig_sr, sample_rate, quality="HQ").astype(np.float32, copy=False)


def load_audio(path: str | Path, sample_rate: int, max_seconds: float | None = None, offset: float | None = None,
               duration: float | None = None) -> np.ndarray:
    """Read `path` (a local file, or a URL: http(s), s3://, gs://, any fsspec protocol), down-mix to mono,
    resample to `sample_rate`; (T,) float32. With `offset` (s), only the segment of `duration` s (to the end without
    one) that starts there, as a manifest line's `offset` names it. Raises AudioError (also for a segment that lies
    past the recording's end), and AudioTooLong past `max_seconds` (then no more than that is ever decoded)."""
    span = None if offset is None else (offset, duration)
    if is_remote(path):
        return decode_audio(_remote_bytes(str(path)), str(path), sample_rate, max_seconds, span)
    path = str(path).removeprefix("file://")  # file:///a.wav is the local /a.wav
    check_file(path, AudioError)
    return _decode(str(path), str(path), sample_rate, max_seconds, span)


def _remote_bytes(url: str) -> bytes:
    """The bytes at `url`: http(s) through storage.fetch (bounded in size and time, retried where that helps), any
    other protocol through fsspec. AudioError, in one line, when they cannot be read."""
    try:
        if url.split("://", 1)[0].lower() in ("http", "https"):
            import tempfile

            from ..storage.fetch import Policy, fetch

            with tempfile.TemporaryDirectory() as tmp:
                dest = Path(tmp) / "audio"
                fetch(url, dest, Policy(max_bytes=MAX_REMOTE_BYTES, bound_by="an audio file may have",
                                        resumable=False), progress=False)
                return dest.read_bytes()
        return read_bytes(url)
    except FileNotFoundError:
        raise AudioError(f"{url}: no such file") from None
    except Exception as e:  # fsspec and its backends raise many types (a missing s3fs is an ImportError)
        said = first_line(e)
        raise AudioError(said if said.startswith(url) else f"{url}: {said}") from None


def read_audio(path: str | Path, offset: float | None = None, duration: float | None = None) -> tuple[np.ndarray, int]:
    """A local file's samples as stored: (T, C) float32 and its rate (soundfile, or data.media); with `offset`, the
    segment load_audio reads. AudioError."""
    check_file(path, AudioError)
    return _read(str(path), str(path), None, None if offset is None else (offset, duration))


def decode_audio(data: bytes, name: str, sample_rate: int, max_seconds: float | None = None,
                 span: tuple[float, float | None] | None = None) -> np.ndarray:
    """`load_audio` for bytes held in memory (a shard member or an upload called `name` in messages); `span`:
    (offset, duration) of a segment."""
    if not data:
        raise AudioError(f"{name}: no bytes (empty)")
    return _decode(io.BytesIO(data), name, sample_rate, max_seconds, span)


def segment_frames(span: tuple[float, float | None], rate: int, frames: int, path: str) -> tuple[int, int]:
    """(first frame, frame count) of the segment `span` = (offset s, duration s or None: to the end) of a recording of
    `frames` frames at `rate`. AudioError when it starts at or past the end, or ends more than SPAN_SLACK_S past it."""
    offset, duration = span
    first = round(offset * rate)
    if not 0 <= first < frames:
        raise AudioError(f"{path}: a segment at {offset:g} s, outside the recording (0-{frames / rate:.3f} s)")
    if duration is None:
        return first, frames - first
    count = round(duration * rate)
    if first + count > frames + SPAN_SLACK_S * rate:
        raise AudioError(f"{path}: the segment {offset:g}-{offset + duration:g} s ends past the recording's end "
                         f"({frames / rate:.3f} s)")
    return first, min(count, frames - first)


def _read(source: Any, path: str, max_seconds: float | None,
          span: tuple[float, float | None] | None = None) -> tuple[np.ndarray, int]:
    """(T, C) float32 and the rate, of the whole recording or of the segment `span` (offset s, duration s or None);
    the header is checked first and at most `max_seconds` + 1 frame is read."""
    try:
        with sf.SoundFile(source) as f:
            sr, channels, frames = f.samplerate, f.channels, f.frames
            if not MIN_RATE <= sr <= MAX_RATE:
                raise AudioError(f"{path}: a sample rate of {sr} Hz (audio is {MIN_RATE}-{MAX_RATE} Hz)")
            if channels > MAX_CHANNELS:
                raise AudioError(f"{path}: {channels} channels (at most {MAX_CHANNELS})")
            first, count = (0, frames) if span is None else segment_frames(span, sr, frames, path)
            limit = None if max_seconds is None else int(max_seconds * sr)
            if limit is not None and count > limit:
                raise AudioTooLong(path, count / sr, max_seconds)
            if span is not None:
                f.seek(first)
                data = f.read(frames=count, dtype="float32", always_2d=True)  # (T, C)
            else:
                data = f.read(frames=-1 if limit is None else limit + 1, dtype="float32", always_2d=True)  # (T, C)
    except AudioError:
        raise
    except Exception as e:  # soundfile raises several types for corrupt or unknown formats
        try:
            fmt = container_format(_head(source))
        except OSError as gone:  # removed or made unreadable after check_file (an outage mid-run): unreadable audio
            raise AudioError(f"{path}: {gone.strerror or gone}") from e
        if fmt is None:
            said = first_line(e).replace(repr(source), repr(path))  # bytes in memory: name them, not their object
            raise AudioError(f"{path}: not audio that soundfile can decode ({said})") from e
        return read_media(source, path, fmt, max_seconds) if span is None else \
            _media_segment(source, path, fmt, max_seconds, span)
    if limit is not None and data.shape[0] > limit:  # the header understated the length
        raise AudioTooLong(path, data.shape[0] / sr, max_seconds)
    return data, sr


def _media_segment(source: Any, path: str, fmt: str, max_seconds: float | None,
                   span: tuple[float, float | None]) -> tuple[np.ndarray, int]:
    """`_read` of a segment of audio in a container soundfile does not read: decoded from its start, then cut."""
    data, sr = read_media(source, path, fmt, None)  # (T, C)
    first, count = segment_frames(span, sr, data.shape[0], path)
    if max_seconds is not None and count > max_seconds * sr:
        raise AudioTooLong(path, count / sr, max_seconds)
    return data[first:first + count], sr


def _head(source: Any) -> bytes:
    """The first 16 bytes of `source` (a path or a seekable binary file object)."""
    if hasattr(source, "seek"):
        source.seek(0)
        return source.read(16)
    with open(source, "rb") as f:
        return f.read(16)


def first_line(e: Exception) -> str:
    """The first line of an exception's message, or its type's name when the message is blank."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _decode(source: Any, path: str, sample_rate: int, max_seconds: float | None = None,
            span: tuple[float, float | None] | None = None) -> np.ndarray:
    data, sr = _read(source, path, max_seconds, span)
    if data.shape[0] == 0:
        raise AudioError(f"{path}: no audio samples in it")
    wav = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]  # (T, C) -> (T,)
    wav = np.ascontiguousarray(wav, dtype=np.float32)
    if not np.isfinite(wav).all():
        raise AudioError(f"non-finite samples in {path}")
    try:
        return resample(wav, sr, sample_rate)
    except Exception as e:  # soxr refuses some rate pairs
        raise AudioError(f"{path}: cannot resample {sr} Hz to {sample_rate} Hz ({first_line(e)})") from e


def audio_info(source: Any, name: str | None = None) -> tuple[float, int, int]:
    """(duration in s, sample rate, channels) from the header, without decoding; a container soundfile does not
    read (data.media) is decoded, for its exact length. `source`: a path, or a seekable binary file object
    (`name` in messages). soundfile's own exception when it is no audio."""
    source = source if hasattr(source, "read") else str(source)
    try:
        info = sf.info(source)
    except Exception:  # soundfile raises several types for corrupt or unknown formats
        fmt = container_format(_head(source))
        if fmt is None:
            raise
        if hasattr(source, "seek"):
            source.seek(0)
        data, rate = read_media(source, name or str(source), fmt, None)
        return data.shape[0] / rate, rate, data.shape[1]
    return info.frames / info.samplerate, info.samplerate, info.channels


def stream_duration(source: Any, name: str) -> float:
    """Seconds of audio in `source`, a seekable binary file object called `name` in messages (`audio_info`).
    AudioError when it is no audio or holds no samples."""
    try:
        seconds = audio_info(source, name)[0]
    except AudioError:
        raise
    except Exception as e:  # soundfile raises several types for corrupt or unknown formats
        said = first_line(e).replace(str(source), repr(name))  # a file object: named, not shown
        raise AudioError(f"{name}: not audio that soundfile can decode ({said})") from None
    if not seconds > 0:
        raise AudioError(f"{name}: no audio samples in it")
    return seconds
