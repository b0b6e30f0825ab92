"""Decoders compared on one checkpoint and one held-out set, each as a user would run it:

    speechscale lm build train.txt --order 2 --out lm.arpa
    speechscale eval --checkpoint last.pt --manifest test.jsonl --json --decoder greedy | beam | lexicon ...

(here the functions behind those two commands, in this process). The LM is built from the training
transcripts only (never the scored set's); the lexicon is every word of the training transcripts. Each row is
the `eval --json` figures of one decoder setting, at eval's defaults (alpha 0.5, beta 1.0: nothing is tuned).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# name -> the eval flags' DecoderConfig fields ({lm} and {lexicon} are filled in)
DECODERS: dict[str, dict[str, Any]] = {
    "greedy": {"name": "greedy"},
    "beam, no LM": {"name": "beam", "beam_width": 50},
    "beam + 2-gram LM": {"name": "beam", "beam_width": 50, "lm": "{lm}"},
    "lexicon": {"name": "lexicon", "lexicon": "{lexicon}"},
    "lexicon + LM": {"name": "lexicon", "lexicon": "{lexicon}", "lm": "{lm}"},
}


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
    from speechscale.decoding.decoders import DecoderConfig
    from speechscale.decoding.lm import build_arpa
    from speechscale.decoding.scoring import EVAL_BATCH_SECONDS, checkpoint_loader, score_loaded

    work.mkdir(parents=True, exist_ok=True)
    text, lexicon, lm = work / "train.txt", work / "lexicon.txt", work / "lm.arpa"
    text.write_text("\n".join(train_text) + "\n")
    lexicon.write_text("\n".join(sorted({w for t in train_text for w in t.split()})) + "\n")
    build_arpa(text, order, lm)
    loaded = checkpoint_loader(str(checkpoint), str(test_manifest), EVAL_BATCH_SECONDS)  # once for every decoder
    rows = []
    for name, fields in DECODERS.items():
        if decoders is not None and name not in decoders:
            continue
        dcfg = DecoderConfig(**{k: v.format(lm=lm, lexicon=lexicon) if isinstance(v, str) else v
                                for k, v in fields.items()})
        res, _ = score_loaded(*loaded, dcfg)
        rows.append({"decoder": name, "wer": res["wer"], "cer": res["cer"], "utterances": res["utterances"],
                     "alpha": dcfg.alpha if dcfg.lm else None, "beta": dcfg.beta if dcfg.lm else None,
                     "lm_order": order if dcfg.lm else None})
    return rows
