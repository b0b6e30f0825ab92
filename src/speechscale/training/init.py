"""`trainer.init_from`: start a run from another run's weights (fine-tuning, speaker adaptation, another language).

Only the weights come over: the optimizer, schedule, step count and data position start fresh, so the new
run's recipe (its data, epochs, learning rate) is what trains. The checkpoint must describe the same input
(features) and the same model; anything else is a one-line error before training starts. The alphabet may
differ, and so may the word pieces (or characters become pieces): the output layer keeps the trained row of every
symbol both have (the blank among them), and a symbol only this run has starts from the model's own initialization.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

import torch
from torch import nn

from ..components import components_from_description, describe
from ..config import Config, ConfigError, to_dict
from ..data.pieces import WORD_START
from ..models.registry import model_config
from ..storage.checkpoints import load_checkpoint, model_path

log = logging.getLogger(__name__)

# feature fields that change what the model sees; speaker_prior* only matter for a file without its speaker
_FEATURE_KEYS = ("kind", "sample_rate", "window_ms", "hop_ms", "n_mels", "normalize", "remove_dc", "preemphasis",
                 "running_prior_frames")


def _differences(saved: dict[str, Any], cfg: Config) -> list[str]:
    """What the checkpoint's config (`saved`) and this run's `cfg` disagree on, among the fields the weights
    depend on (the alphabet aside: its rows are mapped)."""
    out = []
    if saved.get("model", {}).get("name") != cfg.model.name:  # overrides: the weights' shapes are checked
        out.append(f"model.name {saved['model'].get('name')!r} (this run: {cfg.model.name!r})")
    feats = saved.get("features", {})
    out += [f"features.{k} {feats.get(k)!r} (this run: {getattr(cfg.features, k)!r})"
            for k in _FEATURE_KEYS if k in feats and feats[k] != getattr(cfg.features, k)]
    return out


def resume_differences(saved: dict[str, Any], cfg: Config) -> list[str]:
    """What a checkpoint's config (`saved`) and this run's `cfg` disagree on that a resume cannot carry over: the
    model (its name and resolved architecture), the features and the optimizer."""
    out = _differences(saved, cfg)
    model = saved.get("model", {})
    if not out and model.get("name") == cfg.model.name:
        try:
            before = dataclasses.asdict(model_config(cfg.model.name, model.get("overrides") or {}))
        except ConfigError:  # overrides this version no longer reads: the weights' shapes will tell
            before = None
        now = dataclasses.asdict(model_config(cfg.model.name, cfg.model.overrides))
        if before is not None and before != now:
            changed = sorted(k for k in now if before.get(k) != now[k])
            out += [f"model.overrides {k}={before.get(k)!r} (this run: {now[k]!r})" for k in changed]
    optim = saved.get("optim", {}).get("name")
    if optim is not None and optim != cfg.optim.name:
        out.append(f"optim.name {optim!r} (this run: {cfg.optim.name!r})")
    return out


def output_layer(model: nn.Module, vocab_size: int) -> str:
    """The name of the module that maps to the `vocab_size` output classes: the last linear layer (or
    pointwise Conv1d) with that many outputs."""
    name = ""
    for n, m in model.named_modules():
        if (isinstance(m, nn.Linear) and m.out_features == vocab_size) or (
                isinstance(m, nn.Conv1d) and m.out_channels == vocab_size and m.kernel_size == (1,)):
            name = n
    if not name:
        raise ValueError(f"{type(model).__name__} has no layer with {vocab_size} outputs")
    return name


def symbol_rows(saved: Sequence[str], units: Sequence[str]) -> list[int]:
    """For each output class of `units` (id 0 the blank, then its symbols: an alphabet's characters or word
    pieces), its row in a model trained on the units `saved`, or -1 for a symbol `saved` lacks."""
    rows = {u: i + 1 for i, u in enumerate(saved)}
    return [0] + [rows.get(u, -1) for u in units]


def output_units(text: dict[str, Any]) -> list[str]:
    """A text config's output units after the blank (plain data, as a checkpoint stores it): its word pieces, else
    its alphabet's characters, the space written as a word's start so that it maps onto that piece."""
    return list(text.get("piece_list") or [WORD_START if c == " " else c for c in text.get("alphabet", "")])


def _listed(units: list[str], most: int = 20) -> str:
    if not units:
        return "none"
    return repr("".join(units)) if all(len(u) == 1 for u in units) else \
        ", ".join(map(repr, units[:most])) + (f" and {len(units) - most} more" if len(units) > most else "")


def freeze(model: nn.Module, prefixes: list[str]) -> int:
    """Stop the parameters named by `prefixes` (a name, or the start of one up to a dot) from training; the number
    of values frozen. ConfigError in one line for a prefix that names none."""
    def named(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    params = dict(model.named_parameters())
    for prefix in prefixes:
        if not any(named(n, prefix) for n in params):
            tops = sorted({n.split(".", 1)[0] for n in params})
            raise ConfigError(f"trainer.freeze: {prefix!r} names no parameter of this model; its parts: {', '.join(tops)}")
    frozen = [p for n, p in params.items() if any(named(n, prefix) for prefix in prefixes)]
    for p in frozen:
        p.requires_grad_(False)
    return sum(p.numel() for p in frozen)


def init_weights(model: nn.Module, path: str, cfg: Config) -> None:
    """Load the weights of the checkpoint at `path` into `model` (built from `cfg`), the output rows mapped by
    symbol when the alphabets differ; ConfigError in one line when the checkpoint cannot be read or does not fit
    this run's model."""
    try:
        path = str(model_path(path))  # a run folder: its best.pt, else its last.pt
    except ConfigError:
        raise ConfigError(f"trainer.init_from: {path}: a folder without checkpoints/best.pt or checkpoints/last.pt"
                          ) from None
    try:
        ckpt = load_checkpoint(path)
    except Exception as e:  # CheckpointError: not found, not a checkpoint, torn
        raise ConfigError(f"trainer.init_from: {e}") from None
    if "config" not in ckpt:
        raise ConfigError(f"trainer.init_from: {path} is an older checkpoint format without its config")
    try:
        components_from_description(describe(ckpt), where=path)  # its config typed and in range before any of it is used
    except ConfigError as e:
        raise ConfigError(f"trainer.init_from: {path}: {e}") from None
    wrong = _differences(ckpt["config"], cfg)
    if wrong:
        raise ConfigError(f"trainer.init_from: {path} was trained with {'; '.join(wrong)}")
    saved = {k: v for k, v in ckpt["model"].items() if isinstance(v, torch.Tensor)}
    own = model.state_dict()
    units = output_units(to_dict(cfg.text))
    old = output_units(ckpt["config"].get("text") or to_dict(cfg.text))  # a checkpoint without them: this run's
    head = output_layer(model, len(units) + 1)
    mapped = {k for k in own if k.startswith(head + ".")} if old != units else set()
    expected = {k: tuple(v.shape) for k, v in own.items()}
    found = {k: tuple(v.shape) for k, v in saved.items()}
    for k in mapped:  # the output layer fits with as many rows as the saved units have classes
        if found.get(k) == (len(old) + 1, *expected[k][1:]):
            found[k] = expected[k]
    if expected != found:
        odd = sorted(set(expected) ^ set(found)) or [k for k in expected if expected[k] != found[k]]
        raise ConfigError(f"trainer.init_from: {path} does not fit model {cfg.model.name} with these overrides "
                          f"({len(odd)} tensors differ, e.g. {odd[0]})")
    if mapped:
        rows = torch.tensor(symbol_rows(old, units))
        kept = rows >= 0
        for k in mapped:  # [vocab, ...]: trained rows where the symbol was known, this model's own elsewhere
            value = own[k].clone()
            value[kept] = saved[k][rows[kept]].to(value.dtype)
            saved[k] = value
        new = [u for u in units if u not in old]
        dropped = [u for u in old if u not in units]
        log.info("trainer.init_from: other output units; %d of %d output classes keep their trained rows, new: %s, "
                 "not carried over: %s", int(kept.sum()), len(rows), _listed(new), _listed(dropped))
    model.load_state_dict(saved)
