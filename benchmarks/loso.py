"""`python -m benchmarks fsdd-loso`: leave-one-speaker-out over FSDD's four speakers.

Each fold trains a recipe on three speakers to the end of its epochs and scores the fourth with `last.pt`
(never `best.pt`, which the run picks on the speaker it is scored on), greedy and with the training speakers'
lexicon. Nothing is tuned on the held-out speaker: the recipe is fixed before the folds run, and the run's
own validation on that speaker is only logged. The result is the four WERs, their mean and the worst.

    python -m benchmarks fsdd-loso --config configs/fsdd.yaml --out docs/figures/loso --name ds2-tiny
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from .decoding import bench_decoding, split_manifest
from .recipes import run_recipe
from .suite import FSDD

SPEAKERS = ("george", "jackson", "lucas", "nicolas")
DECODERS = ("greedy", "lexicon")
# results carry this once the lexicon search treats the utterance's end as a word boundary (17cb4e7); before,
# the last (here: the only) word needed a space the FSDD models never emit
END_BOUNDARY = "lexicon_end_boundary"
GOALS = {"greedy": 0.05, "lexicon": 0.02}  # mean WER over the folds (issue #25)


def fold_overrides(held_out: str, speakers: tuple[str, ...] = SPEAKERS) -> list[str]:
    """Config overrides that train on every speaker but `held_out` and validate on it."""
    train = [s for s in speakers if s != held_out]
    return ["data.root=.", f"data.train_manifest={FSDD}", f"data.val_manifest={FSDD}",
            f"data.filter={{speaker: [{', '.join(train)}]}}", f"data.val_filter={{speaker: {held_out}}}"]


def fold_train(held_out: str, out: Path, speakers: tuple[str, ...] = SPEAKERS) -> list[dict[str, Any]]:
    """The fold's training rows (every speaker but `held_out`), written to OUT/train.jsonl."""
    out.mkdir(parents=True, exist_ok=True)
    return split_manifest(FSDD, {"speaker": [s for s in speakers if s != held_out]}, out / "train.jsonl")


def extra_training(train: list[dict[str, Any]], extra: Path, out: Path) -> list[str]:
    """Overrides that train on the fold's rows `train` plus every utterance of the manifest `extra` (e.g.
    `speechscale synth --text digits`): one manifest of both, written to OUT/train_extra.jsonl."""
    added = split_manifest(extra, {}, out / "extra.jsonl")
    mixed = out / "train_extra.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in train + added))
    return [f"data.train_manifest={mixed}", "data.filter={}"]


STAMP = "loso_recipe.json"  # what a fold folder trains: a later run may continue it only with the same recipe
_GUARDS = ("trainer.max_minutes=", "trainer.threads=", "trainer.progress=")  # change no weights


def _recipe(config: str, overrides: list[str], extra_train: Path | None) -> dict[str, Any]:
    return {"config": config, "overrides": [o for o in overrides if not o.startswith(_GUARDS)],
            "extra_train": str(extra_train) if extra_train else None}


class FoldConflict(ValueError):
    """A fold folder holds a fold of another recipe (the message is one line)."""


def check_fold(out: Path, config: str, overrides: list[str], extra_train: Path | None = None) -> None:
    """FoldConflict when the fold folder `out` holds a fold of another recipe: continuing its checkpoint
    (trainer.resume=auto) would mix two recipes in one result."""
    stamp = out / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) != _recipe(config, overrides, extra_train):
        raise FoldConflict(f"{out} holds a fold of another recipe ({stamp}); give another --work or --name")


def run_fold(config: str, held_out: str, out: Path, overrides: list[str], speakers: tuple[str, ...] = SPEAKERS,
             decoders: tuple[str, ...] = DECODERS, extra_train: Path | None = None) -> dict[str, Any]:
    """Train `config` without `held_out` into `out` and score `held_out` with its last.pt through `decoders`.
    `extra_train`: a manifest added to the training speakers' utterances (never scored)."""
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP).write_text(json.dumps(_recipe(config, overrides, extra_train)) + "\n")
    spec = {"config": config, "goal_wer": GOALS["greedy"], "scored_on": f"{held_out} (never heard; last.pt)"}
    train = fold_train(held_out, out, speakers)
    extra = extra_training(train, extra_train, out) if extra_train else []
    # a fold cut short (killed, a machine lost) continues from its last epoch checkpoint when the command runs
    # again; no wall-clock limit but the recipe's own guard (a slow day once cost two runs an hour each)
    row = run_recipe(f"loso-{held_out}", spec, out, [*fold_overrides(held_out, speakers), "trainer.resume=auto",
                                                     *extra, *overrides], timeout=None)
    test = split_manifest(FSDD, {"speaker": [held_out]}, out / "test.jsonl")
    scores = score_fold(out, [r["text"] for r in train], decoders)
    return {"held_out": held_out, "utterances": len(test), "epochs": row["epochs"], "steps": row["steps"],
            "stopped_by": row["stopped_by"], "train_minutes": row["train_minutes"],
            "wall_seconds": round(time.perf_counter() - started, 1), **scores, "val": row["val"]}


