"""Another language from an English model: `trainer.init_from` across alphabets, against training from scratch.

    python -m benchmarks.transfer --source runs/demo/checkpoints/last.pt [--work runs/transfer] [--seeds 1,2,3]
        [--epochs 6] [--out docs/figures/bench-all/transfer-de.json]

Synthesizes a small German corpus with espeak-ng (sentences of GERMAN's grammar; 10 German voices train, a voice
variant never trained on, de+m6, is the test, as in the demo) and trains the source's model on it with the demo
recipe for --epochs, in four arms on every seed: from scratch; from the source's weights, each symbol both
alphabets have keeping its output row (ä, ö, ü and ß are new); from the source's weights with the output layer
started fresh (dropping the source's last layer, the usual way to change a vocabulary), to show what the symbols'
rows carry; and from the source's weights with its convolutional front end frozen (`trainer.freeze`). Each arm's
WER and CER on the test voice with last.pt. Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit

ALPHABET = "abcdefghijklmnopqrstuvwxyzäöüß' "
VOICES = ["de", "de+m1", "de+m2", "de+m3", "de+m4", "de+m5", "de+f1", "de+f2", "de+f3", "de+f4"]
TEST_VOICE = "de+m6"
ARMS = ("scratch", "init_from", "init_from_fresh_output", "init_from_frozen_front")
FRONT = "[convs, conv_norms]"  # the frozen arm's trainer.freeze: DS2's convolutional front end

W = str.split
NAMES = W("anna ben clara david emma felix greta hans ida jonas lena max nora paul rosa sophie tom ute")
ADJ = W("große kleine rote blaue grüne gelbe alte neue junge fröhliche müde schnelle langsame helle dunkle "
        "warme kalte leise süße")
NOUNS = W("katze maus kuh ziege ente taube eule biene schnecke tasche lampe tür blume straße brücke schule küche "
          "mühle flöte")
VERBS = W("sah fand nahm brachte trug malte öffnete schloss besuchte suchte kaufte hörte grüßte")
TIME = ["heute morgen", "gestern abend", "am montag", "nach dem essen", "vor dem frühstück", "im sommer",
        "um zwölf uhr", "früh am morgen"]
PLACE = ["im garten", "in der küche", "auf der straße", "unter der brücke", "hinter der schule", "neben dem haus",
         "über dem fluss", "vor der tür"]


def german(rng: random.Random) -> str:
    """One sentence of a small German grammar (lower case, no digits), with ä, ö, ü and ß in its words."""
    np_ = f"die {rng.choice(ADJ)} {rng.choice(NOUNS)}"
    kind = rng.randrange(4)
    if kind == 0:
        return f"{rng.choice(NAMES)} {rng.choice(VERBS)} {np_} {rng.choice(TIME)}"
    if kind == 1:
        return f"{np_} schläft {rng.choice(PLACE)}"
    if kind == 2:
        return f"wo ist {np_} {rng.choice(TIME)}"
    return f"{rng.choice(TIME)} {rng.choice(VERBS)} {rng.choice(NAMES)} {np_} {rng.choice(PLACE)}"


def make_corpus(out: Path, minutes: float, test_minutes: float) -> None:
    """The German corpus in `out` (train.jsonl, test.jsonl), unless it is there."""
    from speechscale.data.synth import synthesize_corpus

    if not (out / "test.jsonl").is_file():
        synthesize_corpus(out, minutes=minutes, test_minutes=test_minutes, seed=0, progress=False, sentences=german,
                          voices=VOICES, test_voice=TEST_VOICE)


def run_arm(arm: str, seed: int, source: Path, corpus: Path, out: Path, epochs: int, model: dict[str, Any]
            ) -> dict[str, Any]:
    """Train one arm on the German corpus; its summary's figures."""
    import torch

    from speechscale.recipe import load_recipe
    from speechscale.training.init import output_layer
    from speechscale.training.trainer import Trainer

    overrides = [f"data.root={corpus}", f"text.alphabet={json.dumps(ALPHABET)}", "text.digits_language=de",
                 f"model.name={model['name']}", f"model.overrides={json.dumps(model.get('overrides') or {})}",
                 f"trainer.max_epochs={epochs}", f"trainer.seed={seed}", f"trainer.out_dir={out}",
                 "trainer.progress=false", "trainer.checkpoint_every_steps=0", "trainer.max_minutes=0"]
    if arm != "scratch":
        overrides.append(f"trainer.init_from={source}")
    if arm == "init_from_frozen_front":
        overrides.append(f"trainer.freeze={FRONT}")
    shutil.rmtree(out, ignore_errors=True)  # each arm trains from its start: a rerun replaces the last one's
    trainer = Trainer(load_recipe("demo", overrides))
    if arm == "init_from_fresh_output":
        torch.manual_seed(seed)
        with torch.no_grad():
            trainer.model.get_submodule(output_layer(trainer.model, len(ALPHABET) + 1)).reset_parameters()
    s = trainer.fit()
    return {"arm": arm, "seed": seed, "wer": s["wer"], "cer": s["cer"], "epochs": s["epoch"],
            "minutes": round(s["minutes"], 2)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm: median, lowest and highest WER and the median CER over its seeds."""
    out = {}
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        if mine:
            wers = [r["wer"] for r in mine]
            out[arm] = {"wer": statistics.median(wers), "wer_range": [min(wers), max(wers)],
                        "cer": statistics.median(r["cer"] for r in mine), "seeds": len(mine)}
    return out


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.harness import write_json
    from speechscale.storage.checkpoints import load_checkpoint

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", required=True, help="the English checkpoint (the demo recipe's last.pt)")
    p.add_argument("--work", default="runs/transfer", help="the corpus and the runs go here")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated training seeds")
    p.add_argument("--epochs", type=int, default=6, help="each arm's epochs")
    p.add_argument("--minutes", type=float, default=8.0, help="minutes of German training audio")
    p.add_argument("--test-minutes", type=float, default=2.0, help="minutes of German test audio")
    p.add_argument("--out", default="docs/figures/bench-all/transfer-de.json")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    source, work = Path(args.source), Path(args.work)
    ckpt = load_checkpoint(source)
    saved, last = ckpt["config"], ckpt["training"]["history"][-1]
    corpus = work / "de"
    make_corpus(corpus, args.minutes, args.test_minutes)
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for arm in ARMS:
            rows.append(run_arm(arm, seed, source, corpus, work / f"{arm}-seed{seed}", args.epochs, saved["model"]))
            print(json.dumps(rows[-1]), flush=True)
    counts = {split: len((corpus / f"{split}.jsonl").read_text().splitlines()) for split in ("train", "test")}
    results = {"runs": rows, "summary": summarize(rows), "epochs": args.epochs, "recipe": "demo",
               "alphabet": ALPHABET, "new_symbols": "".join(c for c in ALPHABET if c not in saved["text"]["alphabet"]),
               "corpus": {"train_minutes": args.minutes, "test_minutes": args.test_minutes, "utterances": counts,
                          "voices": VOICES, "test_voice": TEST_VOICE},
               "source": {"model": saved["model"]["name"], "epochs": last["epoch"], "wer": last["wer"],
                          "cer": last["cer"], "sha256": hashlib.sha256(source.read_bytes()).hexdigest()[:16]}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, results, ["python", "-m", "benchmarks.transfer", *sys.argv[1:]],
               round(time.monotonic() - started, 1), {"source": str(source), "work": str(work), "seeds": args.seeds})
    print(json.dumps(summarize(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
