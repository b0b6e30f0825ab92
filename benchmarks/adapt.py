"""Unsupervised speaker adaptation in the LOSO protocol (issue #25): `bench fsdd-loso --adapt`.

A fold's `last.pt` labels half of the held-out speaker's clips itself (the lexicon search; their references are
never read for it), is fine-tuned on those labels beside the fold's own training data (`trainer.init_from`),
and scores the other half; then the halves swap. So every clip is scored by a model that never met it, not even
unlabelled, and nothing is chosen on the speaker's references. `last.pt` is scored on the same halves (each
with its half's speaker statistics) as the figure the adaptation is measured against.

    python -m benchmarks fsdd-loso --name NAME --work WORK --adapt
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speechscale.decoding.metrics import ErrorRate

from .decoding import split_manifest
from .recipes import run_recipe

EPOCHS = 3      # passes over the fold's training data plus one pseudo-labelled half
LR = 5e-4       # a quarter of the FSDD recipes' peak
WARMUP = 10     # steps


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def halves(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The held-out speaker's rows in two halves: even and odd manifest lines."""
    return rows[0::2], rows[1::2]


def decode(checkpoint: Path, manifest: Path, lexicon: Path | None) -> tuple[dict[int, str], ErrorRate]:
    """Hypotheses of `checkpoint` on `manifest` by row (0-based manifest line; lexicon search over `lexicon`'s words, or
    greedy when None) and the error counts against the manifest's text."""
    from speechscale.decoding.decoders import DecoderConfig
    from speechscale.decoding.scoring import EVAL_BATCH_SECONDS, checkpoint_loader, score_loaded

    comps, loader, report = checkpoint_loader(str(checkpoint), str(manifest), EVAL_BATCH_SECONDS)
    dcfg = DecoderConfig(name="lexicon", lexicon=str(lexicon)) if lexicon else DecoderConfig()
    _, res = score_loaded(comps, loader, report, dcfg)
    utts = loader.dataset.utts
    return {utts[i].line - 1: hyp for i, hyp in res.hyps.items()}, res.metric  # Utterance.line counts from 1


def _wer(counts: list[ErrorRate]) -> float:
    return round(sum(c.word_errors for c in counts) / max(1, sum(c.words for c in counts)), 4)


def fold_training(data: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    """The rows the fold trained on (`data`, its config.json's data section: one manifest and its filter),
    written to `out`."""
    if data.get("mix") or data.get("train_slice"):
        raise ValueError("--adapt reads a fold trained on one manifest and a filter (no data.mix, no train_slice)")
    keep = {k: v if isinstance(v, list) else [v] for k, v in (data.get("filter") or {}).items()}
    return split_manifest(Path(data["train_manifest"]), keep, out)


def adapt_fold(fold: Path, epochs: int = EPOCHS, lr: float = LR) -> dict[str, Any]:
    """Adapt the fold under `fold` (as `bench_loso` left it) to its held-out speaker, half by half; returns
    wer_{greedy,lexicon}_adapt_before / _adapted over both halves, the pseudo labels' WER (a diagnostic: the
    references are read only here, after labelling) and the settings."""
    last = fold / "checkpoints" / "last.pt"
    lexicon = fold / "lm" / "lexicon.txt"
    for need in (last, lexicon, fold / "test.jsonl", fold / "config.json"):
        if not need.is_file():
            raise FileNotFoundError(f"{need}: a fold to adapt needs it (run the fold first)")
    work = fold / "adapt"
    work.mkdir(exist_ok=True)
    train = fold_training(json.loads((fold / "config.json").read_text())["data"], work / "fold-train.jsonl")
    parts = halves(_rows(fold / "test.jsonl"))
    manifests = [_write(work / f"half{k}.jsonl", rows) for k, rows in enumerate(parts)]
    counts: dict[str, list[ErrorRate]] = {k: [] for k in ("pseudo", "greedy_before", "greedy_adapted",
                                                          "lexicon_adapted")}
    for k, rows in enumerate(parts):
        hyps, pseudo_counts = decode(last, manifests[k], lexicon)
        counts["pseudo"].append(pseudo_counts)
        pseudo = [{**r, "text": hyps[i]} for i, r in enumerate(rows) if hyps.get(i)]  # an empty label teaches nothing
        labelled = _write(work / f"half{k}-pseudo.jsonl", pseudo)
        mixed = _write(work / f"train-half{k}.jsonl", pseudo + train)
        out = work / f"half{k}"
        # validation reads the pseudo labels (agreement with them): the other half is never looked at in training
        run_recipe(f"adapt-{fold.name}-{k}", {"config": str(fold / "config.json"), "goal_wer": 1.0,
                                               "scored_on": "its own pseudo labels"}, out,
                   [f"data.train_manifest={mixed}", "data.filter={}", "data.train_slice=[]",
                    f"data.val_manifest={labelled}", "data.val_filter={}", "data.val_slice=[]",
                    f"trainer.init_from={last}", "trainer.resume=auto", f"trainer.max_epochs={epochs}",
                    "trainer.max_steps=0", f"optim.lr={lr}", f"optim.warmup_steps={WARMUP}", "trainer.ema_decay=0",
                    "trainer.max_minutes=0", "trainer.target_wer=-1"], timeout=None)
        other = manifests[1 - k]
        counts["greedy_before"].append(decode(last, other, None)[1])
        for dec, words in (("greedy", None), ("lexicon", lexicon)):
            counts[f"{dec}_adapted"].append(decode(out / "checkpoints" / "last.pt", other, words)[1])
    # last.pt's lexicon figure over both halves is its labelling pass over each (same model, decoder and clips)
    return {"wer_greedy_adapt_before": _wer(counts["greedy_before"]), "wer_lexicon_adapt_before": _wer(counts["pseudo"]),
            "wer_greedy_adapted": _wer(counts["greedy_adapted"]), "wer_lexicon_adapted": _wer(counts["lexicon_adapted"]),
            "adapt_pseudo_label_wer": _wer(counts["pseudo"]), "adapt": {"epochs": epochs, "lr": lr, "halves": 2}}


def adapt_loso(res: dict[str, Any], work: Path, epochs: int = EPOCHS, lr: float = LR) -> dict[str, Any]:
    """`adapt_fold` for every fold of the LOSO result `res` under WORK/SPEAKER; each fold gains its fields."""
    missing = [f["held_out"] for f in res["folds"] if not (work / f["held_out"] / "checkpoints" / "last.pt").is_file()]
    if missing:
        raise FileNotFoundError(f"{work / missing[0] / 'checkpoints' / 'last.pt'}: a fold to adapt has no last.pt")
    return {**res, "folds": [{**f, **adapt_fold(work / f["held_out"], epochs, lr)} for f in res["folds"]]}
