"""Speech synthesis with espeak-ng through its C library (from the `espeakng-loader` wheel or the system).

The library is process-global state, so one `Espeak` object per process; `synth.py` uses one per worker.

    >>> tts = Espeak()                                   # doctest: +SKIP
    >>> wav = tts.synthesize("hello world", voice="en-us+f3", rate=170, pitch=50)  # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import numpy as np

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PARAM_RATE, _PARAM_VOLUME, _PARAM_PITCH, _PARAM_RANGE = 1, 2, 3, 4

HOW_TO_GET = ("espeak-ng not found: pip install 'speechscale[synth]' (espeakng-loader ships the library, no root "
              "needed) or apt-get install espeak-ng")

_EVENT_LIST_END, _EVENT_WORD = 0, 1


class _Event(ctypes.Structure):
    """espeak_EVENT (speak_lib.h): what the synthesis callback is told beside each block of samples."""

    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", ctypes.c_char * 8)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


class EspeakNotFound(RuntimeError):
    """Raised when neither the wheel nor a system espeak-ng library can be loaded."""


def _locate() -> tuple[str, str | None]:
    """Return (library path, data path or None for the library's built-in default)."""
    try:
        import espeakng_loader  # type: ignore[import-not-found]

        return espeakng_loader.get_library_path(), espeakng_loader.get_data_path()
    except (ImportError, RuntimeError):
        pass
    name = ctypes.util.find_library("espeak-ng")
    if name is None:
        raise EspeakNotFound(HOW_TO_GET)
    return name, None


class Espeak:
    """A loaded espeak-ng library that renders text to a float32 waveform."""

    _instance_pid: int | None = None

    def __init__(self) -> None:
        lib_path, data_path = _locate()
        try:
            self._lib = ctypes.CDLL(lib_path)
        except OSError as e:
            raise EspeakNotFound(f"{HOW_TO_GET} ({e})") from e
        lib = self._lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        path = data_path.encode() if data_path else None
        if data_path:
            # espeak-ng wants the folder that *contains* espeak-ng-data in some builds, the folder itself in others.
            os.environ.setdefault("ESPEAK_DATA_PATH", data_path)
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, path, 0)
        if rate <= 0:
            raise EspeakNotFound(f"espeak-ng failed to initialise with data at {data_path}")
        self.sample_rate: int = rate
        if hasattr(lib, "espeak_ng_SetRandSeed"):  # espeak-ng >= 1.52 draws noise from a time-seeded generator
            lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        self._chunks: list[np.ndarray] = []
        self._words: list[tuple[int, int, int]] = []  # (text position from 1, length, first sample) of each word
        self.last_words: list[tuple[int, str, float]] = []  # the last synthesis's words: (character, word, start s)
        self._cb = _CALLBACK(self._collect)  # keep a reference: ctypes does not
        lib.espeak_SetSynthCallback(self._cb)

    def _collect(self, wav, n, events) -> int:
        if n > 0 and wav:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        i = 0
        while events and events[i].type != _EVENT_LIST_END:
            if events[i].type == _EVENT_WORD:
                self._words.append((events[i].text_position, events[i].length, events[i].sample))
            i += 1
        return 0

    def seed(self, seed: int) -> None:
        """Seed espeak-ng's noise generator (on builds that export espeak_ng_SetRandSeed)."""
        if hasattr(self._lib, "espeak_ng_SetRandSeed"):
            self._lib.espeak_ng_SetRandSeed(int(seed))

    def voices(self) -> list[str]:
        """Names of the voice variants shipped with the data (usable as `en-us+NAME`)."""
        root = Path(os.environ.get("ESPEAK_DATA_PATH", "")) / "voices" / "!v"
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []

    def synthesize(self, text: str, voice: str = "en-us", rate: int = 175, pitch: int = 50,
                   pitch_range: int = 50) -> np.ndarray:
        """Render `text` and return mono float32 samples in [-1, 1] at `self.sample_rate`; `last_words` then holds
        espeak-ng's word events: each word's first character in `text`, the word, and the second it starts at (a
        word spoken with the one before it, as "in the", may have no event of its own)."""
        lib = self._lib
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"espeak-ng has no voice {voice!r}")
        lib.espeak_SetParameter(_PARAM_RATE, int(rate), 0)
        lib.espeak_SetParameter(_PARAM_PITCH, int(pitch), 0)
        lib.espeak_SetParameter(_PARAM_RANGE, int(pitch_range), 0)
        lib.espeak_SetParameter(_PARAM_VOLUME, 100, 0)
        data = text.encode("utf-8") + b"\0"
        buf = ctypes.create_string_buffer(data)
        self._chunks, self._words = [], []
        err = lib.espeak_Synth(buf, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        lib.espeak_Synchronize()
        if err != 0:
            raise RuntimeError(f"espeak-ng failed on {text!r} (error {err})")
        self.last_words = [(p - 1, text[p - 1:p - 1 + n], sample / self.sample_rate) for p, n, sample in self._words]
        pcm = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        return (pcm.astype(np.float32) / 32768.0)
