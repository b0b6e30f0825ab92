"""Audio in the containers soundfile does not read: mp4/m4a/mov (AAC, ALAC), webm/mkv (Opus, Vorbis), raw AAC, wma
and amr, decoded with PyAV (the `media` extra) into the same (T, C) float32 that soundfile gives.

The container is recognized by its first bytes (`container_format`) and only that demuxer is used: ffmpeg never
probes, so a playlist or concat list, which would open other files or URLs, is refused before it is opened.
"""
from __future__ import annotations

from typing import Any

import numpy as np

ASF = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")  # the ASF header object's GUID (wma, wmv)
_DECLARES_LENGTH = {"mov", "matroska", "asf"}  # containers whose header holds the length
_MOV_BOXES = {b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"}  # the boxes an mp4 or mov file opens with


def available() -> bool:
    """Whether PyAV (the `media` extra) is installed, so that the containers here can be read."""
    import importlib.util

    return importlib.util.find_spec("av") is not None


def container_format(head: bytes) -> str | None:
    """The demuxer (ffmpeg's name) for a file that begins with `head` (at least 16 bytes when the file has them),
    or None when it is none of the containers read here."""
    if head[4:8] in _MOV_BOXES:
        return "mov"
    if head[:4] == b"\x1a\x45\xdf\xa3":  # EBML: webm, mkv
        return "matroska"
    if head[:16] == ASF:
        return "asf"
    if head.startswith((b"#!AMR\n", b"#!AMR-WB\n")):
        return "amr"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:  # an ADTS frame: sync word, layer 0
        return "aac"
    return None


def read_media(source: Any, path: str, fmt: str, max_seconds: float | None) -> tuple[np.ndarray, int]:
    """(T, C) float32 and the rate of the first audio stream of `source` (a path or a binary file object) in
    container `fmt`. The header's rate, channels and duration are checked before decoding, and decoding stops one
    frame past `max_seconds`. Raises AudioError (AudioTooLong past the bound)."""
    from .audio_bounds import MAX_CHANNELS, MAX_RATE, MIN_RATE, AudioError, AudioTooLong

    try:
        import av
    except ImportError:  # an AudioError, so that a run skips and counts the file and transcribe reports it
        raise AudioError(f"{path}: audio in a {fmt} container needs PyAV: pip install 'speechscale[media]'") from None
    if hasattr(source, "seek"):
        source.seek(0)
    try:
        with av.open(source, mode="r", format=fmt) as container:
            if not container.streams.audio:
                raise AudioError(f"{path}: no audio stream in it ({fmt} container)")
            stream = container.streams.audio[0]
            if stream.codec_context is None:
                raise AudioError(f"{path}: no decoder for its audio ({fmt} container)")
            rate, channels = stream.codec_context.sample_rate, stream.codec_context.layout.nb_channels
            if not MIN_RATE <= rate <= MAX_RATE:
                raise AudioError(f"{path}: a sample rate of {rate} Hz (audio is {MIN_RATE}-{MAX_RATE} Hz)")
            if not 1 <= channels <= MAX_CHANNELS:
                raise AudioError(f"{path}: {channels} channels (1 to {MAX_CHANNELS})")
            if fmt in _DECLARES_LENGTH:  # raw streams have no length field: ffmpeg would guess one from the bitrate
                declared = (float(stream.duration * stream.time_base) if stream.duration and stream.time_base
                            else (container.duration or 0) / 1e6)  # the stream's, else the container's (in us)
                if max_seconds is not None and declared > max_seconds + 1:  # it may round; decoding checks below
                    raise AudioTooLong(path, declared, max_seconds)
            limit = None if max_seconds is None else int(max_seconds * rate)
            planar = av.AudioResampler(format="fltp", layout=stream.codec_context.layout.name, rate=rate)
            blocks, frames = [], 0
            for packet in container.demux(stream):
                for frame in packet.decode():
                    for block in planar.resample(frame):
                        blocks.append(block.to_ndarray())  # (C, n)
                        frames += blocks[-1].shape[1]
                if limit is not None and frames > limit:
                    raise AudioTooLong(path, frames / rate, max_seconds)
            blocks += [b.to_ndarray() for b in planar.resample(None)]
    except AudioError:
        raise
    except Exception as e:  # PyAV raises FFmpegError, and ValueError or others on what ffmpeg half-read
        said = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise AudioError(f"{path}: not audio that PyAV can decode as {fmt} ({said})") from e
    if not blocks:
        return np.zeros((0, channels), np.float32), rate
    return np.ascontiguousarray(np.concatenate(blocks, axis=1).T, dtype=np.float32), rate  # (T, C)
