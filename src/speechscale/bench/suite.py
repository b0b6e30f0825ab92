"""`speechscale bench all --out DIR`: every bench with settings that finish in about 7 minutes on a
2-core CPU, one JSON per bench (with machine, date, commit and command), PNG plots, and the measured
tables of BENCHMARKS.md regenerated from those JSON files (bench/tables.py)."""
from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

FSDD = Path("../shared/data/fsdd/manifest.jsonl")  # relative to the project, as the recipes' data

# What each bench runs inside `bench all` (the settings are written into its JSON).
SETTINGS: dict[str, dict[str, Any]] = {
    # bf16 only where it finishes: on a CPU without AVX512-BF16/AMX (this machine's AMD EPYC has AVX2), bf16
    # is emulated; one lstm-ctc-tiny bf16 step did not finish in 4 minutes.
    "train": {"models": {"ds2-tiny": ["fp32", "bf16"], "wav2letter+-tiny": ["fp32", "bf16"], "lstm-ctc-tiny": ["fp32"]},
              "batch_size": 8, "seconds": 2.0, "steps": 8, "warmup": 2},
    "loader": {"workers": [0, 1, 2], "augment": [False, True], "limit": 120, "clip_seconds": 12.0,
               "batch_seconds": 60.0, "repeats": 3},
    "scaling": {"models": ["ds2-tiny", "wav2letter+-tiny"], "procs": [1, 2], "batch_size": 8, "seconds": 2.0,
                "steps": 5, "warmup": 2},
    "straggler": {"procs": 4, "epochs": 4, "slowdown": 2.0,
                  "strategies": ["allreduce", "adpsgd-fixed_ring", "adpsgd-delay_by_one"],
                  "config": "configs/yesno.yaml", "overrides": ["data.max_batch_size=2"]},
    "planner": {"validate_models": ["ds2-tiny", "wav2letter+-tiny"], "world": 2},
    # shipped recipes trained to their end (the figures the recipe tests used to re-measure)
    "recipes": {"recipes": ["yesno", "ldc93s1"]},
}
BENCHES = tuple(SETTINGS)


def _train(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from ..cli import _default_manifest
    from .throughput import bench_train

    rows = []
    for model, precisions in s["models"].items():
        rows += bench_train(model, s["batch_size"], s["seconds"], s["steps"], s["warmup"],
                            _default_manifest(None) or None, precisions=tuple(precisions))
    from .plots import plot_train

    plot_train(rows, out / "train.png")
    return rows


def _loader(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from ..data.shards import write_shards
    from .loader import bench_loader_interleaved, flac_corpus

    if not FSDD.is_file():
        raise FileNotFoundError(f"{FSDD}: the loader bench reads FSDD from ../shared/data")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = flac_corpus(FSDD, tmp, 16000, s["limit"], s["clip_seconds"])
        write_shards(str(manifest), Path(tmp) / "shards", shard_size=20)
        rows = bench_loader_interleaved([str(manifest), str(Path(tmp) / "shards" / "index.jsonl")], s["workers"],
                                        s["augment"], batch_seconds=s["batch_seconds"], repeats=s["repeats"])
    from .plots import plot_loader

    plot_loader(rows, out / "loader.png")
    return rows


def _scaling(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from ..cli import _default_manifest
    from .scaling import bench_scaling

    rows = []
    for model in s["models"]:
        rows += bench_scaling(model, tuple(s["procs"]), s["batch_size"], s["seconds"], s["steps"], s["warmup"],
                              1, _default_manifest(None) or None)
    from .plots import plot_scaling

    plot_scaling(rows, out / "scaling.png")
    return rows


def _straggler(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from .straggler import bench_straggler

    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_straggler(s["procs"], s["epochs"], s["slowdown"], s["config"], tmp, s["overrides"],
                               s["strategies"])
        (out / "straggler.png").write_bytes((Path(tmp) / "straggler.png").read_bytes())
    return rows


def _planner(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from ..planning.calibration import GOAL, cases
    from ..planning.validate import validate
    from .plots import plot_calibration

    result = {"goal": GOAL, "calibration": cases(), "validation": validate(tuple(s["validate_models"]), world=s["world"])}
    plot_calibration(result["calibration"], out / "planner.png")
    return result


def _recipes(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from .recipes import bench_recipes

    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_recipes(s["recipes"], Path(tmp))
    from .plots import plot_recipes

    plot_recipes(rows, out / "recipes.png")
    return rows


RUNNERS: dict[str, Callable[[dict[str, Any], Path], Any]] = {
    "train": _train, "loader": _loader, "scaling": _scaling, "straggler": _straggler, "planner": _planner,
    "recipes": _recipes}


def run_all(out: Path, only: list[str] | None = None, command: list[str] | None = None,
            report: Callable[[str, float], None] | None = None) -> dict[str, dict[str, Any]]:
    """Run the benches (all, or `only`), writing OUT/NAME.json and OUT/NAME.png after each; returns the
    documents by name. A bench that fails is written as {"error": ...} and the others still run."""
    from .harness import write_json

    out.mkdir(parents=True, exist_ok=True)
    docs = {}
    for name in only or list(BENCHES):
        started = time.perf_counter()
        try:
            results: Any = RUNNERS[name](SETTINGS[name], out)
        except Exception as e:  # one broken bench must not lose the others' figures
            log.error("bench %s failed: %s", name, e)
            results = {"error": f"{type(e).__name__}: {e}"}
        seconds = round(time.perf_counter() - started, 1)
        docs[name] = write_json(out / f"{name}.json", results, command, seconds, SETTINGS[name])
        if report:
            report(name, seconds)
    return docs


def load_docs(folder: Path) -> dict[str, dict[str, Any]]:
    """The bench JSON files in `folder`, by bench name."""
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in BENCHES
            if (folder / f"{name}.json").is_file()}