def score_fold(fold: Path, train_text: list[str], decoders: tuple[str, ...] = DECODERS) -> dict[str, float]:
    """wer_/cer_ per decoder of the fold's `last.pt` on its test.jsonl (LM and lexicon from `train_text`), and
    for a speaker-CMVN fold the greedy figures without the speaker's statistics."""
    scores = bench_decoding(fold / "checkpoints" / "last.pt", fold / "test.jsonl", train_text, fold / "lm",
                            decoders=decoders)
    cfg = json.loads((fold / "config.json").read_text())  # the run's config, as training wrote it
    return {**{f"wer_{d['decoder']}": d["wer"] for d in scores}, **{f"cer_{d['decoder']}": d["cer"] for d in scores},
            **without_speaker_stats(fold, cfg), **averaged(fold), **ema_weights(fold, cfg)}


def _greedy(checkpoint: Path, manifest: Path) -> dict[str, float]:
    """What `speechscale eval --decoder greedy --json` gives for `checkpoint` on `manifest` ({wer, cer, ...}),
    scored in this process."""
    from speechscale.decoding.scoring import score_checkpoint

    return score_checkpoint(str(checkpoint), str(manifest))[0]


AVERAGE_LAST = 3  # the fold's newest step-N.pt (its last epochs) averaged: `speechscale average --last`


def averaged(fold: Path) -> dict[str, Any]:
    """Greedy WER/CER of the average of the fold's newest AVERAGE_LAST epoch checkpoints (fewer if it kept
    fewer; {} below two), beside `last.pt`'s: the checkpoint-averaging ablation of issue #25."""
    steps = sorted((fold / "checkpoints").glob("step-*.pt"))
    n = min(AVERAGE_LAST, len(steps))
    if n < 2:
        return {}
    from speechscale.storage.averaging import average_checkpoints, newest_steps
    from speechscale.storage.checkpoints import save_checkpoint

    out = fold / "checkpoints" / f"average-last-{n}.pt"  # `speechscale average --last N --dir ... --out ...`
    save_checkpoint(str(out), average_checkpoints(newest_steps(str(fold / "checkpoints"), n)))
    res = _greedy(out, fold / "test.jsonl")
    return {"wer_greedy_average": res["wer"], "cer_greedy_average": res["cer"], "average_of": n}


def ema_weights(fold: Path, run_config: dict[str, Any]) -> dict[str, Any]:
    """For a fold trained with trainer.ema_decay > 0 (`run_config`, its config.json): greedy WER/CER of the EMA
    weights its `last.pt` carries (`speechscale average --ema`), beside `last.pt`'s own; {} else. The EMA
    ablation of issue #25."""
    decay = run_config["trainer"].get("ema_decay") or 0.0
    if decay <= 0:
        return {}
    from speechscale.storage.averaging import ema_checkpoint
    from speechscale.storage.checkpoints import save_checkpoint

    out = fold / "checkpoints" / "ema.pt"  # `speechscale average --ema last.pt --out ema.pt`
    save_checkpoint(str(out), ema_checkpoint(str(fold / "checkpoints" / "last.pt")))
    res = _greedy(out, fold / "test.jsonl")
    return {"wer_greedy_ema": res["wer"], "cer_greedy_ema": res["cer"], "ema_decay": decay}


def without_speaker_stats(fold: Path, run_config: dict[str, Any]) -> dict[str, float]:
    """For a fold trained with features.normalize=speaker (`run_config`, its config.json): greedy WER/CER when
    the held-out speaker's files come without a `speaker` (each normalized on its own, as `transcribe` and
    `serve` see one file); {} else. LOSO gives speaker CMVN the held-out speaker's 500 unlabelled clips, which
    a single request never has."""
    if run_config["features"]["normalize"] != "speaker":
        return {}
    rows = [json.loads(line) for line in (fold / "test.jsonl").read_text().splitlines()]
    alone = fold / "test_no_speaker.jsonl"
    alone.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "speaker"}) + "\n" for r in rows))
    checkpoint, prior = with_prior(fold, run_config)
    res = _greedy(checkpoint, alone)
    return {"wer_greedy_no_speaker": res["wer"], "cer_greedy_no_speaker": res["cer"], "no_speaker_prior": prior}


