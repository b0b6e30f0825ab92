"""The demo corpus: English sentences from a built-in grammar, spoken by espeak-ng in many voices.

    speechscale synth --out runs/demo/data --minutes 30 --seed 0

Training utterances use several voices, rates and pitches; `test.jsonl` uses one voice never used in
training. The same seed gives the same corpus, byte for byte.
"""
from __future__ import annotations

import logging
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import soundfile as sf
from tqdm import tqdm

from .audio import resample
from .espeak import Espeak
from .manifest import write_manifest
from .text import DIGIT_WORDS

log = logging.getLogger(__name__)

W = str.split
NAMES = W("anna ben carla david emma frank grace henry iris jack kate leo maria nick olivia paul rose sam tina victor")
ADJ = W("big small red blue green yellow old new young happy sad quick slow bright dark warm cold soft loud quiet "
        "heavy light tall short clean dirty strong weak brave tired hungry busy lazy kind gentle wild strange "
        "simple sweet bitter empty full round sharp wooden golden silver")
NOUNS = W("dog cat bird fish horse cow sheep rabbit mouse fox bear lion tiger wolf duck goat frog snake "
          "house car boat train plane bike ship truck door window table chair bed lamp clock phone book letter "
          "paper pencil box bag cup plate bottle basket apple bread cheese cake milk water coffee soup rice "
          "garden river mountain forest field road bridge city village market school church castle tower "
          "teacher doctor farmer driver painter singer baker sailor student child friend neighbor king queen")
PLURAL = {n: (n[:-1] + "ies" if n.endswith("y") and n[-2] not in "aeiou" else
              n + "es" if n.endswith(("s", "x", "ch", "sh")) else n + "s") for n in NOUNS}
PLURAL.update({"mouse": "mice", "sheep": "sheep", "fish": "fish", "child": "children", "wolf": "wolves",
               "knife": "knives"})
VERBS_T = W("saw found took brought moved carried painted cleaned opened closed watched followed visited helped "
            "called pushed pulled washed dropped lifted bought sold built fixed lost kept wanted liked loved needed "
            "chased caught held touched")
VERBS_I = W("slept laughed cried jumped danced waited smiled walked ran swam sang stopped arrived left rested "
            "worked played listened shouted whispered")
ADV = W("quickly slowly quietly loudly happily sadly carefully gently suddenly finally often never always "
        "early late again together")
PREP = W("in on under near behind beside inside above below across through")
TIME = ["this morning", "last night", "yesterday", "today", "at noon", "after lunch", "before dinner",
        "every day", "on monday", "on friday", "in the evening", "last week", "next summer", "in winter"]
COUNT = W("two three four five six seven eight nine ten eleven twelve twenty")
COLORS_Q = ["what color is the", "where is the", "who found the", "why did you move the", "when did you see the"]


def _np(rng: random.Random) -> str:
    adj = rng.choice(ADJ) + " " if rng.random() < 0.6 else ""
    return f"the {adj}{rng.choice(NOUNS)}"


def sentence(rng: random.Random) -> str:
    """One sentence from the grammar (lower-case words only, no digits)."""
    kind = rng.randrange(7)
    if kind == 0:
        return f"{_np(rng)} {rng.choice(VERBS_T)} {_np(rng)} {rng.choice(PREP)} {_np(rng)}"
    if kind == 1:
        return f"{rng.choice(NAMES)} {rng.choice(VERBS_I)} {rng.choice(ADV)} {rng.choice(TIME)}"
    if kind == 2:
        return f"{rng.choice(COUNT)} {rng.choice(ADJ)} {PLURAL[rng.choice(NOUNS)]} {rng.choice(VERBS_I)} " \
               f"{rng.choice(PREP)} {_np(rng)}"
    if kind == 3:
        return f"{rng.choice(COLORS_Q)} {rng.choice(ADJ)} {rng.choice(NOUNS)}"
    if kind == 4:
        return f"{rng.choice(NAMES)} and {rng.choice(NAMES)} {rng.choice(VERBS_T)} {_np(rng)} {rng.choice(TIME)}"
    if kind == 5:
        return f"please put {_np(rng)} {rng.choice(PREP)} {_np(rng)}"
    return f"{_np(rng)} was {rng.choice(ADJ)} and {rng.choice(ADJ)} {rng.choice(TIME)}"


def vocabulary() -> set[str]:
    """Every word the grammar can produce."""
    words = set(NAMES + ADJ + NOUNS + list(PLURAL.values()) + VERBS_T + VERBS_I + ADV + PREP + COUNT)
    for phrase in TIME + COLORS_Q + ["the", "and", "was", "please", "put"]:
        words.update(phrase.split())
    return words


# espeak voices (language+variant). The test voice's variant (m6) is never used in training.
TRAIN_VOICES = ["en-us", "en-us+m1", "en-us+m3", "en-us+f1", "en-us+f2", "en+m2", "en+f3", "en-gb-x-rp+m4",
                "en-gb-x-rp+f5", "en-029+m7", "en-gb-scotland+m5", "en-us-nyc+f4"]
