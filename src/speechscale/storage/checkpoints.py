"""Checkpoints: plain data and tensors only, written atomically, loaded with `weights_only=True`.

A checkpoint holds the weights, the config as a dict (which describes the model, its features and text),
the optimizer state, the loss scaler, the training state (epoch, step, data position) and every rank's RNG
and strategy state, so that a model can be used or a run continued (on any number of ranks) from it alone;
state.py gives the layout. A run's folder keeps the last K `step-N.pt`
files, `last.pt` and a `latest` pointer; resuming picks the newest one that loads.
"""
from __future__ import annotations

import io
import logging
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from . import files as storage

log = logging.getLogger(__name__)

def _serialize(state: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` atomically to a local path or fsspec URL (storage.write_bytes)."""
    storage.write_bytes(path, _serialize(state))


class CheckpointError(RuntimeError):
    """The checkpoint is missing, torn or not a speechscale checkpoint."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (a full disk, a quota, a lost mount): the run stops on every rank."""


REQUIRED_KEYS = ("model", "config")  # what every speechscale checkpoint holds


def error_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type when the message is blank."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load a checkpoint (local path or fsspec URL) with `weights_only=True` (never unpickles code)."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file") from None
    except Exception as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {error_line(e)}") from e
    if not data:
        raise CheckpointError(f"{path}: empty file (0 bytes), not a checkpoint")
    if not data.startswith((b"PK\x03\x04", b"\x80")):  # neither torch's zip format nor its legacy pickle
        raise CheckpointError(f"{path} is not a checkpoint: not a file torch.save writes (a checkpoint is the .pt "
                              "file `speechscale train` writes)")
    damaged = damaged_record(data)
    if damaged:
        raise CheckpointError(f"{path} is damaged: its record {damaged} does not match the CRC-32 written with it "
                              f"(the bytes changed after it was saved); resume=auto passes over such files")
    try:
        with warnings.catch_warnings():  # torch's note on foreign pickle protocols adds nothing here
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:  # weights_only refused an object: never unpickle it
        raise CheckpointError(f"{path} is not a speechscale checkpoint: it holds Python objects other than "
                              f"tensors and plain data, which speechscale never unpickles") from None
    except Exception as e:
        raise CheckpointError(f"{path} is not a speechscale checkpoint (torch cannot read it: {error_line(e)}); "
                              f"a torn write? resume=auto passes over such files") from e
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is not a speechscale checkpoint (no {', '.join(missing)} in it)")
    return state


def damaged_record(data: bytes) -> str | None:
    """The first record of torch's zip format in `data` whose bytes fail the CRC-32 the writer stored (torch.load
    does not check them: a flipped bit loads as a changed weight); None when all hold, or for the legacy format.
    A record stored with CRC 0 is not checked (torch.serialization.set_crc32_options(False) writes no CRCs); a zip
    too broken to list is left to torch.load's own error."""
    if not data.startswith(b"PK\x03\x04"):
        return None
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - a torn file: torch.load names it
        return None
    with archive:
        for record in archive.infolist():
            if record.CRC == 0 and record.file_size:
                continue
            try:
                with archive.open(record) as f:  # zipfile compares the CRC when the record's end is read
                    while f.read(1 << 22):
                        pass
            except zipfile.BadZipFile:
                return record.filename
            except Exception:  # noqa: BLE001 - torn inside a record: torch.load names it
                return None
    return None


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
            return path / "checkpoints" / name
    raise ConfigError(f"{path}: a folder without checkpoints/best.pt or checkpoints/last.pt; give a run folder or "
                      "a checkpoint or exported file")


def holds_training_state(path: str | Path) -> bool:
    """Whether local `path` is a checkpoint a run resumes from (it holds the training state): reading it maps the
    tensors without loading them."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            if f.read(4) != b"PK\x03\x04":
                return False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # unreadable, or not torch's: not a run's checkpoint
        return False
    return isinstance(state, dict) and "training" in state


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
    names: list[str] = []
    pointer = storage.join(ckpt_dir, POINTER)
    if storage.exists(pointer):
        names.append(storage.read_bytes(pointer).decode().strip())
    names = list(dict.fromkeys(names + list(reversed(storage.list_names(ckpt_dir, "step-*.pt")))))
    names = list(dict.fromkeys(names[:1] + ["last.pt"] + names[1:]))  # in order, without repeats
    older: tuple[str, dict[str, Any]] | None = None  # last.pt when a step file left is newer: the last resort
    for i, name in enumerate(names):
        path = storage.join(ckpt_dir, name)
        try:
            state = load_checkpoint(path)
        except CheckpointError as e:
            log.warning("passing over %s: %s", path, e)
            continue
        if name == "last.pt" and _training_step(state) < max(map(_step_of, names[i + 1:]), default=-1):
            older = path, state
            continue
        return path, state
    return older


def _step_of(name: str) -> int:
    """The step a `step-N.pt` name says (-1 for another name)."""
    return int(name[5:-3]) if name.startswith("step-") and name[5:-3].isdigit() else -1


def _training_step(state: dict[str, Any]) -> int:
    training = state.get("training")
    return int(training.get("step", -1)) if isinstance(training, dict) else -1
