"""Checkpoints: plain data and tensors only, written atomically, loaded with `weights_only=True`.

A checkpoint holds the weights, the config as a dict, tokenizer and feature config, optimizer state, loss
scaler, epoch, step, samples consumed, world size and every rank's RNG states, so that a model can be used
or a run continued (on any number of ranks) from it alone. A run's folder keeps the last K `step-N.pt`
files, `last.pt` and a `latest` pointer; resuming picks the newest one that loads.
"""
from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: sampler position in samples, per-rank RNG states, world size


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states as tensors/plain data (weights_only-safe)."""
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]),
                  int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], n[1].numpy().astype(np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(state["torch"])


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` atomically: temp file in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save({"format_version": FORMAT_VERSION, **state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointError(RuntimeError):
    """The checkpoint is missing, torn or not a speechscale checkpoint."""


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load a checkpoint with `weights_only=True` (never unpickles code)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"cannot load checkpoint {path}: {e}") from e
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path} is not a speechscale checkpoint")
    return state


# ---- a directory of checkpoints: keep the last K, a pointer to the newest, resume from the newest good one

POINTER = "latest"


def _step_name(step: int) -> str:
    return f"step-{step:09d}.pt"


def write_pointer(ckpt_dir: Path, name: str) -> None:
    """Atomically point `ckpt_dir/latest` at checkpoint file `name` (written after the file itself)."""
    tmp = ckpt_dir / f".{POINTER}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt_dir / POINTER)


def save_rotating(ckpt_dir: str | Path, state: dict[str, Any], step: int, keep: int) -> Path:
    """Write `step-N.pt` atomically, then `last.pt` (a hard link to it where the file system allows),
    then the `latest` pointer; delete all but the newest `keep` step files. A crash at any point leaves
    the previous checkpoint and pointer intact."""
    ckpt_dir = Path(ckpt_dir)
    path = ckpt_dir / _step_name(step)
    save_checkpoint(path, state)
    last_tmp = ckpt_dir / f".last.pt.tmp.{os.getpid()}"
    try:
        os.link(path, last_tmp)
    except OSError:  # no hard links here: a second full write
        save_checkpoint(last_tmp, state)
    os.replace(last_tmp, ckpt_dir / "last.pt")
    write_pointer(ckpt_dir, path.name)
    steps = sorted(ckpt_dir.glob("step-*.pt"))
    for old in steps[: max(0, len(steps) - max(1, keep))]:
        old.unlink(missing_ok=True)
    return path


def newest_checkpoint(ckpt_dir: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint in `ckpt_dir` that loads: the pointer's target first, then step files from
    the newest down, then `last.pt`. A torn or unreadable file is logged and passed over."""
    ckpt_dir = Path(ckpt_dir)
    candidates: list[Path] = []
    pointer = ckpt_dir / POINTER
    if pointer.is_file():
        candidates.append(ckpt_dir / pointer.read_text().strip())
    candidates += sorted(ckpt_dir.glob("step-*.pt"), reverse=True) + [ckpt_dir / "last.pt"]
    seen: set[Path] = set()
    for path in candidates:
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        try:
            return path, load_checkpoint(path)
        except CheckpointError as e:
            log.warning("passing over %s: %s", path, e)
    return None
