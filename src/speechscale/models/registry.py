"""Model registry: a config name -> (builder, preset). `model.overrides` changes preset fields."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from torch import nn

from ..config import ConfigError, from_dict
from .conformer import Conformer, ConformerConfig
from .deepspeech2 import DeepSpeech2, DS2Config
from .lstm_ctc import LSTMCTC, LSTMConfig
from .wav2letter import W2LConfig, Wav2LetterPlus

log = logging.getLogger(__name__)

_CONV_DS2 = [{"channels": 32, "kernel": [41, 11], "stride": [2, 2]},
             {"channels": 32, "kernel": [21, 11], "stride": [2, 1]}]

# name -> (config class, model class, preset fields)
MODELS: dict[str, tuple[type, Callable[..., nn.Module], dict[str, Any]]] = {
    # Small enough to train on 2 CPU cores in minutes.
    "ds2-tiny": (DS2Config, DeepSpeech2, {
        "conv": [{"channels": 16, "kernel": [21, 11], "stride": [2, 2]},
                 {"channels": 16, "kernel": [11, 11], "stride": [2, 1]}],
        "rnn_layers": 3, "rnn_hidden": 256, "activation": "hardtanh"}),
    "ds2-small": (DS2Config, DeepSpeech2, {"conv": _CONV_DS2, "rnn_layers": 3, "rnn_hidden": 512}),
    # OpenSeq2Seq's DS2 large: 2 conv + 5 x 800 bidirectional GRU, concatenated directions, FC 1600.
    "ds2-large": (DS2Config, DeepSpeech2, {"conv": _CONV_DS2, "rnn_layers": 5, "rnn_hidden": 800,
                                           "rnn_merge": "concat", "fc_hidden": 1600}),
    # Streaming variant: unidirectional GRU with a 20-frame lookahead convolution.
    "ds2-streaming": (DS2Config, DeepSpeech2, {"conv": _CONV_DS2, "rnn_layers": 5, "rnn_hidden": 800,
                                               "bidirectional": False, "lookahead": 20}),
    # ds2-tiny's shapes, streaming: unidirectional GRU and the 20-frame lookahead (trains on a CPU)
    "ds2-streaming-tiny": (DS2Config, DeepSpeech2, {
        "conv": [{"channels": 16, "kernel": [21, 11], "stride": [2, 2]},
                 {"channels": 16, "kernel": [11, 11], "stride": [2, 1]}],
        "rnn_layers": 3, "rnn_hidden": 256, "bidirectional": False, "lookahead": 20}),
    # deepspeech.pytorch's DeepSpeech (its defaults: 5 bidirectional LSTM layers of 1024, summed directions, an output
    # layer without bias); `speechscale import deepspeech-pytorch` sets the sizes of the file it reads
    "deepspeech-pytorch": (DS2Config, DeepSpeech2, {"conv": _CONV_DS2, "rnn_type": "lstm", "rnn_layers": 5,
                                                    "rnn_hidden": 1024, "fc_bias": False}),
    # OpenSeq2Seq's w2lplus_large (the W2LConfig default); meant for 64 log-mel features.
    "wav2letter+": (W2LConfig, Wav2LetterPlus, {}),
    "wav2letter+-tiny": (W2LConfig, Wav2LetterPlus, {"blocks": [
        {"channels": 96, "kernel": 11, "stride": 2, "dropout": 0.1},
        {"channels": 96, "kernel": 11, "dropout": 0.1, "repeat": 2},
        {"channels": 128, "kernel": 15, "dropout": 0.1, "repeat": 2},
        {"channels": 160, "kernel": 21, "dilation": 2, "dropout": 0.2},
        {"channels": 192, "kernel": 1, "dropout": 0.2}]}),
    # The ADPSGD papers' acoustic model: 6 bidirectional LSTM layers of 2x512 cells, 256-unit bottleneck.
    "lstm-ctc": (LSTMConfig, LSTMCTC, {}),
    "lstm-ctc-tiny": (LSTMConfig, LSTMCTC, {"layers": 3, "hidden": 192, "projection": 128, "stride": 2}),
    # NeMo's Conformer-CTC-Medium (the ConformerConfig default): 18 blocks of 256, 4 heads, kernel 31.
    "conformer": (ConformerConfig, Conformer, {}),
    # Conformer-S's width (144) at 4 blocks: trains on 2 CPU cores.
    "conformer-tiny": (ConformerConfig, Conformer, {"d_model": 144, "layers": 4, "heads": 4, "conv_kernel": 15,
                                                    "subsampling_channels": 64}),
    # Streaming: attention in chunks over 64 frames of left context, trained over chunk sizes 1-25 and the full
    # context (WeNet's U2): one model for full-context and chunked decoding. Causal convolutions unless
    # model.overrides sets conv_context: chunk (each reads to its chunk's end).
    "conformer-streaming": (ConformerConfig, Conformer, {"streaming": True}),
    "conformer-streaming-tiny": (ConformerConfig, Conformer, {"d_model": 144, "layers": 4, "heads": 4,
                                                              "conv_kernel": 15, "subsampling_channels": 64,
                                                              "streaming": True}),
}

# Features each family was designed for (bench uses them; recipes set `features:` to match).
RECOMMENDED_FEATURES: dict[str, dict[str, Any]] = {
    "wav2letter+": {"kind": "logmel", "n_mels": 64}, "wav2letter+-tiny": {"kind": "logmel", "n_mels": 64},
    "lstm-ctc": {"kind": "logmel", "n_mels": 40}, "lstm-ctc-tiny": {"kind": "logmel", "n_mels": 40},
    "conformer": {"kind": "logmel", "n_mels": 80}, "conformer-tiny": {"kind": "logmel", "n_mels": 80},
    "conformer-streaming": {"kind": "logmel", "n_mels": 80}, "conformer-streaming-tiny": {"kind": "logmel", "n_mels": 80},
}


def check_model_name(name: str, where: str = "model.name") -> None:
    """One-line ConfigError when `name` is not a registered preset."""
    if name not in MODELS:
        raise ConfigError(f"{where} {name!r} is unknown; choose one of {', '.join(sorted(MODELS))}")


def model_config(name: str, overrides: dict[str, Any] | None = None) -> Any:
    """The typed architecture config of preset `name` with `overrides` applied."""
    check_model_name(name)
    cfg_cls, _, preset = MODELS[name]
    return from_dict(cfg_cls, {**preset, **(overrides or {})}, where="model.overrides")


def build_model(name: str, overrides: dict[str, Any] | None, num_features: int, vocab_size: int) -> nn.Module:
    """Instantiate preset `name` for the given feature and vocabulary sizes; logs the parameter count."""
    cfg = model_config(name, overrides)
    try:
        model = MODELS[name][1](cfg, num_features=num_features, vocab_size=vocab_size)
    except (TypeError, ValueError) as e:  # a constructor's own complaint about a shape or value
        raise ConfigError(f"model {name} with model.overrides={overrides or {}}: {e}") from e
    n = sum(p.numel() for p in model.parameters())
    log.debug("model %s: %.2fM parameters", name, n / 1e6)
    model.arch = dataclasses.asdict(cfg)  # type: ignore[attr-defined]
    return model
