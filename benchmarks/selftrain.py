"""Self-training on an unseen voice: a trained model labels untranscribed speech in that voice (`speechscale label`)
and is fine-tuned on its own labels beside its training data, against the same fine-tuning on the training data
alone.

    python -m benchmarks.selftrain --teacher runs/demo/checkpoints/last.pt [--pool-minutes 10] [--steps 170]
        [--min-confidence 0.85] [--seeds 1,2,3] [--work runs/selftrain] [--out docs/figures/bench-all/selftrain-demo.json]

The pool: `--pool-minutes` of new sentences in the demo's test voice (synthesized with another seed), none of them a
sentence the test set holds, so that no scored recording or sentence is ever heard in training. The teacher labels
the pool twice: greedy, and by a beam search with a 3-gram LM of the training transcripts. Each arm fine-tunes the
teacher (`trainer.init_from`) for the same number of steps on each seed, on the training manifest plus: nothing (the
control), the greedy labels, the LM's labels, or the LM's labels of at least `--min-confidence`. Each run's `last.pt`
is scored on the test set greedy and with the LM; a run in --work that finished on the same manifest is scored
again, not retrained. The labels' own WER (their references are read only for that) and their calibration table come
from `label`'s summary. Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit

LR = 5e-4     # a quarter of the demo's peak: a fine-tune
WARMUP = 10   # steps


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _absolute(rows: list[dict[str, Any]], base: Path) -> list[dict[str, Any]]:
    return [{**r, "audio_filepath": str((base / r["audio_filepath"]).resolve())} for r in rows]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_pool(work: Path, minutes: float, seed: int, test: Path) -> tuple[Path, int]:
    """`minutes` of new sentences in the test voice, none of them one of `test`'s; the manifest and how many
    synthesized sentences were left out as the test set's."""
    from speechscale.data.synth import synthesize_corpus

    folder = work / "pool"
    if not (folder / "test.jsonl").is_file():
        synthesize_corpus(folder, minutes=0.2, test_minutes=minutes, seed=seed, progress=False)
    scored = {r["text"] for r in _rows(test)}
    rows = _rows(folder / "test.jsonl")
    kept = [r for r in _absolute(rows, folder) if r["text"] not in scored]
    return _write(work / "pool.jsonl", kept), len(rows) - len(kept)


def run_writing(args: list[str], out: Path) -> dict[str, Any]:
    """A speechscale command that writes `out` and its rejected file (both removed first): its last JSON line, and
    the seconds it took."""
    from speechscale.bench.harness import run_cli
    from speechscale.labelling import rejected_path

    for f in (out, rejected_path(out)):
        f.unlink(missing_ok=True)
    started = time.monotonic()
    res = json.loads(run_cli(args, timeout=None).strip().splitlines()[-1])
    return {**res, "seconds": round(time.monotonic() - started, 1)}


def run_label(teacher: str, pool: Path, out: Path, decoder: list[str]) -> dict[str, Any]:
    """`speechscale label` of the pool by the teacher; its summary line (out is replaced)."""
    return run_writing(["label", str(pool), "--checkpoint", teacher, "--out", str(out), *decoder], out)


def pool_args(p: argparse.ArgumentParser, fine_tunes: bool = True) -> None:
    """The arguments of a bench on the pool: the teacher, the demo corpus, the pool, the folder they are kept in,
    and (`fine_tunes`) the arms' steps and seeds."""
    p.add_argument("--teacher", required=True, help="a checkpoint trained on --data's train.jsonl (the demo's)")
    p.add_argument("--data", default="runs/demo/data", help="the demo corpus: train.jsonl and test.jsonl")
    p.add_argument("--pool-minutes", type=float, default=10.0, help="minutes of untranscribed speech in the test voice")
    p.add_argument("--pool-seed", type=int, default=1, help="the pool's synthesis seed (the demo corpus's is 0)")
    if fine_tunes:
        p.add_argument("--steps", type=int, default=170, help="fine-tuning steps of every arm")
        p.add_argument("--seeds", default="1", help="comma-separated training seeds: every arm runs once on each")
    p.add_argument("--work", default="runs/selftrain", help="the pool, labels and runs go here (reused from there)")


def open_pool(args: argparse.Namespace) -> tuple[Path, Path, Path, int]:
    """pool_args' folders made ready: (--work, --data, the pool's manifest, sentences left out as the test set's),
    the pool synthesized into --work unless it is there."""
    work, data = Path(args.work), Path(args.data)
    work.mkdir(parents=True, exist_ok=True)
    pool, left_out = make_pool(work, args.pool_minutes, args.pool_seed, data / "test.jsonl")
    return work, data, pool, left_out


