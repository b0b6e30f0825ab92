"""A checkpoint scored on a manifest: what `speechscale eval` prints, as a function, so that a bench scoring
many checkpoints (LOSO folds, the decoding table) does it in its own process instead of paying a fresh
process's start-up (1.5-2.5 s of imports) per figure."""
from __future__ import annotations

from typing import Any, Callable

from ..components import Components, load_components
from ..config import DataConfig
from ..data.loading import eval_loader
from .decoders import Decoder, DecoderConfig, build_decoder
from .evaluate import EvalResult, evaluate

EVAL_BATCH_SECONDS = 120.0  # audio seconds per batch when scoring: `speechscale eval --batch-seconds`'s default


def checkpoint_loader(checkpoint: str, manifest: str, batch_seconds: float = 60.0,
                      device: str = "cpu") -> tuple[Components, Any, Any]:
    """The checkpoint's components (the model on `device`) and a loader over `manifest` with no duration bound
    (and its skip report)."""
    comps = load_components(checkpoint, device)
    return (comps, *manifest_loader(comps, manifest, batch_seconds))


def manifest_loader(comps: Components, manifest: str, batch_seconds: float = 60.0) -> tuple[Any, Any]:
    """A loader over `manifest` for loaded components, with no duration bound, and its skip report."""
    loader, report, _ = eval_loader(manifest, comps, DataConfig(batch_seconds=batch_seconds, max_duration=1e9))
    return loader, report


def score_checkpoint(checkpoint: str, manifest: str, decoder: DecoderConfig | None = None,
                     batch_seconds: float = EVAL_BATCH_SECONDS, device: str = "cpu",
                     attention_chunk: int | None = None, wrap: Callable[[Any], Any] | None = None
                     ) -> tuple[dict[str, Any], EvalResult, Any]:
    """WER/CER of `checkpoint` on `manifest` through `decoder` (greedy by default), batches of `batch_seconds`
    of audio (eval's default), the model on `device` (a streaming conformer attending in chunks of
    `attention_chunk` output frames, as it streams), run through `wrap(model)` when given (e.g.
    inference.graphed.FixedShapeForward): {wer, cer, utterances, skipped, skipped_reasons} (skips of the loader
    and of decoding together), the EvalResult and the loader."""
    comps = load_components(checkpoint, device)
    if attention_chunk is not None:
        from ..config import ConfigError

        if not hasattr(comps.model, "set_chunk"):
            raise ConfigError(f"--attention-chunk: {comps.model_name} has no chunked attention (a "
                              f"conformer-streaming preset has)")
        comps.model.set_chunk(attention_chunk)
    built = build_decoder(decoder or DecoderConfig(), comps.tokenizer, comps.normalizer)  # a bad LM: before any data
    loader, report = manifest_loader(comps, manifest, batch_seconds)
    scores, res = score_loaded(comps, loader, report, built, wrap(comps.model) if wrap else None)
    return scores, res, loader


def score_loaded(comps: Components, loader: Any, report: Any, decoder: DecoderConfig | Decoder | None = None,
                 forward: Any = None) -> tuple[dict[str, Any], EvalResult]:
    """`score_checkpoint` for a checkpoint and loader already built (`checkpoint_loader`): several decoders
    over one set load the model and check the manifest once. `decoder`: its config, or one built.
    `forward`: what runs the model (evaluate's)."""
    if decoder is None or isinstance(decoder, DecoderConfig):
        decoder = build_decoder(decoder or DecoderConfig(), comps.tokenizer, comps.normalizer)
    res = evaluate(comps.model, loader, comps.tokenizer, decoder=decoder, forward=forward)
    reasons = dict(report.reasons)
    for reason, n in res.skipped_reasons.items():
        reasons[reason] = reasons.get(reason, 0) + n
    return ({"wer": res.wer, "cer": res.cer, "utterances": res.utterances, "skipped": report.skipped + res.skipped,
             "skipped_reasons": reasons}, res)
