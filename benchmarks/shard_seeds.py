"""One recipe, one result, whatever the storage (issue #43 §4): the yesno recipe trained from its manifest and
from `speechscale data shard` output of the same 31 training files, on several seeds each; steps and final WER
side by side.

    python -m benchmarks all --only yesno-shards
"""
from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from speechscale.bench.harness import run_cli

from .recipes import RECIPES, run_recipe
from .shared import shared_data


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def bench_shard_seeds(seeds: list[int], shard_size: int = 8, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Rows (source, seed, steps, epochs, WER, CER) and per source the median and range of steps and WER;
    `overrides` go to every run (the test shortens the schedule)."""
    from speechscale.config import ConfigError

    root = shared_data("yesno")
    manifest = root / "manifest.jsonl"
    if not manifest.is_file():
        raise ConfigError(f"{manifest}: the yesno-shards bench trains on ../shared/data/yesno")
    spec = RECIPES["yesno"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "train.jsonl"  # the recipe's training split (its first 31 lines), as absolute paths
        lines = [json.loads(x) for x in manifest.read_text().splitlines() if x.strip()][:31]
        train.write_text("".join(json.dumps({**r, "audio_filepath": str((root / r["audio_filepath"]).resolve())})
                                 + "\n" for r in lines))
        run_cli(["data", "shard", str(train), "--out", str(Path(tmp) / "shards"), "--shard-size", str(shard_size)])
        sources = {"manifest": [], "shards": [f"data.train_manifest={Path(tmp) / 'shards' / 'index.jsonl'}",
                                              "data.train_slice=[]"]}
        for seed in seeds:
            for source, extra in sources.items():
                r = run_recipe("yesno", spec, Path(tmp) / f"{source}-{seed}", [f"trainer.seed={seed}", *overrides, *extra])
                rows.append({"source": source, "seed": seed, "steps": r["steps"], "epochs": r["epochs"],
                             "wer": r["wer"], "cer": r["cer"], "wall_seconds": r["wall_seconds"]})
    summary = {s: {"steps": _spread([r["steps"] for r in rows if r["source"] == s]),
                   "wer": _spread([r["wer"] for r in rows if r["source"] == s])} for s in sources}
    return {"recipe": "configs/yesno.yaml", "shard_size": shard_size, "overrides": list(overrides), "rows": rows,
            "summary": summary}
