"""Everything a model needs besides its weights, built from a config or restored from a checkpoint."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import Config, FeatureConfig, from_dict
from .data.features import FeatureExtractor
from .data.text import TextNormalizer, Tokenizer, build_tokenizer
from .models.registry import build_model
from .models.streaming import StreamingModel, streaming_card
from .storage.errors import ModelFileError, error_line


@dataclass
class Components:
    """Normalizer, tokenizer, features and model of one ASR system."""

    normalizer: TextNormalizer
    tokenizer: Tokenizer
    features: FeatureExtractor
    model: nn.Module
    model_name: str
    model_overrides: dict[str, Any]
    card: dict[str, Any] = field(default_factory=dict)  # the model card its file carries ({}: none, or not from a file)

    def ctc_min_frames(self, text: str) -> int:
        """Output frames CTC needs for `text` (spelled in the vocabulary): one per output unit (character or word
        piece) plus a blank between repeats."""
        ids = self.tokenizer.encode(text)
        return len(ids) + sum(1 for a, b in zip(ids, ids[1:]) if a == b)

    def fits(self, text: str, frames: int) -> bool:
        """Whether CTC can spell `text` in `frames` output frames. The text is spelled only when its length does not
        settle it: it needs at most a unit per character and one for the first word's start, each perhaps with a
        blank after it."""
        return 2 * (len(text) + 1) <= frames or self.ctc_min_frames(text) <= frames

    def streaming_card(self) -> dict[str, Any]:
        """What the model card states about streaming (models.streaming.streaming_card)."""
        return streaming_card(self.model, self.features, self.model_name)

    def output_frames(self, seconds: list[float]) -> list[int]:
        """Model output frames for utterances of these durations (derived from the layers), in one call."""
        frames = torch.tensor([self.features.frames_for_seconds(s) for s in seconds], dtype=torch.long)
        return self.model.output_lengths(frames).tolist()  # type: ignore[operator]


def resolve_normalize(features: FeatureConfig, model: nn.Module) -> None:
    """features.normalize=auto becomes global for a model that can stream (normalized frame by frame, so that it
    streams whatever recipe trained it) and utterance for the others."""
    if features.normalize == "auto":
        streams = isinstance(model, StreamingModel) and model.streaming_problem() is None
        features.normalize = "global" if streams else "utterance"


def build_components(cfg: Config) -> Components:
    """Fresh components for training from a validated config (features.normalize=auto resolved in `cfg`)."""
    normalizer = TextNormalizer(cfg.text.alphabet, cfg.text.digits, cfg.text.digits_language)
    tokenizer = build_tokenizer(cfg.text.alphabet, cfg.text.piece_list, cfg.text.piece_scores)
    features = FeatureExtractor(cfg.features)
    model = build_model(cfg.model.name, cfg.model.overrides, features.num_features, tokenizer.vocab_size)
    resolve_normalize(cfg.features, model)
    return Components(normalizer, tokenizer, features, model, cfg.model.name, dict(cfg.model.overrides))


def describe(state: dict[str, Any]) -> dict[str, Any]:
    """The model description of a loaded checkpoint, as plain data: everything but the weights that
    transcription needs (normalizer, tokenizer, features, architecture). Exported models carry it too."""
    if "meta" in state:  # format 2 stored it beside the weights
        return {"meta": state["meta"]}
    return {"config": state["config"]}


def components_from_description(desc: dict[str, Any], weights: dict[str, Any] | None = None,
                                where: str = "the checkpoint") -> Components:
    """Components from a model description (`describe`): with `weights`, the model holds them, in eval mode;
    without, the model is its architecture only, on the meta device (what needs no weights works: output
    lengths, strides, the streaming interface's sizes), for a runtime that brings its own weights.

    The description comes from a file, so it is checked before anything is allocated: it is parsed and the
    model built on the meta device (a bad key, type, range or shape is a ModelFileError in one line), and with
    `weights` every tensor's shape must match, so a corrupt description cannot ask for a huge model. The
    weights are then assigned to that model, never first drawn at random and overwritten."""
    try:
        with torch.device("meta"):
            comps = _build(desc)
    except Exception as e:
        said = str(e).strip().splitlines()[0] if isinstance(e, ValueError) and str(e).strip() else error_line(e)
        raise ModelFileError(f"{where}: its model description is not valid: {said[:300]}") from None
    if weights is None:
        return comps
    own = comps.model.state_dict()
    expected = {k: tuple(v.shape) for k, v in own.items()}
    found = {k: tuple(v.shape) for k, v in weights.items() if isinstance(v, torch.Tensor)}
    if expected != found:
        wrong = sorted(set(expected) ^ set(found)) or [k for k in expected if expected[k] != found[k]]
        raise ModelFileError(f"{where}: its weights do not match its model description "
                              f"({len(wrong)} tensor(s) differ, e.g. {wrong[0]})")
    # each tensor in the dtype the architecture declares (a checkpoint's own may differ), on the CPU
    comps.model.load_state_dict({k: weights[k].to("cpu", own[k].dtype) for k in own}, assign=True)
    _check_materialized(comps.model)
    comps.model.eval()
    return comps


def _check_materialized(model: nn.Module) -> None:
    """Every tensor a module holds is real after its weights were assigned: a tensor attribute outside the
    state dict would still be on the meta device, and fail only later, inside a forward."""
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            tensors = value.values() if attr in ("_parameters", "_buffers") else [value]
            if any(isinstance(t, torch.Tensor) and t.is_meta for t in tensors):
                raise RuntimeError(f"{type(model).__name__}: {name or 'the model'}.{attr} is not in its state dict "
                                   "and so cannot be loaded into a model built on the meta device")


def _build(desc: dict[str, Any]) -> Components:
    if not isinstance(desc, dict) or not isinstance(desc.get("config", desc.get("meta")), dict):
        raise ValueError("no config mapping in it")
    if "meta" not in desc:
        cfg = from_dict(Config, desc["config"])
        check_bounds(cfg.features, cfg.text.alphabet, cfg.text.piece_list, cfg.model.name, cfg.model.overrides)
        comps = build_components(cfg)
    else:
        meta = desc["meta"]
        for key in ("normalizer", "tokenizer", "features", "model_overrides"):
            if not isinstance(meta.get(key), dict):
                raise ValueError(f"its meta.{key} is not a mapping")
        features_cfg = from_dict(FeatureConfig, meta["features"], where="checkpoint.features")
        tok = meta["tokenizer"]
        check_bounds(features_cfg, tok.get("alphabet", ""), tok.get("piece_list") or [], meta.get("model_name"),
                     meta["model_overrides"])
        normalizer = TextNormalizer(**meta["normalizer"])
        tokenizer = build_tokenizer(**tok)
        features = FeatureExtractor(features_cfg)
        model = build_model(meta["model_name"], meta["model_overrides"], features.num_features, tokenizer.vocab_size)
        resolve_normalize(features.cfg, model)
        comps = Components(normalizer, tokenizer, features, model, meta["model_name"], meta["model_overrides"])
    return comps


# What a model description may ask for before anything is built: far past every preset, far short of what would
# exhaust a machine while the model is assembled (a description from a stranger could ask for 10^5 layers).
MAX_COUNT = 256           # layers, blocks, heads, repeats, list entries
MAX_WIDTH = 1 << 16       # any other integer of the architecture (widths, kernels, strides, contexts)
MAX_ALPHABET = 4096
MAX_PIECES = 1 << 16
COUNT_KEYS = ("layers", "rnn_layers", "heads", "repeat", "stack")


def check_bounds(features: FeatureConfig, alphabet: Any, pieces: Any, model_name: Any, overrides: Any) -> None:
    """ValueError (one line) when a description's values are out of the range any model has: the feature window and
    bins, the alphabet and word pieces, and every number of the architecture (counts up to MAX_COUNT, other integers
    up to MAX_WIDTH, lists up to MAX_COUNT entries, finite floats)."""
    import dataclasses
    import math

    from .config import ConfigError
    from .models.registry import model_config

    f = features
    checks = [(1000 <= f.sample_rate <= 384_000, f"features.sample_rate={f.sample_rate} is not in [1000, 384000]"),
              (0 < f.window_ms <= 1000 and 0 < f.hop_ms <= 1000, "features.window_ms and hop_ms must be in (0, 1000]"),
              (1 <= f.n_mels <= 1024, f"features.n_mels={f.n_mels} is not in [1, 1024]"),
              (isinstance(alphabet, str) and 0 < len(alphabet) <= MAX_ALPHABET,
               f"the alphabet must be 1 to {MAX_ALPHABET} characters"),
              (isinstance(pieces, list) and len(pieces) <= MAX_PIECES
               and all(isinstance(p, str) and len(p) <= 64 for p in pieces),
               f"the word pieces must be at most {MAX_PIECES} strings of at most 64 characters"),
              (isinstance(model_name, str) and isinstance(overrides, dict), "the model's name and overrides")]
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    try:
        arch = dataclasses.asdict(model_config(model_name, overrides))
    except ConfigError:
        raise
    except Exception as e:  # a constructor's complaint about a value of the wrong kind
        raise ValueError(f"model {model_name} with overrides {str(overrides)[:80]}: {e}") from None
    stack: list[tuple[str, Any]] = [(f"model {model_name}", arch)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            if len(value) > MAX_COUNT:
                raise ValueError(f"{where} lists {len(value)} entries, more than {MAX_COUNT}")
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, bool) or isinstance(value, str):
            continue
        elif isinstance(value, int):
            most = MAX_COUNT if where.rsplit(".", 1)[-1] in COUNT_KEYS else MAX_WIDTH
            if not -1 <= value <= most:
                raise ValueError(f"{where}={value} is out of range (at most {most})")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}={value} is not a finite number")
    repeats = sum(b.get("repeat", 1) for b in arch.get("blocks", []) if isinstance(b, dict))
    if repeats > MAX_COUNT:
        raise ValueError(f"model {model_name}'s blocks repeat to {repeats} layers, more than {MAX_COUNT}")


def components_from_checkpoint(state: dict[str, Any], where: str = "the checkpoint") -> Components:
    """Components with weights loaded, in eval mode, from a loaded checkpoint dict: built from its config
    (format 3), or from the `meta` block that format 2 stored beside it; `card` the checkpoint's."""
    comps = components_from_description(describe(state), state["model"], where)
    comps.card = state.get("card") or {}
    return comps


def load_components(path: str | Path, device: str = "cpu") -> Components:
    """Read a checkpoint file (weights_only) and build its components, the model on `device` (auto|cpu|cuda[:N])."""
    from .storage.checkpoints import load_checkpoint

    comps = components_from_checkpoint(load_checkpoint(path), str(path))
    comps.model.to(resolve_device(device, "--device"))
    return comps


DEVICES = "auto, cpu, cuda or cuda:N"


def resolve_device(name: str, key: str) -> torch.device:
    """`auto` -> the first CUDA device when there is one, else the CPU; `cpu`, `cuda`, `cuda:N` as torch reads
    them. ConfigError naming `key` (the flag or config key) for anything else, or for CUDA where there is none."""
    from .config import ConfigError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"{key}={name!r} is not a device; use {DEVICES}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"{key}={name!r} is not a device; use {DEVICES}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}={name}: no CUDA device is available here; use cpu or auto")
    return dev
