"""Checkpoints: plain data and tensors only, written atomically, read back by a reader that builds nothing else.

A checkpoint holds the weights, the config as a dict (which describes the model, its features and text),
the optimizer state, the loss scaler, the training state (epoch, step, data position) and every rank's RNG
and strategy state, so that a model can be used or a run continued (on any number of ranks) from it alone;
state.py gives the layout. A run's folder keeps the last K `step-N.pt`
files, `last.pt` and a `latest` pointer; resuming picks the newest one that loads.
"""
from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any

import torch

from . import files as storage
from .deepspeech_pytorch import LIGHTNING, is_deepspeech_pytorch, to_checkpoint
from .errors import CheckpointError, CheckpointWriteError, ModelFileError, error_line  # noqa: F401 - named from here
from .untrusted import (
    POINTER_BYTES,
    Structure,
    archive_records,
    check_layout,
    read_archive,
    read_model_bytes,
)

log = logging.getLogger(__name__)

def _serialize(state: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` atomically to a local path or fsspec URL (storage.write_bytes)."""
    storage.write_bytes(path, _serialize(state))


REQUIRED_KEYS = ("model", "config")  # what every speechscale checkpoint holds


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint (local path or URL) that may come from a stranger, on the CPU: its bytes bounded (a regular
    file, or a URL read with timeouts), its archive checked record by record, and its structure read by a reader
    that knows only mappings, tensors and plain data, each tensor checked against its bytes before it is made
    (untrusted.py; torch.load's weights_only list allows more). ModelFileError in one line otherwise."""
    data = read_model_bytes(path, "checkpoint")
    if not data:
        raise ModelFileError(f"{path}: empty file (0 bytes), not a checkpoint")
    structure = read_archive(data, archive_records(data, path), path, LIGHTNING)
    if is_deepspeech_pytorch(structure.tree):  # deepspeech.pytorch's, read as ours
        tree = to_checkpoint(structure.tree, path, data)
        structure = Structure(tree, sum(v.numel() for v in tree["model"].values()), structure.tensor_bytes)
    elif structure.foreign:
        raise ModelFileError(f"{path} is not a speechscale checkpoint: it names {structure.foreign[0]}, which a "
                             "speechscale checkpoint never holds (refused without running or building it)")
    check_layout(structure, path)
    return structure.tree


# ---- a directory of checkpoints: keep the last K, a pointer to the newest, resume from the newest good one

POINTER = "latest"


def checkpoints_folder(path: str | Path) -> str | Path:
    """A run folder's (`trainer.out_dir`) checkpoints/ folder, else `path` as it is (a checkpoints folder, a URL)."""
    inside = Path(path) / "checkpoints"
    return inside if not storage.is_remote(path) and inside.is_dir() else path


def model_path(path: str | Path) -> str | Path:
    """`path` itself (a URL as it is), or for a run folder (`trainer.out_dir`) its checkpoints/best.pt, else its
    last.pt; ConfigError for a folder that holds neither."""
    from ..config import ConfigError

    if storage.is_remote(path):
        return str(path)
    path = Path(path)
    if not path.is_dir():
        return path
    for name in ("best.pt", "last.pt"):
        if (path / "checkpoints" / name).is_file():
            confined(path, path / "checkpoints" / name)
            return path / "checkpoints" / name
    raise ConfigError(f"{path}: a folder without checkpoints/best.pt or checkpoints/last.pt; give a run folder or "
                      "a checkpoint or exported file")


def holds_training_state(path: str | Path) -> bool:
    """Whether local `path` is a checkpoint a run resumes from (it holds the training state): its structure is read
    as load_checkpoint checks it, no tensor built."""
    try:
        data = read_model_bytes(path, "checkpoint")
        tree = read_archive(data, archive_records(data, path), path).tree
    except CheckpointError:  # unreadable, or not torch's: not a run's checkpoint
        return False
    return isinstance(tree, dict) and "training" in tree


def _step_name(step: int) -> str:
    return f"step-{step:09d}.pt"


def write_pointer(ckpt_dir: str | Path, name: str) -> None:
    """Atomically point `ckpt_dir/latest` at checkpoint file `name` (written after the file itself)."""
    storage.write_bytes(storage.join(ckpt_dir, POINTER), (name + "\n").encode())


def save_rotating(ckpt_dir: str | Path, state: dict[str, Any], step: int, keep: int) -> str:
    """Write `step-N.pt`, then `last.pt` (a copy of it), then the `latest` pointer, each atomically; delete all but the
    newest `keep` step files. A crash at any point leaves the previous checkpoint and pointer intact."""
    name = _step_name(step)
    data = _serialize(state)
    path = storage.join(ckpt_dir, name)
    storage.write_bytes(path, data)
    storage.copy(path, storage.join(ckpt_dir, "last.pt"))  # a link or server-side copy: written once
    write_pointer(ckpt_dir, name)
    steps = storage.list_names(ckpt_dir, "step-*.pt")
    for old in steps[: max(0, len(steps) - max(1, keep))]:
        storage.remove(storage.join(ckpt_dir, old))
    return path


def save_checkpoint_in(ckpt_dir: str | Path, state: dict[str, Any], name: str | None, step: int, keep: int) -> str:
    """`ckpt_dir/name` when a name is given (e.g. best.pt), else the rotating step file (`save_rotating`)."""
    if name is None:
        return save_rotating(ckpt_dir, state, step, keep)
    path = storage.join(ckpt_dir, name)
    save_checkpoint(path, state)
    return path


def newest_checkpoint(ckpt_dir: str | Path) -> tuple[str, dict[str, Any]] | None:
    """The newest checkpoint in `ckpt_dir` that loads: the pointer's target first, then `last.pt` when it is no
    older than the step files left, then step files from the newest down. A torn, damaged or unreadable file is
    logged and passed over.

    `last.pt` is written as a copy of the newest step file: on an object store (or a disk without hard links) a
    separate copy, which may be whole where the step file's bytes were damaged."""
    names = [n for n in [_pointed(ckpt_dir)] if n]
    names = list(dict.fromkeys(names + list(reversed(storage.list_names(ckpt_dir, "step-*.pt")))))
    names = list(dict.fromkeys(names[:1] + ["last.pt"] + names[1:]))  # in order, without repeats
    older: tuple[str, dict[str, Any]] | None = None  # last.pt when a step file left is newer: the last resort
    for i, name in enumerate(names):
        path = storage.join(ckpt_dir, name)
        try:
            confined(ckpt_dir, path)
            state = load_checkpoint(path)
        except CheckpointError as e:
            log.warning("passing over %s: %s", path, e)
            continue
        if name == "last.pt" and _training_step(state) < max(map(_step_of, names[i + 1:]), default=-1):
            older = path, state
            continue
        return path, state
    return older


CHECKPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}\.pt")


def _pointed(ckpt_dir: str | Path) -> str | None:
    """The file name the folder's `latest` pointer holds, when it is one: a plain name of a .pt file in the folder
    (never a path, so a stranger's run folder cannot point elsewhere); None, with a warning, otherwise."""
    pointer = storage.join(ckpt_dir, POINTER)
    try:
        if not storage.exists(pointer):
            return None
        raw = storage.read_bytes(pointer)[:POINTER_BYTES + 1]
        name = raw.decode().strip()
    except (OSError, UnicodeDecodeError) as e:
        log.warning("passing over the pointer %s: %s", pointer, error_line(e))
        return None
    if len(raw) > POINTER_BYTES or not CHECKPOINT_NAME.fullmatch(name):
        log.warning("passing over the pointer %s: it names %r, not a checkpoint file in its folder", pointer,
                    name[:80])
        return None
    return name


def confined(folder: str | Path, path: str | Path) -> None:
    """ModelFileError unless local `path`, links resolved, lies inside `folder` (a run folder's files may not lead
    out of it); URLs are confined by their names alone."""
    if storage.is_remote(path):
        return
    inside = Path(folder).resolve()
    target = Path(path).resolve()
    if target != inside and inside not in target.parents:
        raise ModelFileError(f"{path}: a link out of its run folder (to {str(target)[:120]}); refused")


def _step_of(name: str) -> int:
    """The step a `step-N.pt` name says (-1 for another name)."""
    return int(name[5:-3]) if name.startswith("step-") and name[5:-3].isdigit() else -1


def _training_step(state: dict[str, Any]) -> int:
    training = state.get("training")
    return int(training.get("step", -1)) if isinstance(training, dict) else -1
