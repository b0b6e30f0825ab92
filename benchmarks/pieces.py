"""Word pieces against characters: one recipe trained with each output unit, side by side on the same seed.

    python -m benchmarks.pieces [--recipe demo] [--arms 0,64,128] [--seed 1] [--work runs/pieces]
        [--out docs/figures/bench-all/pieces-demo.json] [OVERRIDE ...]

Each arm trains the recipe (the demo's by default: ds2-tiny on the synthesized corpus, scored on its test voice) with
`text.pieces=N` (0: the alphabet's characters) and the same seed, then reports its WER and CER on the validation
manifest (greedy; then a beam search with a 3-gram LM of the training transcripts, at a word bonus of 0 and of 1), its
training minutes, and how long its targets are: the mean number of output units a training transcript becomes,
against its characters. An arm whose run in --work finished is scored again, not retrained (its row says so).
Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit


def run_arm(recipe: str, pieces: int, seed: int, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Train one arm (unless its run in `out` finished); its validation figures and its targets' length."""
    from speechscale.data.manifest import SkipReport, iter_manifest
    from speechscale.recipe import load_recipe
    from speechscale.training.trainer import Trainer

    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()] \
        if (out / "metrics.jsonl").is_file() else []
    reused = bool(rows) and rows[-1]["kind"] == "stop" and (out / "checkpoints" / "last.pt").is_file()
    args = [f"text.pieces={pieces}", f"trainer.seed={seed}", f"trainer.out_dir={out}", "trainer.progress=false",
            "trainer.checkpoint_every_steps=0", *overrides]
    if reused:
        args.append("trainer.resume=auto")  # the finished run's own pieces, read from its checkpoint
    else:
        shutil.rmtree(out, ignore_errors=True)  # each arm trains from its start: a rerun replaces the last one's
    cfg = load_recipe(recipe, args)
    trainer = Trainer(cfg)
    tok, normalize = trainer.comps.tokenizer, trainer.comps.normalizer
    texts = [normalize(u.raw_text) for u in iter_manifest(cfg.data.train_manifest, SkipReport("train"),
                                                           check_files=False)]
    units = sum(len(tok.encode(t)) for t in texts)
    if reused:  # trained-at: the commit that trained it (written below; by hand for a run made before this was)
        trained_at = (out / "trained-at").read_text().strip() if (out / "trained-at").is_file() else "unknown"
        val, stop = [r for r in rows if r["kind"] == "val"][-1], rows[-1]
        train = [r for r in rows if r["kind"] == "train"]
        s = {"wer": val["wer"], "cer": val["cer"], "epoch": stop["epoch"], "minutes": stop["minutes"],
             "audio_s_per_s": round(sum(r["audio_s_per_s"] for r in train) / len(train), 2) if train else None,
             "stopped_by": stop["stopped_by"]}
    else:
        s = trainer.fit()
        trained_at = os.environ.get("SPEECHSCALE_COMMIT", "unknown")
        (out / "trained-at").write_text(trained_at + "\n")
    return {"pieces": pieces, "units": tok.vocab_size - 1, "seed": seed, "wer": s["wer"], "cer": s["cer"],
            "epochs": s["epoch"], "minutes": round(s["minutes"], 2), "audio_s_per_s": s.get("audio_s_per_s"),
            "target_units": round(units / len(texts), 2), "target_chars": round(sum(map(len, texts)) / len(texts), 2),
            "model": cfg.model.name, "stopped_by": s.get("stopped_by"), "reused": reused, "trained_at": trained_at,
            "val_manifest": cfg.data.val_manifest, "train_manifest": cfg.data.train_manifest}


def with_lm(row: dict[str, Any], out: Path, lm: Path) -> dict[str, Any]:
    """The arm's last.pt on its validation manifest through a beam search with `lm` (alpha 0.5) at word bonuses 0
    and 1: WER, CER and the seconds each search took."""
    from speechscale.bench.harness import run_cli

    scores = {}
    for beta in (0.0, 1.0):
        started = time.monotonic()
        res = json.loads(run_cli(["eval", "--checkpoint", str(out / "checkpoints" / "last.pt"), "--manifest",
                                  row["val_manifest"], "--decoder", "beam", "--lm", str(lm), "--alpha", "0.5", "--beta",
                                  str(beta), "--json"], timeout=None))
        scores[f"beta_{beta:g}"] = {"wer": res["wer"], "cer": res["cer"],
                                    "seconds": round(time.monotonic() - started, 1)}
    return scores


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
    lm = Path(args.work) / "lm.arpa"
    for n in [int(a) for a in args.arms.split(",")]:
        out = Path(args.work) / f"pieces{n}"
        rows.append(run_arm(args.recipe, n, args.seed, out, args.overrides))
        if not lm.is_file():
            from speechscale.decoding.lm import build_arpa

            build_arpa(rows[-1]["train_manifest"], 3, lm)
        rows[-1]["lm"] = with_lm(rows[-1], out, lm)
        print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"recipe": args.recipe, "overrides": args.overrides, "runs": rows},
               ["python", "-m", "benchmarks.pieces", *sys.argv[1:]], round(time.monotonic() - started, 1),
               {"work": args.work, "arms": args.arms, "seed": args.seed})
    return 0


if __name__ == "__main__":
    sys.exit(main())
