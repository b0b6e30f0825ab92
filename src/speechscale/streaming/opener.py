"""The one way streams are opened, by the API (`Model.stream`), the command line (`transcribe --stream`) and the
WebSocket route (`serve`) alike: a checkpoint (a run folder, a URL) runs its model's step in PyTorch; an ONNX
streaming step (`export --streaming`) runs in onnxruntime with the model its file describes.

    streams = open_streams("runs/demo/checkpoints/best.pt")      # or "step.onnx", or loaded Components
    session = streams.session(sample_rate=44100)                 # one stream (StreamingSession)
    recognizer = streams.recognizer()                            # many streams, batched (the service)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError
from .recognizer import Recognizer, step_problem

DEFAULT_STEP_MS = 100.0  # audio per model step unless asked otherwise


@dataclass
class StreamModel:
    """What streams run: the model's components and its step (None: PyTorch's own, on the components' model; else an
    ONNX step, export.stream_runtime.OnnxStep), and the step's audio asked for (None: the default, or the ONNX
    step's own chunk)."""

    comps: Any
    step: Any = None
    step_ms: float | None = None

    def recognizer(self) -> Recognizer:
        """A recognizer for many streams; StreamingRefused (one line) for a model that cannot stream."""
        return Recognizer(self.comps, step=self.step, chunk_ms=self.step_ms or DEFAULT_STEP_MS)

    def session(self, sample_rate: int | None = None, endpoint_frames: int = 30, decoder: Any = None) -> Any:
        """One stream (streaming.session.StreamingSession) of mono audio at `sample_rate`."""
        from .session import StreamingSession

        return StreamingSession(self.comps, sample_rate=sample_rate, endpoint_frames=endpoint_frames, step=self.step,
                                decoder=decoder, chunk_ms=self.step_ms or DEFAULT_STEP_MS)


def open_streams(source: str | Path | Any, device: str = "cpu", step_ms: float | None = None,
                 flag: str = "step_ms") -> StreamModel:
    """Streams of `source`: a checkpoint, run folder or URL (its model on `device`), an ONNX streaming step, or loaded
    components. `step_ms`: audio per model step (an ONNX step's is fixed when it is exported), a ConfigError naming
    `flag` otherwise. Files are read as a stranger's (storage/untrusted.py)."""
    if step_ms is not None and (problem := step_problem(step_ms)):
        raise ConfigError(f"{flag}: {problem}")
    if not isinstance(source, (str, Path)):
        return StreamModel(source, None, step_ms)
    opened = open_step(source)
    if opened is None:
        from ..components import load_components

        return StreamModel(load_components(source, device), None, step_ms)
    if step_ms is not None:
        raise fixed_chunk(flag)
    return opened


def fixed_chunk(flag: str) -> ConfigError:
    """The refusal of a step's audio asked of an ONNX step, whose chunk is fixed when it is exported."""
    return ConfigError(f"{flag}: an exported step's chunk is fixed when it is exported (export --streaming --chunk "
                       "FRAMES)")


def open_step(source: str | Path) -> StreamModel | None:
    """The streams of the ONNX streaming step at `source` (`export --streaming`: onnxruntime runs it, with the model
    its file describes), or None when `source` is not one (a checkpoint, an offline export)."""
    if not str(source).endswith(".onnx"):
        return None
    from ..components import components_from_description
    from ..export.runtime import exported_file
    from ..export.stream_runtime import OnnxStep, is_stream_step

    with exported_file(source) as local:  # a URL's copied for onnxruntime to read
        if not is_stream_step(local):
            return None
        step = OnnxStep(local)
    return StreamModel(components_from_description(step.description, where=str(source)), step, None)
