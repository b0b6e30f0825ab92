"""Decoders compared on one checkpoint and one held-out set, each run as a user would run it:

    speechscale lm build train.txt --order 2 --out lm.arpa
    speechscale eval --checkpoint last.pt --manifest test.jsonl --json --decoder greedy | beam | lexicon ...

The LM is built from the training transcripts only (never the scored set's); the lexicon is every word
of the training transcripts. Each row is the `eval --json` line of one decoder setting.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import run_cli

# name -> eval arguments ({lm} and {lexicon} are filled in)
DECODERS: dict[str, list[str]] = {
    "greedy": ["--decoder", "greedy"],
    "beam, no LM": ["--decoder", "beam", "--beam-width", "50"],
    "beam + 2-gram LM": ["--decoder", "beam", "--beam-width", "50", "--lm", "{lm}"],
    "lexicon": ["--decoder", "lexicon", "--lexicon", "{lexicon}"],
    "lexicon + LM": ["--decoder", "lexicon", "--lexicon", "{lexicon}", "--lm", "{lm}"],
}


def _cli(*args: str, timeout: float = 1800) -> str:
    return run_cli(list(args), timeout=timeout)


def split_manifest(manifest: Path, keep: dict[str, list[str]], out: Path) -> list[dict[str, Any]]:
    """The rows of `manifest` whose fields match `keep` (field -> allowed values), with absolute audio
    paths, written to `out`; returns them."""
    rows = []
    for line in manifest.read_text().splitlines():
        row = json.loads(line)
        if all(row.get(k) in v for k, v in keep.items()):
            row["audio_filepath"] = str((manifest.parent / row["audio_filepath"]).resolve())
            rows.append(row)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def bench_decoding(checkpoint: Path, test_manifest: Path, train_text: list[str], work: Path,
                   order: int = 2, decoders: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Each decoder of DECODERS (or the named ones) on `test_manifest`; the LM and lexicon come from `train_text`."""
    work.mkdir(parents=True, exist_ok=True)
    text, lexicon, lm = work / "train.txt", work / "lexicon.txt", work / "lm.arpa"
    text.write_text("\n".join(train_text) + "\n")
    lexicon.write_text("\n".join(sorted({w for t in train_text for w in t.split()})) + "\n")
    _cli("lm", "build", str(text), "--order", str(order), "--out", str(lm))
    rows = []
    for name, args in DECODERS.items():
        if decoders is not None and name not in decoders:
            continue
        args = [a.format(lm=lm, lexicon=lexicon) for a in args]
        res = json.loads(_cli("eval", "--checkpoint", str(checkpoint), "--manifest", str(test_manifest), "--json",
                              *args).strip().splitlines()[-1])
        rows.append({"decoder": name, "wer": res["wer"], "cer": res["cer"], "utterances": res["utterances"],
                     "alpha": res.get("alpha"), "beta": res.get("beta"), "lm_order": order if "--lm" in args else None})
    return rows
