"""`speechscale import deepspeech-pytorch FILE.ckpt --out model.pt`: another tool's model as a speechscale checkpoint.

The file is read as every checkpoint is (storage/untrusted.py; storage/deepspeech_pytorch.py maps it), checked by
building its model, and written with its card. `--stats MANIFEST` gives a unidirectional model what a stream can
compute in place of deepspeech.pytorch's normalization over the whole utterance: one mean and one deviation over
the manifest's audio, fixed in the file (features.stream_normalize=global). `--recipe` writes the sections a
fine-tuning recipe needs (trainer.init_from).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from .args import check_not_an_input, out_file_or_url

SOURCES = ("deepspeech-pytorch",)
STATS_UTTERANCES = 2000  # --stats reads at most so many utterances, spread over the manifest


def import_model(args: argparse.Namespace) -> int:
    from ..components import components_from_checkpoint
    from ..config import ConfigError
    from ..storage.checkpoints import load_checkpoint, save_checkpoint

    check_not_an_input(args.out, [args.file], "--out")
    ckpt = load_checkpoint(args.file)
    imported = (ckpt.get("card") or {}).get("imported") or {}
    if imported.get("from") != "deepspeech.pytorch":
        raise ConfigError(f"{args.file}: a speechscale checkpoint already, not deepspeech.pytorch's")
    comps = components_from_checkpoint(ckpt, str(args.file))  # a model that builds, before anything is written
    if args.stats:
        if comps.model.streaming_problem():  # type: ignore[operator]
            raise ConfigError(f"--stats: {args.file} {comps.model.streaming_problem()}; only a unidirectional model "
                              "streams")
        stats, utterances = _stats(comps, args.stats, args.stats_utterances)
        ckpt["config"]["features"].update(stream_normalize="global", global_stats=stats)
        imported["normalization"] = (f"offline: one mean and deviation over each utterance, as deepspeech.pytorch; "
                                     f"streams: one mean ({stats[0]:g}) and deviation ({stats[-1]:g}) over "
                                     f"{utterances} utterances of {Path(args.stats).name}, fixed at import")
        comps = components_from_checkpoint(ckpt, str(args.file))
    ckpt["card"]["features"] = ckpt["config"]["features"]
    ckpt["card"]["streaming"] = comps.streaming_card()
    save_checkpoint(args.out, ckpt)
    if args.recipe:
        _write_recipe(args.recipe, ckpt["config"], str(args.out))
    print(json.dumps({"out": str(args.out), "model": comps.model_name, "overrides": comps.model_overrides,
                      "alphabet": comps.tokenizer.units, "streams": ckpt["card"]["streaming"]["streams"],
                      **({"recipe": str(args.recipe)} if args.recipe else {})}))
    return 0


def _stats(comps: Any, manifest: str, most: int) -> tuple[list[float], int]:
    """features.global_stats for streaming from at most `most` utterances of `manifest` spread over it (an
    utterance that cannot be read is left out, and counted in the log), and how many were used."""
    import logging

    import torch

    from ..config import ConfigError
    from ..data.audio import load_audio
    from ..data.features import utterance_level_stats
    from ..data.manifest import read_manifest

    utts, _ = read_manifest(manifest)
    if not utts:
        raise ConfigError(f"--stats: {manifest} lists no utterances")
    picks = [utts[k * len(utts) // most] for k in range(most)] if len(utts) > most else utts
    used, skipped = [0], [0]

    def raws() -> Any:
        for u in picks:
            try:
                wav = load_audio(u.audio_path, comps.features.cfg.sample_rate, max_seconds=600)
            except Exception:  # noqa: BLE001 - one unreadable file is left out, not the run
                skipped[0] += 1
                continue
            if len(wav) > comps.features.n_fft:
                used[0] += 1
                yield comps.features.raw(torch.from_numpy(wav))
    stats = utterance_level_stats(raws())
    if skipped[0]:
        logging.getLogger(__name__).warning("--stats: %d of %d utterances could not be read and were left out",
                                            skipped[0], len(picks))
    return stats, used[0]


def _write_recipe(path: str, config: dict[str, Any], model: str) -> None:
    """A recipe's model, features and text sections for this model, and trainer.init_from naming it."""
    import yaml

    features = dict(config["features"])
    recipe = {"model": config["model"], "features": features, "text": {"alphabet": config["text"]["alphabet"]},
              "trainer": {"init_from": model}}
    Path(path).write_text("# the model imported from deepspeech.pytorch; add data, optim and trainer settings\n"
                          + yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True))


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `import` to the subcommand table."""
    from .args import positive

    a = command(sub, "import", "another tool's trained model as a speechscale checkpoint (deepspeech.pytorch's "
                "Lightning .ckpt), read without running code from it")
    a.add_argument("source", choices=SOURCES, help="the tool that wrote the file")
    a.add_argument("file", help="its checkpoint (a local path or URL)")
    a.add_argument("--out", required=True, type=out_file_or_url, help="the speechscale checkpoint to write")
    a.add_argument("--stats", default=None, help="a manifest of audio like the model's: one mean and deviation "
                   "over it, which a unidirectional model streams with (deepspeech.pytorch normalizes each whole "
                   "utterance, which a stream cannot)")
    a.add_argument("--stats-utterances", type=positive(int), default=STATS_UTTERANCES,
                   help="read at most so many utterances of --stats, spread over it")
    a.add_argument("--recipe", default=None, help="also write a YAML recipe's model, features and text sections "
                   "with trainer.init_from naming --out, to fine-tune from")
    a.set_defaults(func=import_model)
