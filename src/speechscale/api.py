"""The Python API, mirroring the CLI: `train` a recipe, `load` a model, `transcribe` audio.

    >>> import tempfile, speechscale
    >>> out = tempfile.mkdtemp()
    >>> summary = speechscale.train("ldc93s1", data={"root": "data/ldc93s1"},
    ...                             trainer={"out_dir": out, "progress": False})
    >>> summary["wer"], summary["stopped_by"]
    (0.0, 'target_wer')
    >>> model = speechscale.load(out + "/checkpoints/best.pt", device="cpu")
    >>> result = model.transcribe("data/ldc93s1/LDC93S1.wav")
    >>> result.text
    'she had your dark suit in greasy wash water all year'
    >>> result.words[0].word, result.words[0].start < result.words[0].end, result.duration
    ('she', True, 2.925)
    >>> import json; json.dumps(result.to_dict())[:50]
    '{"text": "she had your dark suit in greasy wash wa'
    >>> import soundfile
    >>> wav, rate = soundfile.read("data/ldc93s1/LDC93S1.wav", dtype="float32")
    >>> model.transcribe(wav, sample_rate=rate).text   # an array (any rate: it is resampled)
    'she had your dark suit in greasy wash water all year'
    >>> scores = model.evaluate("data/ldc93s1/manifest.jsonl")   # WER and CER on a manifest, as `speechscale eval`
    >>> scores["wer"], scores["utterances"]
    (0.0, 3)
    >>> aligned = model.align(wav, "She had your dark suit in greasy wash water all year!", sample_rate=rate)
    >>> aligned.words[-1].word, aligned.words[-1].start < aligned.words[-1].end <= aligned.duration
    ('year', True)
    >>> model.card["model"]["name"], model.sample_rate
    ('ds2-tiny', 16000)
    >>> model.stream()   # a bidirectional model reads each utterance from its end too
    Traceback (most recent call last):
    ...
    speechscale.streaming.recognizer.StreamingRefused: ds2-tiny has bidirectional RNNs, which read ...from its end

`speechscale.train` is `speechscale train --config RECIPE` with each section's keys given as a mapping
(`trainer={"max_epochs": 3}` is `trainer.max_epochs=3`); `overrides` takes `key=value` strings as the CLI does.
Scripts that train with `data.num_workers > 0` need `if __name__ == "__main__":` (the workers start in a
forkserver that imports the script).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .streaming.events import Word  # one Word: a transcript's and a stream's final's

if TYPE_CHECKING:
    from .streaming.session import StreamingSession


@dataclass(frozen=True)
class Transcript:
    """What `Model.transcribe` returns: the text, the audio's duration in seconds and the words."""

    text: str
    duration: float
    words: list[Word] = field(default_factory=list)
    speech_covered: float | None = None  # align: the share of the audio's speech its words cover
    untimed: list[list[float]] | None = None  # align: [start, end] s of speech no word of the text covers

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Transcript":
        """From the service's JSON shape ({"text", "duration", "words": [{"word", "start", ...}]}, and align's
        speech_covered and untimed)."""
        return cls(d["text"], d["duration"], [Word(**w) for w in d.get("words", [])], d.get("speech_covered"),
                   d.get("untimed"))

    def subtitles(self, fmt: str = "srt", **rules: Any) -> str:
        """The transcript as an SRT or WebVTT file's text (`transcribe --format srt|vtt`); `rules`: line_chars,
        lines, max_seconds, pause_s (inference.subtitles.make_cues)."""
        from .inference.subtitles import make_cues, render

        return render(make_cues(self.words, self.duration, **rules), fmt)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape `speechscale transcribe --json` and the service write (a word's unknown fields left out)."""
        words = [{k: v for k, v in asdict(w).items() if v is not None} for w in self.words]
        said = {"speech_covered": self.speech_covered, "untimed": self.untimed}
        return {"text": self.text, "duration": self.duration, "words": words,
                **{k: v for k, v in said.items() if v is not None}}


class Model:
    """A trained model ready to transcribe: a checkpoint, a run folder (its best checkpoint, else its last), or an
    ONNX or TorchScript file of `speechscale export`."""

    def __init__(self, path: str | Path, device: str = "auto", decoder: str = "greedy", beam_width: int = 50,
                 lm: str | None = None, lexicon: str | None = None, chunk_seconds: float | None = None,
                 graphs: bool = False) -> None:
        """`graphs`: on a CUDA device, batches padded to a few shapes and replayed as CUDA graphs (a checkpoint,
        not an export; `transcribe --graphs`). `chunk_seconds`: long audio is cut at its pauses into chunks at most
        this long (None: the length the model's card says it trained on, `transcribe --chunk-seconds auto`)."""
        from .decoding.decoders import DecoderConfig
        from .inference.transcribe import Transcriber
        from .storage.checkpoints import model_path
        from .streaming.opener import StreamModel, open_step

        path = model_path(path)
        self.path = str(path)
        dcfg = DecoderConfig(name=decoder, beam_width=beam_width, lm=lm or "", lexicon=lexicon or "")
        self._decoder = dcfg
        self._streams: StreamModel | None = open_step(path)
        if self._streams is not None:  # `export --streaming`'s file: it runs streams only
            self._asr = None
            self.backend: str = "onnx-step"
            self.sample_rate: int = self._streams.comps.features.cfg.sample_rate
            self.device = "cpu"
            return
        self._asr = Transcriber(path, chunk_seconds=chunk_seconds, backend="auto", decoder=dcfg, device=device,
                                graphs=graphs)
        self.backend = self._asr.backend
        self.sample_rate = self._asr.sample_rate
        self.device = str(self._asr.device)

    @property
    def _offline(self) -> Any:
        """What transcribes whole recordings (inference.transcribe.Transcriber); a streaming step has none."""
        if self._asr is None:
            raise ValueError(f"{self.path} is a streaming step (export --streaming): it runs streams only "
                             "(Model.stream); transcribe with the checkpoint or an offline export")
        return self._asr

    @property
    def module(self) -> Any:
        """The acoustic model as a torch `nn.Module` (features in, log-probabilities out), for a checkpoint;
        an exported file has none (ValueError)."""
        if self.backend != "torch":
            raise ValueError(f"a {self.backend} export has no nn.Module; load the checkpoint it was exported from")
        return self._offline.comps.model

    @property
    def components(self) -> Any:
        """What the model is assembled from (components.Components): `model`, `features`, `tokenizer` (the
        alphabet) and `normalizer` (the text normalization its scores use)."""
        return self._streams.comps if self._streams is not None else self._offline.comps

    @functools.cached_property
    def card(self) -> dict[str, Any]:
        """The model card the file carries (what `speechscale info` prints); read once, when first asked."""
        from .export.runtime import card_of_file

        return card_of_file(self.path)

    def transcribe(self, audio: str | Path | np.ndarray, sample_rate: int | None = None,
                   digits: bool = False) -> Transcript:
        """A file (any format load_audio reads, or a URL) or a mono waveform (a NumPy array or a torch tensor on any
        device: floats, or 8/16/32-bit PCM such as int16) at `sample_rate` (default: the model's) -> its Transcript
        (text, duration, words; greedy: each word with start, end in seconds and a confidence). `digits`: numbers
        written in digits ("$5.50", "1990"; English, de, fr, es, it, pt and nl models, else ValueError)."""
        return self.transcribe_batch([audio], sample_rate, digits)[0]

    def transcribe_batch(self, audios: list[str | Path | np.ndarray], sample_rate: int | None = None,
                         digits: bool = False) -> list[Transcript]:
        """Several files or waveforms run through the model as one padded batch (what a GPU wants)."""
        from .data.audio import is_tensor
        from .decoding.digits import check_written_digits, written

        if isinstance(audios, (str, Path, np.ndarray, bytes)) or is_tensor(audios) or not hasattr(audios, "__iter__"):
            raise ValueError(f"transcribe_batch takes a list of files or waveforms, got one {type(audios).__name__} "
                             "(transcribe takes one)")
        asr = self._offline
        language = asr.comps.normalizer.digits_language
        if digits:
            check_written_digits(language)
        wavs = [self._waveform(a, sample_rate) for a in audios]
        return [Transcript.from_dict(written(r, language) if digits else r) for r in asr.transcribe_batch(wavs)]

    def evaluate(self, manifest: str | Path, batch_seconds: float = 120.0) -> dict[str, Any]:
        """WER and CER on a manifest or shard index through this model's decoder (`speechscale eval --json`): wer,
        cer, utterances, skipped, skipped_reasons. A checkpoint; an export raises ValueError."""
        from .decoding.scoring import manifest_loader, score_loaded

        if self.backend != "torch":
            raise ValueError(f"evaluate scores a checkpoint, not an export ({self.backend}; speechscale eval takes the "
                             "checkpoint it was exported from)")
        if not (isinstance(batch_seconds, (int, float)) and 0 < batch_seconds < float("inf")):
            raise ValueError(f"batch_seconds must be a positive number of seconds, got {batch_seconds!r}")
        comps = self._offline.comps
        loader, report = manifest_loader(comps, str(manifest), batch_seconds)
        return score_loaded(comps, loader, report, self._decoder)[0]

    def align(self, audio: str | Path | np.ndarray, text: str, sample_rate: int | None = None,
              segment_seconds: float = 120.0) -> Transcript:
        """`text`, the known transcript of `audio` (a file, or a mono waveform at `sample_rate`), timed on it (`speechscale
        align`; audio longer than `segment_seconds` a segment at a time): a Transcript of the normalized text whose
        words carry start, end and a confidence, with the share of the speech they cover and the stretches of speech
        no word times (`speech_covered`, `untimed`: a text that leaves words out). ValueError
        (inference.align.AlignError) when the text cannot be aligned to the audio."""
        from .inference.align import align_waveform

        res = align_waveform(self._offline, self._waveform(audio, sample_rate), text, segment_seconds)
        return Transcript.from_dict(res)

    def _waveform(self, audio: str | Path | np.ndarray, sample_rate: int | None) -> np.ndarray:
        """A file or a mono float waveform at `sample_rate` -> (T,) float32 at the model's rate."""
        from .data.audio import as_waveform, check_rate, is_tensor, load_audio, resample

        if isinstance(audio, (str, Path)):
            return load_audio(audio, self.sample_rate)
        if not isinstance(audio, (np.ndarray, list, tuple, bytes, bytearray)) and not is_tensor(audio):
            raise ValueError(f"expected a file path, a URL or mono samples (an array or a tensor), got "
                             f"{type(audio).__name__}")  # bytes: as_waveform says what to do
        rate = self.sample_rate if sample_rate is None else check_rate(sample_rate)
        wav = as_waveform(audio)
        return wav if rate == self.sample_rate else resample(wav, rate, self.sample_rate)

    def stream(self, sample_rate: int | None = None, endpoint_frames: int = 30, step_ms: float | None = None
               ) -> StreamingSession:
        """A live stream of mono audio at `sample_rate` (default: the model's): `.accept(samples)` and `.finish()`
        return typed events (streaming.events: Partial, Final with its Words), `.text` is the transcript so far.
        A checkpoint of a streaming model (e.g. the demo_streaming recipe's), or its ONNX streaming step (`export
        --streaming`, run by onnxruntime); others raise with the reason. With a beam or lexicon decoder, each phrase
        is searched incrementally as its own utterance. `step_ms`: audio per model step (default 100), rounded up to
        whole output frames (a streaming conformer attends in chunks of those frames; an ONNX step's is fixed)."""
        from .streaming.opener import fixed_chunk, open_streams

        if self._streams is not None:
            if step_ms is not None:
                raise fixed_chunk("step_ms")
            streams = self._streams
        elif self.backend != "torch":
            raise ValueError(f"streaming runs a checkpoint or its streaming step, not a {self.backend} export")
        else:
            streams = open_streams(self._offline.comps, step_ms=step_ms)
        decoder = None
        if self._decoder.name != "greedy":  # a search of the stream's own, a phrase at a time
            from .decoding.decoders import build_decoder

            decoder = build_decoder(self._decoder, streams.comps.tokenizer, streams.comps.normalizer)
        return streams.session(sample_rate=sample_rate, endpoint_frames=endpoint_frames, decoder=decoder)

    def __repr__(self) -> str:
        return f"speechscale.Model({self.path!r}, backend={self.backend!r}, device={self.device!r})"


def load(path: str | Path, device: str = "auto", **options: Any) -> Model:
    """A checkpoint, a run folder or an exported file ready to transcribe on `device` (auto | cpu | cuda | cuda:N);
    `options`: decoder (greedy | beam | lexicon), beam_width, lm, lexicon, chunk_seconds, graphs."""
    return Model(path, device=device, **options)


def train(recipe: str | Path, overrides: list[str] | None = None, **sections: dict[str, Any]) -> dict[str, Any]:
    """Train a built-in recipe (its name) or a YAML file, with `section={key: value}` mappings and `key=value`
    `overrides` applied in that order; returns the run's summary (the JSON line `speechscale train` prints)."""
    from .config import ConfigError
    from .config_dump import flow
    from .recipe import load_recipe
    from .training.trainer import train as run_training

    if not isinstance(recipe, (str, Path)) or not str(recipe).strip():
        raise ConfigError(f"recipe: a built-in recipe's name (`speechscale recipes` lists them) or a YAML file, got "
                          f"{recipe!r}")
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides or []):
        raise ConfigError(f"overrides: a list of 'key=value' strings, e.g. ['trainer.max_epochs=3'], got {overrides!r}")
    pairs: list[str] = []
    for section, values in sections.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{section}=...: expected a mapping of that section's keys, e.g. "
                              f"trainer={{'max_epochs': 3}}, got {values!r}")
        pairs += [f"{section}.{k}={flow(v)}" for k, v in values.items()]
    return run_training(load_recipe(recipe, [*pairs, *(overrides or [])]))
