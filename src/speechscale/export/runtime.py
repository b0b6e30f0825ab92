"""Run an exported model (ONNX with onnxruntime, TorchScript with torch.jit) as the torch model runs:
features (B, F, T) and lengths (B,) in, log-probabilities (B, T', V) and output lengths (B,) out."""
from __future__ import annotations

import io
import logging
import tempfile
import warnings
import zlib
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

import numpy as np
import torch

from ..components import Components, components_from_description
from ..config import ConfigError, parse_json
from ..storage.checkpoints import damaged_record
from .exporter import CRC_KEY, META_KEY, metadata_tail

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "torchscript")


class ExportedModel:
    """Callable like the acoustic model: (feats, lengths) -> (log_probs, out_lengths) as torch tensors."""

    def __init__(self, path: str | Path, backend: str, device: torch.device | None = None) -> None:
        """`device`: where the model runs (onnxruntime's CUDA provider, or TorchScript moved there); CPU if None."""
        path = Path(path)
        self.device = device or torch.device("cpu")
        if not path.is_file():
            raise ConfigError(f"{path}: no such exported model")
        self.backend = backend
        if backend == "onnx":
            providers: list[Any] = ["CPUExecutionProvider"]
            if self.device.type == "cuda":
                from ..extras import require

                if "CUDAExecutionProvider" not in require("onnxruntime", "export", "an ONNX model") \
                        .get_available_providers():
                    raise ConfigError("--device cuda with --backend onnx needs onnxruntime-gpu "
                                      "(pip install onnxruntime-gpu); this onnxruntime runs on the CPU only")
                providers.insert(0, ("CUDAExecutionProvider", {"device_id": self.device.index or 0}))
            self.session, self.description = onnx_session(path, providers, "an ONNX model")
            if not self.description:
                raise ConfigError(f"{path}: not an ONNX file written by speechscale export (no model description)")
            if "stream_step" in self.description:
                raise ConfigError(f"{path}: a streaming step (export --streaming): run it with `speechscale "
                                  "transcribe --stream --checkpoint FILE`")
        elif backend == "torchscript":
            data = path.read_bytes()  # read once: checked, then loaded from memory
            damaged = damaged_record(data)
            if damaged:
                raise ConfigError(f"{path} is damaged: its record {damaged} does not match the CRC-32 written with it "
                                  f"(the bytes changed after it was exported); export it again")
            extra = {f"{META_KEY}.json": ""}
            try:
                with warnings.catch_warnings():  # torch.jit's deprecation notice: still the TorchScript loader
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self.module = torch.jit.load(io.BytesIO(data), map_location=self.device, _extra_files=extra)
            except Exception as e:  # torch.jit raises RuntimeError or ValueError on foreign files
                raise ConfigError(f"{path}: not a TorchScript file ({type(e).__name__})") from None
            if not extra[f"{META_KEY}.json"]:
                raise ConfigError(f"{path}: not a TorchScript file written by speechscale export")
            try:
                self.description = parse_json(extra[f"{META_KEY}.json"])
            except ValueError:
                raise ConfigError(f"{path}: its speechscale model description is not JSON") from None
        else:
            raise ConfigError(f"backend must be onnx or torchscript for an exported model, not {backend!r}")

    def components(self) -> Components:
        """Normalizer, tokenizer and features from the file's model description; the model is its architecture
        only, on the meta device (this file holds the weights); `card` the file's."""
        comps = components_from_description(self.description)
        comps.card = self.description.get("card") or {}
        return comps

    def __call__(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.backend == "onnx":
            out: Any = self.session.run(None, {"features": feats.cpu().numpy().astype(np.float32, copy=False),
                                                "lengths": lengths.cpu().numpy().astype(np.int64, copy=False)})
            return torch.from_numpy(out[0]), torch.from_numpy(out[1])
        with torch.no_grad():
            return self.module(feats, lengths)


def onnx_session(path: Path, providers: list[Any], usage: str) -> tuple[Any, dict[str, Any]]:
    """An onnxruntime session of the file at `path` and the model description its metadata holds ({} for an
    ONNX file that holds none), the file checked against the CRC-32 export wrote into it first (`onnx_damage`)."""
    from ..extras import require

    ort = require("onnxruntime", "export", usage)
    damage = onnx_damage(path) if path.is_file() else None
    if damage:
        raise ConfigError(f"{path} is damaged: {damage} (the bytes changed after it was exported); export it again")
    try:
        session = ort.InferenceSession(str(path), providers=providers)
    except Exception as e:  # onnxruntime raises its own types (InvalidProtobuf, InvalidArgument, Fail, ...)
        raise ConfigError(f"{path}: not an ONNX file ({type(e).__name__})") from None
    try:
        description = parse_json(session.get_modelmeta().custom_metadata_map.get(META_KEY, "{}"))
    except ValueError:
        description = None
    if not isinstance(description, dict):
        raise ConfigError(f"{path}: its model description is not the JSON speechscale export writes")
    return session, description


def onnx_damage(path: Path) -> str | None:
    """What in the ONNX file at `path` fails the CRC-32 export wrote into it (CRC_KEY), or None. Read from the file's
    last bytes, before onnxruntime parses it (a damaged graph may not parse). A file without the entry (exported
    before, or by another tool) is not checked, nor is one another tool rewrote (the description and CRC entries no
    longer the file's last bytes, after the bytes the CRC covers): logged, then loaded."""
    marker = bytes([0x0A, len(CRC_KEY)]) + CRC_KEY.encode() + b"\x12"  # the entry's key field, then its value's tag
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - 4096))
        end = f.read()
        at = end.rfind(marker)
        if at < 0:
            return None
        try:
            length, begin = _varint(end, at + len(marker))
            value = end[begin:begin + length].decode()
            check = parse_json(value)
            covered, want = int(check["bytes"]), int(check["crc32"])
        except (ValueError, TypeError, KeyError):  # UnicodeDecodeError is a ValueError
            return f"its checksum entry {CRC_KEY} is not what export writes"
        entry = metadata_tail({CRC_KEY: value})
        f.seek(min(max(covered, 0), size))
        tail = f.read()
        desc = _description(tail[:-len(entry)]) if 0 <= covered <= size and tail.endswith(entry) else None
        if desc is None:
            log.warning("%s: rewritten since speechscale export wrote it (by another tool?); its CRC-32 is not "
                        "checked", path)
            return None
        crc, left = 0, covered
        f.seek(0)
        while left and (chunk := f.read(min(left, 1 << 22))):
            crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    if zlib.crc32(desc, crc) != want:
        return f"its bytes do not match the CRC-32 written with them ({CRC_KEY})"
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The protobuf varint at `data[at]` and the offset after it (ValueError when it runs past the end)."""
    n = shift = 0
    while at < len(data):
        byte, at = data[at], at + 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at
    raise ValueError("a varint runs past the end")


def _description(head: bytes) -> bytes | None:
    """The description in `head` when `head` is exactly the META_KEY entry export writes (metadata_tail), else None."""
    key = bytes([0x0A, len(META_KEY)]) + META_KEY.encode() + b"\x12"
    try:
        if head[:1] != b"\x72":  # field 14 (metadata_props), length-delimited
            return None
        length, at = _varint(head, 1)
        if length != len(head) - at or head[at:at + len(key)] != key:
            return None
        length, at = _varint(head, at + len(key))
    except ValueError:
        return None
    return head[at:] if len(head) - at == length else None


def detect_backend(path: str | Path) -> str:
    """The runtime a model file needs, from its contents: onnx (a protobuf named .onnx), torchscript (a zip
    archive holding TorchScript code) or torch (a speechscale checkpoint). A URL's from its name: .onnx, .ts or
    .torchscript for an export, else a checkpoint."""
    import zipfile

    from ..storage import is_remote

    if is_remote(path):
        from urllib.parse import urlparse

        suffix = PurePosixPath(urlparse(str(path)).path).suffix.lower()
        return {".onnx": "onnx", ".ts": "torchscript", ".torchscript": "torchscript"}.get(suffix, "torch")
    path = Path(path)
    if path.suffix.lower() == ".onnx":
        return "onnx"
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            if any(n.endswith("/constants.pkl") or "/code/" in n for n in z.namelist()):
                return "torchscript"
    return "torch"


@contextmanager
def exported_file(path: str | Path) -> Iterator[Path]:
    """An exported model's local file: `path` itself, or a URL's bytes in a temporary file for the block (onnxruntime
    and torch.jit read local files); errors inside name the URL, not the copy."""
    from ..storage import is_remote, read_bytes

    if not is_remote(path):
        yield Path(path)
        return
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such exported model") from None
    except Exception as e:  # fsspec raises per-backend types
        raise ConfigError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    with tempfile.TemporaryDirectory(prefix="speechscale-export-") as folder:
        local = Path(folder) / (PurePosixPath(str(path)).name or "model")
        local.write_bytes(data)
        try:
            yield local
        except ConfigError as e:
            raise ConfigError(str(e).replace(str(local), str(path))) from None


def card_of_file(path: str | Path) -> dict[str, Any]:
    """The model card a checkpoint or exported file carries (`speechscale info`)."""
    backend = detect_backend(path)
    if backend == "torch":
        from ..components import components_from_checkpoint
        from ..storage.cards import card_of_checkpoint
        from ..storage.checkpoints import load_checkpoint

        state = load_checkpoint(path)
        comps = components_from_checkpoint(state)
        card = card_of_checkpoint(state, lambda: sum(p.numel() for p in comps.model.parameters()))
        return {**card, "streaming": comps.streaming_card()}  # the model's own, whatever its config says now
    with exported_file(path) as local:
        if backend == "onnx":  # read, not run: a streaming step's file carries its card too
            if not local.is_file():
                raise ConfigError(f"{local}: no such exported model")
            _, description = onnx_session(local, ["CPUExecutionProvider"], "an ONNX model")
            if not description:
                raise ConfigError(f"{local}: not an ONNX file written by speechscale export (no model description)")
        else:
            description = ExportedModel(local, backend).description
    card = description.get("card")
    if not isinstance(card, dict):
        raise ConfigError(f"{path}: exported before model cards; export its checkpoint again")
    return card