def with_prior(fold: Path, run_config: dict[str, Any]) -> tuple[Path, str]:
    """The fold's last.pt and where its features.speaker_prior comes from. A checkpoint saved before training
    wrote the prior gets a copy (last-prior.pt) with the one training writes: the pooled statistics of the
    speakers of the run's training utterances (`run_config`, its config.json: manifest and filter). Every one of them has its
    speaker, so the prior never touched training: the copy is the checkpoint a run saves today."""
    import torch

    from speechscale.components import components_from_description, describe
    from speechscale.config import Config, from_dict
    from speechscale.data.dataset import SpeechDataset
    from speechscale.data.features import pooled_prior
    from speechscale.data.loading import load_utterances
    from speechscale.storage.checkpoints import load_checkpoint

    last = fold / "checkpoints" / "last.pt"
    ckpt = load_checkpoint(last)
    desc = describe(ckpt)
    if desc["config"]["features"].get("speaker_prior"):
        return last, "checkpoint"
    data = from_dict(Config, run_config).data
    comps = components_from_description(desc)  # features and tokenizer; the weights are not needed
    utts, _ = load_utterances(data.train_manifest, comps, data, data.filter, data.train_slice)
    ckpt["config"]["features"]["speaker_prior"] = pooled_prior(SpeechDataset(utts, comps.features,
                                                                             comps.tokenizer).speakers)
    torch.save(ckpt, fold / "checkpoints" / "last-prior.pt")
    return fold / "checkpoints" / "last-prior.pt", "added at scoring"


def summarize(folds: list[dict[str, Any]], decoders: tuple[str, ...] = DECODERS) -> dict[str, Any]:
    """Mean and worst fold per decoder, against the goals fixed in GOALS."""
    out: dict[str, Any] = {}
    for d in decoders:
        wers = [f[f"wer_{d}"] for f in folds]
        worst = max(folds, key=lambda f: f[f"wer_{d}"])
        mean = statistics.fmean(wers)
        out[d] = {"mean_wer": round(mean, 4), "worst_wer": worst[f"wer_{d}"], "worst_speaker": worst["held_out"],
                  "goal": GOALS.get(d), "reached": GOALS.get(d) is not None and mean <= GOALS[d]}
    return out


def bench_loso(config: str, out: Path, overrides: list[str] | None = None, speakers: tuple[str, ...] = SPEAKERS,
               held_out: tuple[str, ...] | None = None,
               report: Callable[[dict[str, Any]], None] | None = None,
               extra_train: Path | None = None) -> dict[str, Any]:
    """Every fold (or those of `held_out`), one after another; returns {config, overrides, folds, summary}
    (and `extra_train`, the manifest every fold also trained on, when one was given)."""
    if not FSDD.is_file():
        raise FileNotFoundError(f"{FSDD}: the LOSO bench reads FSDD from ../shared/data")
    folds = []
    for speaker in held_out or speakers:  # before any fold trains
        check_fold(out / speaker, config, overrides or [], extra_train)
    for speaker in held_out or speakers:
        folds.append(run_fold(config, speaker, out / speaker, overrides or [], speakers, extra_train=extra_train))
        if report:
            report({k: v for k, v in folds[-1].items() if k != "val"})
    res = {"config": config, "overrides": overrides or [], "folds": folds,
           "summary": summarize(folds) if len(folds) == len(speakers) else None, END_BOUNDARY: True}
    if extra_train is not None:
        res["extra_train"] = str(extra_train)
    return res


def rescore_loso(res: dict[str, Any], work: Path, decoders: tuple[str, ...] = DECODERS) -> dict[str, Any]:
    """Score every fold's `last.pt` (WORK/SPEAKER, as `bench_loso` left it) again with today's decoders; each
    fold keeps its earlier figures under `before`. For a decoder fixed after the folds trained."""
    missing = [str(work / f["held_out"] / "checkpoints" / "last.pt") for f in res["folds"]
               if not (work / f["held_out"] / "checkpoints" / "last.pt").is_file()]
    if missing:
        raise FileNotFoundError(f"{missing[0]}: a fold to re-score has no last.pt under {work}")
    folds = []
    for fold in res["folds"]:
        d = work / fold["held_out"]
        train = [json.loads(line)["text"] for line in (d / "train.jsonl").read_text().splitlines()]
        now = score_fold(d, train, decoders)
        # a second re-score keeps the first figures as `before`: they are the ones a fix is measured against
        folds.append({**fold, **now, "before": {**{k: fold[k] for k in now if k in fold}, **fold.get("before", {})}})
    return {**res, "folds": folds, "summary": summarize(folds, decoders) if res.get("summary") else None,
            END_BOUNDARY: True}
