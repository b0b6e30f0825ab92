"""What an audio file may claim before anything is decoded, and the errors every decoder raises (data.audio for
soundfile's formats, data.media for PyAV's containers)."""
from __future__ import annotations

MIN_RATE, MAX_RATE, MAX_CHANNELS = 4_000, 384_000, 8  # what a header may claim before anything is decoded


class AudioError(RuntimeError):
    """The file is missing, unreadable, truncated or empty."""


class AudioTooLong(AudioError):
    """The audio is longer than the caller's bound (found from the header, or by decoding one frame past it)."""

    def __init__(self, path: str, seconds: float, max_seconds: float) -> None:
        super().__init__(f"{path}: {seconds:.1f} s of audio, over the bound of {max_seconds:g} s")
        self.seconds = seconds
