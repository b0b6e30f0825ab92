"""Model cards: what a trained model is, what it learned from and how well it did, as plain data.

A card travels inside every checkpoint (`ckpt["card"]`) and every exported file (beside its model description),
so `speechscale info MODEL` works on any model file alone; `MODEL.md` and `model_card.json` are renderings of
it written beside the checkpoints and beside each export.

    >>> card = {"model": {"name": "ds2-tiny", "parameters": 1234, "overrides": {}}, "alphabet": "ab ",
    ...         "features": {"kind": "spectrogram", "sample_rate": 16000}, "training_data": {}, "validation": {}}
    >>> print(render_markdown(card).splitlines()[0])
    # ds2-tiny
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Callable

CARD_JSON = "model_card.json"
CARD_MD = "MODEL.md"


@functools.cache
def versions() -> dict[str, str]:
    """The speechscale and torch versions of this process."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        ours = version("speechscale")
    except PackageNotFoundError:  # a source tree never installed
        ours = "a source tree (not installed)"
    return {"speechscale": ours, "torch": str(torch.__version__)}  # TorchVersion is no plain str


def data_summary(manifests: list[str], utts: list[Any], seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """Training data as a card states it: manifest names, utterances, hours, distinct speakers (when the
    manifest names them) of `utts` (manifest.Utterance), and `seconds`: the utterances' median, 90th-percentile and
    longest durations (what length of audio the model knows: inference.transcribe cuts long audio to it)."""
    speakers = {str(u.extra["speaker"]) for u in utts if u.extra.get("speaker") is not None}
    return {"manifests": [Path(m).name if "://" not in m else m for m in manifests if m],
            "utterances": len(utts), "hours": round(sum(u.duration for u in utts) / 3600, 3),
            "speakers": len(speakers) or None, **({"seconds": seconds} if seconds else {})}


def build_card(config: dict[str, Any], parameters: int, training_data: dict[str, Any],
               validation: dict[str, Any], step: int, epoch: int,
               streaming: dict[str, Any] | None = None) -> dict[str, Any]:
    """A card for a model trained with `config` (plain data, `config.to_dict`), `validation` its latest
    validation row (wer, cer, utterances), `streaming` what it says about streaming (Components.streaming_card)."""
    val = {k: validation[k] for k in ("wer", "cer", "utterances") if k in validation}
    return {"model": {"name": config["model"]["name"], "parameters": parameters,
                      "overrides": config["model"]["overrides"]},
            "features": config["features"], "alphabet": config["text"]["alphabet"],
            **({"word_pieces": len(config["text"]["piece_list"])} if config["text"].get("piece_list") else {}),
            **({"streaming": streaming} if streaming else {}),
            "training_data": training_data,
            "recipe": {k: config[k] for k in ("data", "augment", "optim", "trainer")},
            "validation": {**val, "manifest": Path(config["data"]["val_manifest"]).name, "step": step,
                           "epoch": epoch},
            "versions": versions()}


def render_markdown(card: dict[str, Any]) -> str:
    """The card as a short Markdown page (MODEL.md)."""
    m, f, d, v = card["model"], card["features"], card.get("training_data") or {}, card.get("validation") or {}
    lines = [f"# {m['name']}", "",
             f"- **Parameters:** {m['parameters']:,}" + (f" (overrides: {m['overrides']})" if m.get("overrides") else ""),
             f"- **Features:** {f.get('kind')} at {f.get('sample_rate')} Hz"
             + (f", {f['n_mels']} mel bins" if f.get("kind") == "logmel" else "")
             + (f", normalized per {f['normalize']}" if f.get("normalize") else ""),
             f"- **Alphabet:** `{card['alphabet']}` (CTC blank first)"
             + (f"; output units: {card['word_pieces']} word pieces spelled in it" if card.get("word_pieces") else "")]
    if card.get("streaming"):
        lines.append(f"- **Streaming:** {streaming_line(card['streaming'])}")
    trainer = (card.get("recipe") or {}).get("trainer", {})
    if trainer.get("init_from"):
        lines.append(f"- **Started from:** `{trainer['init_from']}` (`trainer.init_from`: its weights, then this run's "
                     "training)" + (f"; kept as they were: {', '.join(trainer['freeze'])}" if trainer.get("freeze") else ""))
    if d:
        speakers = f", {d['speakers']} speakers" if d.get("speakers") else ""
        sec = d.get("seconds") or {}
        lengths = f"; utterances of {sec['median']:g} s (median), 90 % under {sec['p90']:g} s" if sec else ""
        lines.append(f"- **Training data:** {', '.join(d.get('manifests', [])) or '-'}: {d.get('utterances')} "
                     f"utterances, {d.get('hours')} h{speakers}{lengths}")
    if "wer" in v:
        lines.append(f"- **Validation** ({v.get('manifest')}, {v.get('utterances')} utterances, step {v.get('step')}): "
                     f"WER {100 * v['wer']:.2f} %, CER {100 * v['cer']:.2f} %")
    if card.get("imported"):
        imp = card["imported"]
        lines.append(f"- **Imported from:** {imp.get('from')} (`{imp.get('file')}`, epoch {imp.get('epoch')}, step "
                     f"{imp.get('global_step')}); kept: {imp.get('kept')}; not kept: {imp.get('dropped')}")
    if card.get("versions"):
        lines.append("- **Versions:** " + ", ".join(f"{k} {x}" for k, x in card["versions"].items()))
    if card.get("weights"):
        lines.append(f"- **Weights:** {card['weights']}")
    if card.get("file"):
        lines.append(f"- **File:** {card['file']}")
    return "\n".join(lines) + "\n"


def streaming_line(s: dict[str, Any]) -> str:
    """A card's streaming entry as one line of prose."""
    if not s.get("streams"):
        return f"no: {s.get('why')}"
    ahead = f"{s['reads_ahead_ms']:g} ms" if s.get("reads_ahead_ms") else "nothing"
    if s.get("step_ms"):
        return f"this file is the streaming step: {s['step_ms']:g} ms of audio a step, and it reads {ahead} past it"
    line = (f"yes: a step's text is final once the model has read {ahead} past it (`serve`, `transcribe --stream`; "
            f"a step is 100 ms of audio unless set, rounded up to whole {s['frame_ms']:g} ms frames)")
    if s.get("export") == "offline":
        line += "; this file runs whole utterances (`export --streaming` writes the step)"
    if s.get("normalize"):
        line += (f"; streams use features.normalize={s['normalize']} (files: {s.get('offline_normalize')}), so a "
                 "stream's text may differ from a file's")
    return line


def write_card(folder: str | Path, card: dict[str, Any], prefix: str = "") -> None:
    """PREFIX + MODEL.md and PREFIX + model_card.json in `folder` (a local folder or fsspec URL; atomic writes)."""
    from . import files

    files.write_bytes(files.join(folder, prefix + CARD_JSON), (json.dumps(card, indent=1) + "\n").encode())
    files.write_bytes(files.join(folder, prefix + CARD_MD), render_markdown(card).encode())


def card_of_checkpoint(state: dict[str, Any], parameters: Callable[[], int]) -> dict[str, Any]:
    """The card a loaded checkpoint carries; for a checkpoint written before cards, one made from its config
    and training history (no training-data figures), stating `parameters()` (the model's count, asked only then)."""
    if isinstance(state.get("card"), dict):
        return state["card"]
    params = parameters()
    if "config" not in state:  # format 2: the description is `meta`
        meta = state["meta"]
        return {"model": {"name": meta["model_name"], "parameters": params, "overrides": meta["model_overrides"]},
                "features": meta["features"], "alphabet": meta["tokenizer"].get("alphabet", ""),
                "training_data": {}, "validation": {}}
    training = state.get("training") or {}
    history = training.get("history") or [{}]
    return build_card(state["config"], params, {}, history[-1], training.get("step", 0), training.get("epoch", 0))
