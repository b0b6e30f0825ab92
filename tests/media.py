"""Real compressed audio for the tests, encoded by ffmpeg's own encoders through PyAV: AAC in m4a/mp4 and ADTS,
Opus in webm, WMA in asf, and a video with no audio at all."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import soxr

# suffix: (PyAV muxer, encoder, sample rate)
CODECS = {"m4a": ("ipod", "aac", 44100), "mp4": ("mp4", "aac", 48000), "aac": ("adts", "aac", 16000),
          "webm": ("webm", "libopus", 48000), "wma": ("asf", "wmav2", 22050)}


def encode(wav: np.ndarray, rate: int, out: Path, channels: int = 1) -> Path:
    """Mono float32 `wav` at `rate` encoded into `out` with the muxer and codec its suffix names (CODECS), as
    `channels` equal channels."""
    import av

    fmt, codec, to_rate = CODECS[out.suffix[1:]]
    layout = "stereo" if channels == 2 else "mono"
    y = np.tile(soxr.resample(wav, rate, to_rate).astype(np.float32), (channels, 1))  # (C, T)
    with av.open(str(out), "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=to_rate, layout=layout)
        if codec == "wmav2":
            stream.bit_rate = 64000
        stream.codec_context.open()
        step = stream.codec_context.frame_size or 1024
        for i in range(0, y.shape[1], step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(y[:, i:i + step]), format="fltp", layout=layout)
            frame.sample_rate, frame.pts = to_rate, i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out


def video_only(out: Path) -> Path:
    """An mp4 holding ten frames of video and no audio."""
    import av

    with av.open(str(out), "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 20 * i, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out
