"""A deepspeech.pytorch checkpoint (its `DeepSpeech` LightningModule saved by Lightning) read as a speechscale one,
without running code from it and without OmegaConf or Lightning installed (docs/untrusted-files.md).

Its pickle names OmegaConf containers and nodes, deepspeech.pytorch's enums and config classes, and typing names
OmegaConf keeps in its metadata. `LIGHTNING` stands an inert record in for each of those it knows (never importing
or calling the real class) and turns the tree into plain data once read; any other name is refused.
`to_checkpoint` then maps its layers onto speechscale's DeepSpeech2 exactly:

- conv.seq_module.{0,3} (Conv2d with a bias), {1,4} (BatchNorm2d) -> convs.{0,1} (no bias: it is folded into the
  next norm's running mean), conv_norms.{0,1};
- rnns.N.rnn, rnns.N.batch_norm.module (N > 0) -> rnns.N.rnn, rnns.N.norm;
- lookahead.0.conv (its kernel is `context` frames, this one and those after it) -> lookahead.conv (lookahead =
  context - 1 frames after this one);
- fc.0.module.0 (BatchNorm1d), fc.0.module.1 (Linear without bias) -> fc_norm, fc.0 (fc_bias: false).

    >>> LIGHTNING.stand_in("os.system") is None
    True
"""
from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from ..config import Config, to_dict
from .errors import ModelFileError

MODEL_NAME = "deepspeech-pytorch"  # the registry's preset of deepspeech.pytorch's DeepSpeech2
BLANK = "_"
MAX_DEPTH = 64
MAX_VALUES = 1_000_000


class _Record:
    """An OmegaConf object as read: its class's name and its pickled state; nothing of the real class runs. A pickle
    may create it (NEWOBJ) and give it a state (BUILD); calling it (REDUCE) is refused."""

    takes_state = True  # untrusted._Reader lets BUILD give it its state
    kind = ""

    def __new__(cls, *args: Any) -> "_Record":
        if args:
            raise pickle.UnpicklingError(f"{cls.kind} created with arguments, which OmegaConf never pickles")
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise pickle.UnpicklingError(f"{self.kind} called, which OmegaConf never pickles")

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict) or hasattr(self, "state"):
            raise pickle.UnpicklingError(f"{self.kind} given a state that is not one mapping")
        self.state = state


class _Name(str):
    """A class or typing name the pickle refers to (a config's type, OmegaConf's metadata): its name, nothing more."""


class _EnumType:
    """One of deepspeech.pytorch's enums: called with a member's value (as pickle rebuilds an enum member), the
    member's name as a plain string."""

    def __init__(self, name: str, members: dict[str, str]) -> None:
        self.name, self.members = name, members

    def __call__(self, value: Any) -> str:
        key = str(value) if isinstance(value, (str, _Name)) else None
        if key not in self.members:
            raise pickle.UnpicklingError(f"{self.name} rebuilt from {str(value)[:40]!r}, not one of its members")
        return self.members[key]


def _subscript(base: Any, args: Any) -> _Name:
    """operator.getitem as OmegaConf's metadata uses it (typing.Tuple[Any, ...]): the name of the subscripted type."""
    if not isinstance(base, _Name):
        raise pickle.UnpicklingError("getitem on something other than a typing name")
    items = args if isinstance(args, tuple) else (args,)
    if not all(isinstance(a, _Name) for a in items):
        raise pickle.UnpicklingError("getitem with something other than typing names")
    return _Name(f"{base}[{', '.join(items)}]")


def _defaultdict(factory: Any = None) -> dict:
    """collections.defaultdict as OmegaConf's resolver cache pickles it (empty, its factory a type's name)."""
    if factory is not None and not isinstance(factory, _Name):
        raise pickle.UnpicklingError("a defaultdict whose factory is not a type's name")
    return {}


_OMEGACONF = ("omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.base.ContainerMetadata",
              "omegaconf.base.Metadata", "omegaconf.nodes.AnyNode", "omegaconf.nodes.StringNode",
              "omegaconf.nodes.IntegerNode", "omegaconf.nodes.FloatNode", "omegaconf.nodes.BooleanNode",
              "omegaconf.nodes.EnumNode", "omegaconf.nodes.BytesNode", "omegaconf.nodes.PathNode")
