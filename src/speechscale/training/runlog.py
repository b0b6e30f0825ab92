"""The run log: OUT/metrics.jsonl (one JSON object a line), mirrored to TensorBoard, and sample traces.

Every line has `kind`, `time` (Unix seconds) and `step` (optimizer steps taken). Reports and plots may rely
on the keys in SCHEMA; other keys may be added.

- `start`, when a process starts training (a fresh run, a resume or a restart by torchrun): `epoch`,
  `samples`, `world_size`, `strategy`, `precision`, `resumed_from` (the checkpoint, or null).
- `stop`, when it ends without crashing: `epoch`, `samples`, `stopped_by` (null: the planned end), `minutes`.
- `train`, every trainer.log_every steps: `epoch` (epochs completed), `lr`, `samples` (samples trained on
  since the run began, all ranks of a lockstep strategy); `loss` (mean over the finite
  steps since the last line; absent when there were none), `loss_scale` (fp16), `peak_mem_mb` (GPUs),
  `audio_s_per_s` (audio seconds this rank trained per second since the last line), `data_wait_fraction`
  (the part of that time its loop waited for the loader) and `host_ms_per_step` (the host's own wall time per
  step: on a GPU, where the step does not sync, the time to issue its work).
- `val`, at each validation: `epoch`, `train_loss`, `val_loss` (CTC per target token, as `train_loss`),
  `wer`, `cer`, `utterances`, `skipped`, and the run's counters: `nonfinite_loss`, `nonfinite_grad` (steps
  skipped), `bad_audio`, `too_short`, `too_long`, `feature_error`, `bad_text` (utterances skipped), `dropped_tail`. ADPSGD adds
  `consensus_distance` (mean L2 distance of the learners from their average); its rings add `exchanges`
  and `skipped_exchanges` (rank 0's rounds). With `data.mix`, `samples_<domain>` is each domain's samples in
  the epoch.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .precision import Precision

log = logging.getLogger(__name__)

SCHEMA: dict[str, set[str]] = {
    "start": {"kind", "time", "step", "epoch", "samples", "world_size", "strategy", "precision", "resumed_from"},
    "stop": {"kind", "time", "step", "epoch", "samples", "stopped_by", "minutes"},
    "train": {"kind", "time", "step", "epoch", "lr", "samples"},
    "val": {"kind", "time", "step", "epoch", "train_loss", "val_loss", "wer", "cer", "utterances", "skipped",
            "nonfinite_loss",
            "nonfinite_grad", "bad_audio", "too_short", "too_long", "feature_error", "bad_text"},
}


class RunLog:
    """Appends lines to OUT/metrics.jsonl and scalars to OUT/tensorboard when TensorBoard is installed."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / "metrics.jsonl"
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out_dir / "tensorboard"))
        except Exception as e:  # tensorboard missing or broken: the JSONL log still works
            log.warning("TensorBoard logging off: %s", e)

    def write(self, kind: str, step: int, values: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"kind": kind, "time": time.time(), **values, "step": step}) + "\n")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.tb.add_scalar(f"{kind}/{k}", v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def write_run_config(out_dir: Path, config: dict[str, Any], remote_out: str | None) -> None:
    """OUT/config.json: the resolved config of the run (also beside remote checkpoints)."""
    from .. import storage

    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config, indent=2)
    (out_dir / "config.json").write_text(text)
    if remote_out:
        storage.write_bytes(storage.join(remote_out, "config.json"), text.encode())


def trace_samples(out_dir: Path, rank: int, row: dict[str, Any]) -> None:
    """trainer.trace_samples: append one step's sample ids of this rank (tests check exactly-once use)."""
    with (out_dir / f"samples-rank{rank}.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")


def train_row(epoch: int, lr: float, loss: float | None, precision: "Precision", device: torch.device,
              samples: int = 0) -> dict[str, Any]:
    """One `train` row of metrics.jsonl (see SCHEMA); on a GPU it also starts a new peak-memory window."""
    row: dict[str, Any] = {"epoch": epoch, "lr": lr, "samples": samples}
    if loss is not None:
        row["loss"] = loss
    if precision.scaling:
        row["loss_scale"] = precision.loss_scale()
    if device.type == "cuda":
        row["peak_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2 ** 20
        torch.cuda.reset_peak_memory_stats(device)
    return row
