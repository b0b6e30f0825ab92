"""Run an exported model (ONNX with onnxruntime, TorchScript with torch.jit) as the torch model runs:
features (B, F, T) and lengths (B,) in, log-probabilities (B, T', V) and output lengths (B,) out."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..components import Components, components_from_description
from ..config import ConfigError
from .exporter import META_KEY

BACKENDS = ("torch", "onnx", "torchscript")


class ExportedModel:
    """Callable like the acoustic model: (feats, lengths) -> (log_probs, out_lengths) as torch tensors."""

    def __init__(self, path: str | Path, backend: str) -> None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: no such exported model")
        self.backend = backend
        if backend == "onnx":
            import onnx
            import onnxruntime as ort

            try:
                meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
            except Exception as e:  # protobuf's decode errors have several types
                raise ConfigError(f"{path}: not an ONNX file ({type(e).__name__})") from None
            if META_KEY not in meta:
                raise ConfigError(f"{path}: not an ONNX file written by speechscale export (no model description)")
            self.description = json.loads(meta[META_KEY])
            opts = ort.SessionOptions()
            self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        elif backend == "torchscript":
            extra = {f"{META_KEY}.json": ""}
            try:
                with warnings.catch_warnings():  # torch.jit's deprecation notice: still the TorchScript loader
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self.module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
            except Exception as e:  # torch.jit raises RuntimeError or ValueError on foreign files
                raise ConfigError(f"{path}: not a TorchScript file ({type(e).__name__})") from None
            if not extra[f"{META_KEY}.json"]:
                raise ConfigError(f"{path}: not a TorchScript file written by speechscale export")
            self.description = json.loads(extra[f"{META_KEY}.json"])
        else:
            raise ConfigError(f"backend must be onnx or torchscript for an exported model, not {backend!r}")

    def components(self) -> Components:
        """Normalizer, tokenizer and features from the file's model description (the model is not used)."""
        return components_from_description(self.description)

    def __call__(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.backend == "onnx":
            out: Any = self.session.run(None, {"features": feats.numpy().astype(np.float32, copy=False),
                                                "lengths": lengths.numpy().astype(np.int64, copy=False)})
            return torch.from_numpy(out[0]), torch.from_numpy(out[1])
        with torch.no_grad():
            return self.module(feats, lengths)