_RECORDS: dict[str, type[_Record]] = {n: type(n.rsplit(".", 1)[1], (_Record,), {"kind": n}) for n in _OMEGACONF}
_CONFIGS = "deepspeech_pytorch.configs.train_config."
_NAMES = {
    **{f"typing.{n}": n for n in ("Any", "Tuple", "List", "Dict", "Optional", "Union")},
    **{f"builtins.{n}": n for n in ("int", "float", "str", "bool", "bytes", "dict", "list", "tuple", "object")},
    "builtins.long": "int", "builtins.unicode": "str", "builtins.Ellipsis": "...",
    **{f"{_CONFIGS}{n}": n for n in ("UniDirectionalConfig", "BiDirectionalConfig", "AdamConfig", "SGDConfig",
                                     "SpectConfig")},
    **{f"torch.nn.modules.rnn.{n}": n for n in ("LSTM", "GRU", "RNN")},
}
_ENUMS = {
    "deepspeech_pytorch.enums.RNNType": {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"},
    "deepspeech_pytorch.enums.SpectrogramWindow": {w: w for w in ("hamming", "hann", "blackman", "bartlett")},
}


class _LightningNames:
    """untrusted.Foreign for deepspeech.pytorch's checkpoints."""

    def stand_in(self, dotted: str) -> Any:
        """The inert stand-in for `dotted`, or None (refused)."""
        if dotted in _RECORDS:
            return _RECORDS[dotted]
        if dotted in _NAMES:
            return _Name(_NAMES[dotted])
        if dotted in _ENUMS:
            return _EnumType(dotted.rsplit(".", 1)[1], _ENUMS[dotted])
        if dotted in ("_operator.getitem", "operator.getitem"):
            return _subscript
        if dotted == "collections.defaultdict":
            return _defaultdict
        return None

    def plain(self, tree: Any) -> Any:
        """The tree with every OmegaConf container as a mapping or list of its values, every node as its value, every
        name as a string (a structured config keeps its class's name under `_type`); tensors and plain data as they
        are. ModelFileError past MAX_DEPTH levels or MAX_VALUES values (OmegaConf's parent links are not followed)."""
        seen = [0]

        def out(value: Any, depth: int) -> Any:
            seen[0] += 1
            if depth > MAX_DEPTH or seen[0] > MAX_VALUES:
                raise ModelFileError(f"its data is nested more than {MAX_DEPTH} levels deep or holds more than "
                                     f"{MAX_VALUES} values; refused")
            if isinstance(value, _Record):
                state = value.state if hasattr(value, "state") else {}
                if value.kind.endswith(("DictConfig", "ListConfig")):
                    content = out(state.get("_content"), depth + 1)
                    meta = state.get("_metadata")
                    kind = meta.state.get("object_type") if isinstance(meta, _Record) and hasattr(meta, "state") \
                        else None
                    if isinstance(content, dict) and isinstance(kind, _Name) and kind in _NAMES.values():
                        content = {"_type": str(kind), **content}
                    return content
                return out(state.get("_val"), depth + 1)
            if isinstance(value, str):
                return str(value)
            if isinstance(value, dict):
                copy = type(value)() if type(value) is OrderedDict else {}
                for k, v in value.items():
                    copy[out(k, depth + 1)] = out(v, depth + 1)
                if type(value) is OrderedDict and vars(value):
                    copy.__dict__.update({k: out(v, depth + 1) for k, v in vars(value).items()})
                return copy
            if isinstance(value, (list, tuple)):
                return type(value)(out(v, depth + 1) for v in value)
            if isinstance(value, _EnumType):
                return value.name
            if callable(value) and not isinstance(value, torch.Tensor):
                return getattr(value, "__name__", "callable")
            return value

        return out(tree, 0)


LIGHTNING = _LightningNames()


def is_deepspeech_pytorch(tree: Any) -> bool:
    """Whether a checkpoint's structure is a Lightning checkpoint (its weights under `state_dict`)."""
    return isinstance(tree, dict) and "state_dict" in tree and "model" not in tree


def _module_of(tree: dict[str, Any]) -> str:
    """What Lightning module wrote the checkpoint, as far as it says."""
    hp = tree.get("hyper_parameters")
    keys = sorted(hp)[:6] if isinstance(hp, dict) else []
    return f"hyper_parameters {keys}" if keys else "no hyper_parameters"


def to_checkpoint(tree: dict[str, Any], path: str | Path, data: bytes | None = None) -> dict[str, Any]:
    """A speechscale checkpoint (model, config, card) from a deepspeech.pytorch checkpoint's plain tree: its weights
    mapped onto DeepSpeech2 exactly, its labels as the alphabet (blank first), its front end as it computes it
    (normalized over each utterance). ModelFileError (one line) for another Lightning module's checkpoint, missing
    keys or shapes that do not fit."""
    where = f"{path}: not a deepspeech.pytorch DeepSpeech checkpoint"
    hp, sd = tree.get("hyper_parameters"), tree.get("state_dict")
    if not isinstance(hp, dict) or not isinstance(sd, dict) or not all(k in hp for k in ("labels", "model_cfg",
                                                                                        "spect_cfg")):
        raise ModelFileError(f"{where} (a Lightning checkpoint with {_module_of(tree)})")
    if any(not isinstance(k, str) or not isinstance(v, torch.Tensor) for k, v in sd.items()):
        raise ModelFileError(f"{where}: its state_dict holds something other than named tensors")
    labels = hp["labels"]
    if (not isinstance(labels, list) or not all(isinstance(c, str) and len(c) == 1 for c in labels)
            or len(set(labels)) != len(labels) or BLANK not in labels or len(labels) > 4096):
        raise ModelFileError(f"{where}: its labels are not distinct single characters with the blank {BLANK!r}")
    model = _model_overrides(hp["model_cfg"], sd, where)
    features = _features(hp["spect_cfg"], where)
    _check_shapes(sd, model, features, len(labels), where)
    weights = _weights(sd, model, labels, where)
    alphabet = "".join(c for c in labels if c != BLANK)
    cfg = to_dict(Config())
    cfg["model"] = {"name": MODEL_NAME, "overrides": model}
    cfg["features"].update(features)
    cfg["text"]["alphabet"] = alphabet
    parameters = sum(v.numel() for k, v in weights.items() if not k.endswith(("running_mean", "running_var",
                                                                               "num_batches_tracked")))
    card = {"model": {"name": MODEL_NAME, "parameters": parameters, "overrides": model},
            "features": cfg["features"], "alphabet": alphabet, "training_data": {}, "validation": {},
            "imported": _provenance(tree, hp, labels, path, data)}
    return {"format_version": 3, "model": weights, "config": cfg, "card": card}


def _get(cfg: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = cfg.get(key) if isinstance(cfg, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ModelFileError(f"{where}: its {key} is {str(value)[:40]!r}")
    return value


def _model_overrides(model_cfg: Any, sd: dict[str, torch.Tensor], where: str) -> dict[str, Any]:
    """DS2Config overrides of the deepspeech-pytorch preset for the model its config describes (checked against the
    weights here and by _check_shapes)."""
    rnn_type = _get(model_cfg, "rnn_type", str, where + " (model_cfg)")
    hidden = _get(model_cfg, "hidden_size", int, where + " (model_cfg)")
    layers = _get(model_cfg, "hidden_layers", int, where + " (model_cfg)")
    bidirectional = "rnns.0.rnn.weight_ih_l0_reverse" in sd
    said = model_cfg.get("_type")
    if said in ("UniDirectionalConfig", "BiDirectionalConfig") and (said == "BiDirectionalConfig") != bidirectional:
        raise ModelFileError(f"{where}: its model_cfg is a {said}, its weights are not")
    if rnn_type not in ("lstm", "gru"):
        raise ModelFileError(f"{where}: its recurrent layers are {rnn_type!r}; speechscale's DeepSpeech2 has GRU and "
                             "LSTM layers only")
    if not (1 <= layers <= 256 and 1 <= hidden <= 65536):
        raise ModelFileError(f"{where}: {layers} layers of {hidden} units is out of range")
    found = sorted({int(k.split(".")[1]) for k in sd if k.startswith("rnns.") and k.split(".")[1].isdigit()})
    if found != list(range(layers)):
        raise ModelFileError(f"{where}: its model_cfg says {layers} recurrent layers, its weights hold {len(found)}")
    # what differs between its models; the rest (its conv front end, summed directions, the bias-free output layer)
    # is the registry's deepspeech-pytorch preset
    overrides: dict[str, Any] = {"rnn_type": rnn_type, "rnn_layers": layers, "rnn_hidden": hidden,
                                 "bidirectional": bidirectional}
    if not bidirectional:
        context = _get(model_cfg, "lookahead_context", int, where + " (model_cfg)")
        if not 2 <= context <= 4096:
            raise ModelFileError(f"{where}: a lookahead of {context} frames; speechscale's lookahead reads 2 or more")
        overrides["lookahead"] = context - 1  # deepspeech.pytorch's kernel is `context` frames: this one and the rest
    return overrides


def _check_shapes(sd: dict[str, torch.Tensor], model: dict[str, Any], features: dict[str, Any], classes: int,
                  where: str) -> None:
    """ModelFileError unless every tensor deepspeech.pytorch's DeepSpeech holds has the shape its configs give it."""
    h, gates = model["rnn_hidden"], {"lstm": 4, "gru": 3}[model["rnn_type"]]
    freq = int(features["sample_rate"] * features["window_ms"] / 1000) // 2 + 1
    for k, p in ((41, 20), (21, 10)):  # the conv front end's frequency axis
        freq = (freq + 2 * p - k) // 2 + 1
    norm = {f"{n}.{p}": (c,) for n, c in (("conv.seq_module.1", 32), ("conv.seq_module.4", 32), ("fc.0.module.0", h),
                                            *((f"rnns.{i}.batch_norm.module", h) for i in range(1, model["rnn_layers"])))
            for p in ("weight", "bias", "running_mean", "running_var")}
    want = {"conv.seq_module.0.weight": (32, 1, 41, 11), "conv.seq_module.3.weight": (32, 32, 21, 11),
            "conv.seq_module.0.bias": (32,), "conv.seq_module.3.bias": (32,), **norm, "fc.0.module.1.weight": (classes, h)}
    for i in range(model["rnn_layers"]):
        for d in ("", "_reverse") if model["bidirectional"] else ("",):
            want.update({f"rnns.{i}.rnn.weight_ih_l0{d}": (gates * h, 32 * freq if i == 0 else h),
                         f"rnns.{i}.rnn.weight_hh_l0{d}": (gates * h, h), f"rnns.{i}.rnn.bias_ih_l0{d}": (gates * h,),
                         f"rnns.{i}.rnn.bias_hh_l0{d}": (gates * h,)})
    if not model["bidirectional"]:
        want["lookahead.0.conv.weight"] = (h, 1, model["lookahead"] + 1)
    for name, shape in want.items():
        if name in sd and tuple(sd[name].shape) != shape:
            raise ModelFileError(f"{where}: its weights do not fit its model_cfg and spect_cfg ({name} is "
                                 f"{list(sd[name].shape)}, they give {list(shape)})")


def _features(spect_cfg: Any, where: str) -> dict[str, Any]:
    """FeatureConfig fields of deepspeech.pytorch's spectrogram: log1p of an STFT's magnitude with a periodic Hamming
    window (librosa's window="hamming"), zeros padded at both ends (librosa 0.9), one mean and one deviation over the
    whole utterance (no epsilon)."""
    rate = _get(spect_cfg, "sample_rate", int, where + " (spect_cfg)")
    size = _get(spect_cfg, "window_size", (int, float), where + " (spect_cfg)")
    stride = _get(spect_cfg, "window_stride", (int, float), where + " (spect_cfg)")
    window = _get(spect_cfg, "window", str, where + " (spect_cfg)")
    if window != "hamming":
        raise ModelFileError(f"{where}: its spectrogram window is {window}; speechscale computes Hamming windows only")
    if not (1000 <= rate <= 384_000 and 0 < size <= 1 and 0 < stride <= 1):
        raise ModelFileError(f"{where}: a spectrogram of {rate} Hz, {size} s windows, {stride} s hops is out of range")
    # deepspeech.pytorch truncates (int(rate * size)); speechscale rounds: they must agree
    for what, seconds in (("window", size), ("hop", stride)):
        if int(rate * seconds) != round(rate * seconds) or int(rate * seconds) < 2:
            raise ModelFileError(f"{where}: its {what} of {seconds} s is not a whole number of samples at {rate} Hz")
    return {"kind": "spectrogram", "sample_rate": rate, "window_ms": size * 1000.0, "hop_ms": stride * 1000.0,
            "normalize": "utterance", "window_periodic": True, "stft_pad": "zeros", "normalize_eps": 0.0}


def _weights(sd: dict[str, torch.Tensor], model: dict[str, Any], labels: list[str],
             where: str) -> dict[str, torch.Tensor]:
    """deepspeech.pytorch's state dict under speechscale's names (see the module's table); every tensor used once."""
    left = dict(sd)

    def take(name: str) -> torch.Tensor:
        if name not in left:
            raise ModelFileError(f"{where}: its state_dict has no {name}")
        return left.pop(name).detach().clone()

    def norm(src: str, dst: str, out: dict[str, torch.Tensor], shift: torch.Tensor | None = None) -> None:
        for part in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            out[f"{dst}.{part}"] = take(f"{src}.{part}")
        if shift is not None:  # BN(x + b) = BN'(x) with the running mean less b
            out[f"{dst}.running_mean"] = out[f"{dst}.running_mean"] - shift.to(out[f"{dst}.running_mean"].dtype)

    out: dict[str, torch.Tensor] = {}
    for i, (conv, bn) in enumerate(((0, 1), (3, 4))):
        out[f"convs.{i}.weight"] = take(f"conv.seq_module.{conv}.weight")
        bias = left.pop(f"conv.seq_module.{conv}.bias", None)
        norm(f"conv.seq_module.{bn}", f"conv_norms.{i}", out, bias)
    suffixes = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    if model["bidirectional"]:
        suffixes += [s + "_reverse" for s in suffixes]
    for i in range(model["rnn_layers"]):
        if i > 0:
            norm(f"rnns.{i}.batch_norm.module", f"rnns.{i}.norm", out)
        for s in suffixes:
            out[f"rnns.{i}.rnn.{s}"] = take(f"rnns.{i}.rnn.{s}")
    if not model["bidirectional"]:
        out["lookahead.conv.weight"] = take("lookahead.0.conv.weight")
    norm("fc.0.module.0", "fc_norm", out)
    fc = take("fc.0.module.1.weight")  # (labels, hidden)
    if fc.shape[0] != len(labels):
        raise ModelFileError(f"{where}: its output layer has {fc.shape[0]} rows for {len(labels)} labels")
    order = [labels.index(BLANK)] + [i for i, c in enumerate(labels) if c != BLANK]  # speechscale's blank is id 0
    out["fc.0.weight"] = fc[order].contiguous()
    if left:
        raise ModelFileError(f"{where}: its state_dict holds {len(left)} tensor(s) a DeepSpeech model does not, e.g. "
                             f"{sorted(left)[0][:80]}")
    return out


def _provenance(tree: dict[str, Any], hp: dict[str, Any], labels: list[str], path: str | Path,
                data: bytes | None) -> dict[str, Any]:
    """Where the model came from and what of its checkpoint was kept, as the card states it."""
    def number(key: str) -> int | None:
        v = tree.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    optim = hp.get("optim_cfg")
    return {"from": "deepspeech.pytorch", "file": Path(str(path)).name,
            **({"sha256": hashlib.sha256(data).hexdigest()} if data is not None else {}),
            "lightning": str(tree.get("pytorch-lightning_version", ""))[:40], "epoch": number("epoch"),
            "global_step": number("global_step"), "labels": "".join(labels),
            "optimizer": {k: v for k, v in optim.items() if isinstance(v, (str, int, float, bool))}
            if isinstance(optim, dict) else {},
            "kept": "weights (its conv biases folded into the batch norms after them), labels, spectrogram and model "
                    "configs, epoch and step",
            "dropped": "optimizer and scheduler state, Lightning's loops and callbacks (fine-tuning starts a fresh "
                       "optimizer)",
            "normalization": "offline: one mean and deviation over each utterance, as deepspeech.pytorch; "
                             "streaming: fixed statistics when given at import"}
