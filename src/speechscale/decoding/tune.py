"""`speechscale tune-lm`: the LM weight (alpha) and word bonus (beta) that minimize WER on a dev set.

    speechscale tune-lm --checkpoint C --manifest dev.jsonl --lm lm.arpa --trials 40

The acoustic model runs ONCE over the manifest; its log-probabilities are kept in memory and every trial
only decodes them again. optuna's TPE sampler proposes (alpha, beta), starting from the defaults, so the
result is never worse than them on this set. The best pair is written beside the LM as `LM.tuned.json`,
where `eval` and `transcribe` pick it up when --alpha/--beta are not given.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError, finite_number, parse_json
from .decoders import DecoderConfig, build_decoder
from .metrics import ErrorRate

log = logging.getLogger(__name__)
DEFAULT_ALPHA, DEFAULT_BETA = 0.5, 1.0


def tuned_path(lm: str | Path) -> Path:
    return Path(f"{lm}.tuned.json")


def write_tuned(lm: str | Path, best: dict[str, Any], manifest: str | Path) -> Path:
    """Keep the tuned (alpha, beta) beside the LM, with the WER they reached on `manifest`; `load_tuned` reads it."""
    path = tuned_path(lm)
    path.write_text(json.dumps({"alpha": best["alpha"], "beta": best["beta"], "wer": best["wer"],
                                "manifest": str(manifest)}) + "\n")
    return path


def load_tuned(lm: str | Path) -> dict[str, float] | None:
    """The tuned (alpha, beta) of an LM, if tune-lm wrote them; a file that does not hold two finite numbers there is
    one line."""
    p = tuned_path(lm)
    if not p.is_file():
        return None
    try:
        tuned = parse_json(p.read_bytes().decode())
    except ValueError:  # not JSON, or not UTF-8
        tuned = None
    if not isinstance(tuned, dict) or not all(finite_number(tuned.get(k)) for k in ("alpha", "beta")):
        raise ConfigError(f"{p}: not the alpha and beta tune-lm writes; run tune-lm again or remove it")
    return tuned


@torch.no_grad()
def cache_log_probs(model: torch.nn.Module, loader: Any) -> list[tuple[torch.Tensor, int, str]]:
    """(log_probs (T, V), frames, reference) of every utterance, from one pass of the model."""
    out = []
    model.eval()
    for batch in loader:
        if len(batch) == 0:
            continue
        logits, lens = model(batch.feats, batch.feat_lens)
        lp = logits.float().log_softmax(-1)
        out += [(lp[b, : int(n)].clone(), int(n), text) for b, (n, text) in enumerate(zip(lens, batch.texts))]
    return out


def wer_of(cache: list[tuple[torch.Tensor, int, str]], decoder: Any) -> float:
    m = ErrorRate()
    for lp, n, ref in cache:
        m.update([ref], decoder(lp[None], torch.tensor([n])))
    return m.wer


def tune(cache: list[tuple[torch.Tensor, int, str]], tokenizer: Any, lm: str, trials: int = 30, beam_width: int = 32,
         lexicon: str = "", seed: int = 0) -> dict[str, Any]:
    """Search (alpha, beta) on cached log-probabilities; the defaults are the first trial."""
    from ..extras import require

    optuna = require("optuna", "decode", "tune-lm")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = "lexicon" if lexicon else "beam"

    def objective(trial: Any) -> float:
        cfg = DecoderConfig(name, beam_width=beam_width, lm=lm, lexicon=lexicon,
                            alpha=trial.suggest_float("alpha", 0.0, 3.0), beta=trial.suggest_float("beta", -2.0, 5.0))
        return wer_of(cache, build_decoder(cfg, tokenizer))

    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial({"alpha": DEFAULT_ALPHA, "beta": DEFAULT_BETA})
    study.optimize(objective, n_trials=trials)
    default = study.trials[0].value
    return {"alpha": round(study.best_params["alpha"], 4), "beta": round(study.best_params["beta"], 4),
            "wer": study.best_value, "default_wer": default, "trials": trials, "utterances": len(cache)}