TEST_VOICE = "en-us+m6"

# `--text digits`: one digit word an utterance, as FSDD speaks them, in many more voices: every English accent
# espeak-ng has crossed with its human-sounding variants (the robotic, whispered and croaking ones left out)
DIGIT_ACCENTS = ["en-us", "en", "en-gb-x-rp", "en-029", "en-gb-scotland", "en-us-nyc", "en-gb-x-gbclan",
                 "en-gb-x-gbcwmd"]
DIGIT_VARIANTS = W("m1 m2 m3 m4 m5 m7 m8 f1 f2 f3 f4 f5 adam alex andy annie antonio aunty belinda benjamin "
                   "caleb david ed edward gene grandma grandpa ian john linda max michael mike norbert paul quincy "
                   "rob robert shelby steph travis victor zac")
DIGIT_VOICES = [f"{a}+{v}" for a in DIGIT_ACCENTS for v in DIGIT_VARIANTS]
TEXTS = ("grammar", "digits")  # synth --text


def synthesize_corpus(out: str | Path, minutes: float = 30.0, seed: int = 0, sample_rate: int = 16000,
                      test_minutes: float | None = None, progress: bool = True, text: str = "grammar", *,
                      sentences: Callable[[random.Random], str] | None = None, voices: Sequence[str] = (),
                      test_voice: str = TEST_VOICE) -> dict[str, int]:
    """Write OUT/train.jsonl, OUT/test.jsonl and OUT/audio/*.wav; returns utterance counts. `text`: sentences
    of the grammar in TRAIN_VOICES (the demo), or one digit word each in DIGIT_VOICES (`digits`: more voices for
    a few-speaker digit corpus such as FSDD). The test split is `test_voice` alone.

    Another grammar or language: `sentences` (a module-level function of a seeded Random, since synthesis runs
    in another process) replaces `text`'s, and `voices` (espeak-ng names, e.g. "de+m1") the training voices.

    espeak-ng keeps synthesis state from one utterance to the next inside a process (seeding does not reset
    it), so each corpus is made in a fresh process: the same seed then gives the same bytes.
    """
    if text not in TEXTS:
        raise ValueError(f"synth: text must be one of {', '.join(TEXTS)}, not {text!r}")
    Espeak()  # fail here, in the caller, with the one-line hint when espeak-ng is missing
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_synthesize, str(out), minutes, seed, sample_rate, test_minutes, progress, text,
                           sentences, list(voices), test_voice).result()


def _digit(rng: random.Random) -> str:
    return rng.choice(DIGIT_WORDS)


def _synthesize(out_dir: str, minutes: float, seed: int, sample_rate: int, test_minutes: float | None,
                progress: bool, text_kind: str, sentences: Callable[[random.Random], str] | None,
                voices: list[str], test_voice: str) -> dict[str, int]:
    digits = text_kind == "digits"
    make = sentences or (_digit if digits else sentence)
    out = Path(out_dir)
    tts = Espeak()
    tts.seed(seed)
    rng = random.Random(seed)
    test_minutes = test_minutes if test_minutes is not None else max(0.5, 0.1 * minutes)
    plan = [("train", minutes * 60, voices or (DIGIT_VOICES if digits else TRAIN_VOICES)),
            ("test", test_minutes * 60, [test_voice])]
    counts = {}
    for split, seconds, speakers in plan:
        folder = out / "audio" / split
        folder.mkdir(parents=True, exist_ok=True)
        records, total, i = [], 0.0, 0
        bar = tqdm(total=int(seconds), desc=f"synth {split}", unit="s", disable=not progress, leave=False)
        while total < seconds:
            text = make(rng)
            voice = rng.choice(speakers)
            if split == "train":
                rate, pitch = rng.randint(140, 200), rng.randint(25, 75)
            else:
                rate, pitch = 165, 50
            wav = tts.synthesize(text, voice=voice, rate=rate, pitch=pitch)
            wav = resample(wav, tts.sample_rate, sample_rate)
            peak = float(np.abs(wav).max()) or 1.0
            wav = (wav / peak * 0.9).astype(np.float32)
            name = f"{split}_{i:06d}.wav"
            sf.write(folder / name, wav, sample_rate, subtype="PCM_16")
            dur = wav.shape[0] / sample_rate
            # `speaker`: the voice, so that features.normalize=speaker gathers each voice's statistics
            records.append({"audio_filepath": f"audio/{split}/{name}", "duration": round(dur, 4), "text": text,
                            "speaker": voice, "voice": voice, "rate": rate, "pitch": pitch})
            total += dur
            i += 1
            bar.update(int(total) - bar.n)
        bar.close()
        write_manifest(out / f"{split}.jsonl", records)
        counts[split] = len(records)
        log.info("%s: %d utterances, %.1f minutes", split, len(records), total / 60)
    return counts
