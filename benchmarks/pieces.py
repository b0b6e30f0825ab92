"""Word pieces against characters: one recipe trained with each output unit, side by side on the same seed.

    python -m benchmarks.pieces [--recipe demo] [--arms 0,64,128] [--seed 1] [--work runs/pieces]
        [--out docs/figures/bench-all/pieces-demo.json] [OVERRIDE ...]

Each arm trains the recipe (the demo's by default: ds2-tiny on the synthesized corpus, scored on its test voice) with
`text.pieces=N` (0: the alphabet's characters) and the same seed, then reports its WER and CER on the validation
manifest, its training minutes, and how long its targets are: the mean number of output units a training transcript
becomes, against its characters. Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit


def run_arm(recipe: str, pieces: int, seed: int, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Train one arm; its summary's figures and its targets' length."""
    from speechscale.data.manifest import SkipReport, iter_manifest
    from speechscale.recipe import load_recipe
    from speechscale.training.trainer import Trainer

    shutil.rmtree(out, ignore_errors=True)  # each arm trains from its start: a rerun replaces the last one's
    cfg = load_recipe(recipe, [f"text.pieces={pieces}", f"trainer.seed={seed}", f"trainer.out_dir={out}",
                               "trainer.progress=false", "trainer.checkpoint_every_steps=0", *overrides])
    trainer = Trainer(cfg)
    tok, normalize = trainer.comps.tokenizer, trainer.comps.normalizer
    texts = [normalize(u.raw_text) for u in iter_manifest(cfg.data.train_manifest, SkipReport("train"),
                                                           check_files=False)]
    units = sum(len(tok.encode(t)) for t in texts)
    s = trainer.fit()
    return {"pieces": pieces, "units": tok.vocab_size - 1, "seed": seed, "wer": s["wer"], "cer": s["cer"],
            "epochs": s["epoch"], "minutes": round(s["minutes"], 2), "audio_s_per_s": s.get("audio_s_per_s"),
            "target_units": round(units / len(texts), 2), "target_chars": round(sum(map(len, texts)) / len(texts), 2),
            "model": cfg.model.name, "stopped_by": s.get("stopped_by")}


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.harness import write_json

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", default="demo", help="the recipe each arm trains")
    p.add_argument("--arms", default="0,64,128", help="comma-separated text.pieces values (0: characters)")
    p.add_argument("--seed", type=int, default=1, help="the training seed of every arm")
    p.add_argument("--work", default="runs/pieces", help="the runs go here")
    p.add_argument("--out", default="docs/figures/bench-all/pieces-demo.json")
    p.add_argument("overrides", nargs="*", help="recipe overrides for every arm (key=value)")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    rows = []
    for n in [int(a) for a in args.arms.split(",")]:
        rows.append(run_arm(args.recipe, n, args.seed, Path(args.work) / f"pieces{n}", args.overrides))
        print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"recipe": args.recipe, "overrides": args.overrides, "runs": rows},
               ["python", "-m", "benchmarks.pieces", *sys.argv[1:]], round(time.monotonic() - started, 1),
               {"work": args.work, "arms": args.arms, "seed": args.seed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