def score(checkpoint: Path, test: Path, lm: Path) -> dict[str, Any]:
    """WER and CER of `checkpoint` on `test`, greedy and with `lm` (alpha 0.5, beta 1)."""
    from speechscale.bench.harness import run_cli

    out = {}
    for name, flags in (("greedy", []), ("lm", ["--decoder", "beam", "--lm", str(lm), "--alpha", "0.5", "--beta", "1"])):
        res = json.loads(run_cli(["eval", "--checkpoint", str(checkpoint), "--manifest", str(test), "--json", *flags],
                                 timeout=None))
        out[name] = {"wer": res["wer"], "cer": res["cer"]}
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _finished(out: Path, digest: str) -> dict[str, Any] | None:
    """The stop row of the run in `out` when it ran its planned steps on the manifest of `digest`; else None."""
    metrics, said = out / "metrics.jsonl", out / "manifest-sha256"
    if not (metrics.is_file() and said.is_file() and (out / "checkpoints" / "last.pt").is_file()):
        return None
    last = _rows(metrics)[-1]
    ok = last["kind"] == "stop" and last.get("stopped_by") is None and said.read_text().strip() == digest
    return last if ok else None


def run_arm(name: str, teacher: str, model: dict[str, Any], train: Path, extra: list[dict[str, Any]], work: Path,
            steps: int, seed: int, test: Path, lm: Path) -> dict[str, Any]:
    """Fine-tune the teacher (its `model` section: name and overrides) on `train` plus `extra` rows for `steps` steps
    with the demo recipe, unless its run in WORK/NAME-seedSEED finished on the same manifest (then it is scored again,
    and its row says which commit trained it); its last.pt's scores."""
    from speechscale.recipe import load_recipe
    from speechscale.training.trainer import Trainer

    out = work / f"{name}-seed{seed}"
    manifest = _write(work / f"train-{name}.jsonl", _absolute(_rows(train), train.parent) + extra)
    digest = _digest(manifest)
    stop = _finished(out, digest)
    if stop is None:
        shutil.rmtree(out, ignore_errors=True)
        cfg = load_recipe("demo", [f"data.root={train.parent}", f"data.train_manifest={manifest}",
                                   f"data.val_manifest={test}", f"model.name={model['name']}",
                                   f"model.overrides={json.dumps(model.get('overrides') or {})}",
                                   f"trainer.init_from={teacher}", "trainer.max_epochs=0",
                                   f"trainer.max_steps={steps}", f"trainer.seed={seed}", f"trainer.out_dir={out}",
                                   f"optim.lr={LR}", f"optim.warmup_steps={WARMUP}", "trainer.max_minutes=0",
                                   "trainer.progress=false", "trainer.checkpoint_every_steps=0"])
        Trainer(cfg).fit()
        (out / "trained-at").write_text(os.environ.get("SPEECHSCALE_COMMIT", "unknown") + "\n")
        (out / "manifest-sha256").write_text(digest + "\n")
        stop = _finished(out, digest)
        reused = False
    else:
        reused = True
    if stop is None:
        raise RuntimeError(f"{out}: the run did not end by its steps")
    return {"arm": name, "seed": seed, "utterances": len(extra),
            "pseudo_hours": round(sum(r["duration"] for r in extra) / 3600, 4), "steps": stop["step"],
            "reused": reused, "trained_at": (out / "trained-at").read_text().strip(),
            **score(out / "checkpoints" / "last.pt", test, lm)}


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.harness import write_json
    from speechscale.decoding.lm import build_arpa
    from speechscale.storage.checkpoints import load_checkpoint

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pool_args(p)
    p.add_argument("--min-confidence", type=float, default=0.85, help="the filtered arm's bound")
    p.add_argument("--out", default="docs/figures/bench-all/selftrain-demo.json")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    work, data, pool, overlap = open_pool(args)
    train, test = data / "train.jsonl", data / "test.jsonl"
    lm = work / "lm.arpa"
    build_arpa(str(train), 3, lm)
    labels = {"greedy": run_label(args.teacher, pool, work / "labels-greedy.jsonl", []),
              "lm": run_label(args.teacher, pool, work / "labels-lm.jsonl", ["--decoder", "beam", "--lm", str(lm),
                                                                             "--alpha", "0.5", "--beta", "1"])}
    print(json.dumps(labels), flush=True)
    model = load_checkpoint(args.teacher)["config"]["model"]
    lm_rows = _rows(work / "labels-lm.jsonl")
    arms = {"control": [], "greedy": _rows(work / "labels-greedy.jsonl"), "lm": lm_rows,
            "lm-confident": [r for r in lm_rows if r["confidence"] >= args.min_confidence]}
    rows = [{"arm": "teacher", **score(Path(args.teacher), test, lm)}]
    print(json.dumps(rows[-1]), flush=True)
    for seed in [int(x) for x in args.seeds.split(",")]:
        for name, extra in arms.items():
            rows.append(run_arm(name, args.teacher, model, train, extra, work, args.steps, seed, test, lm))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"steps": args.steps, "seeds": args.seeds, "lr": LR, "warmup": WARMUP, "pool_minutes": args.pool_minutes,
                "pool_seed": args.pool_seed, "min_confidence": args.min_confidence}
    write_json(out, {"teacher": args.teacher, "pool_utterances": len(_rows(pool)), "pool_left_out": overlap,
                     "labels": labels, "arms": rows, "settings": settings},
               ["python", "-m", "benchmarks.selftrain", *sys.argv[1:]], round(time.monotonic() - started, 1), settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
