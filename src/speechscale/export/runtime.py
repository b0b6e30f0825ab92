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
from ..storage.errors import ModelFileError
from ..storage.untrusted import (
    archive_prefix,
    archive_records,
    is_torchscript,
    limits,
    read_model_bytes,
    regular_file_size,
    walk,
)
from .metadata import CRC_KEY, META_KEY, metadata_tail

log = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "torchscript")


class ExportedModel:
    """Callable like the acoustic model: (feats, lengths) -> (log_probs, out_lengths) as torch tensors."""

    def __init__(self, path: str | Path, backend: str, device: torch.device | None = None) -> None:
        """`device`: where the model runs (onnxruntime's CUDA provider, or TorchScript moved there); CPU if None."""
        path = Path(path)
        self.device = device or torch.device("cpu")
        if not path.is_file():
            raise ModelFileError(f"{path}: no such exported model")
        self.backend, self.path = backend, path
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
                raise ModelFileError(f"{path}: not an ONNX file written by speechscale export (no model description)")
            if "stream_step" in self.description:
                raise ModelFileError(f"{path}: a streaming step (export --streaming): run it with `speechscale "
                                  "transcribe --stream --checkpoint FILE`")
            self._comps = check_outputs(path, self.description, self.session.get_outputs()[0].shape)
        elif backend == "torchscript":
            data, self.description = torchscript_description(path)  # checked before any of its code runs
            self._comps = components_from_description(self.description, where=str(path))  # in range; nothing run
            try:
                with warnings.catch_warnings():  # torch.jit's deprecation notice: still the TorchScript loader
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self.module = torch.jit.load(io.BytesIO(data), map_location=self.device)
            except Exception as e:  # torch.jit raises RuntimeError or ValueError on foreign files
                raise ModelFileError(f"{path}: not a TorchScript file ({type(e).__name__})") from None
        else:
            raise ConfigError(f"backend must be onnx or torchscript for an exported model, not {backend!r}")

    def components(self) -> Components:
        """Normalizer, tokenizer and features from the file's model description; the model is its architecture
        only, on the meta device (this file holds the weights); `card` the file's."""
        comps = self._comps  # built when the file was checked
        comps.card = self.description.get("card") or {}
        return comps

    def __call__(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.backend == "onnx":
            out: Any = self.session.run(None, {"features": feats.cpu().numpy().astype(np.float32, copy=False),
                                                "lengths": lengths.cpu().numpy().astype(np.int64, copy=False)})
            return torch.from_numpy(out[0]), torch.from_numpy(out[1])
        with torch.no_grad():
            return self.module(feats, lengths)


def check_outputs(path: Path, description: dict[str, Any], shape: list[Any]) -> Components:
    """ModelFileError unless the graph's output (B, T', V) has as many symbols V as the description's alphabet (a
    shorter alphabet would index past it when decoding); the description is checked as a checkpoint's is."""
    comps = components_from_description(description, where=str(path))
    vocab = shape[-1] if shape else None
    if not isinstance(vocab, int) or vocab != comps.tokenizer.vocab_size:
        raise ModelFileError(f"{path}: its graph outputs {vocab} symbols, its description's alphabet "
                             f"{comps.tokenizer.vocab_size}; not a file speechscale export wrote")
    return comps


def torchscript_description(path: Path) -> tuple[bytes, dict[str, Any]]:
    """A TorchScript file's bytes (bounded) and the speechscale description in its archive, read as a zip record,
    without loading (loading runs its code): ModelFileError for a damaged archive or one without the description."""
    data = read_model_bytes(path, "TorchScript file")
    archive = archive_records(data, path, "TorchScript file")
    if not is_torchscript(archive):
        raise ModelFileError(f"{path}: not a TorchScript file (no code in its archive); a checkpoint is read by its "
                             "name: give it a name that does not end in .ts or .torchscript")
    prefix = archive_prefix(archive, path)
    name = f"{prefix}/extra/{META_KEY}.json"
    if name not in archive.namelist():
        raise ModelFileError(f"{path}: not a TorchScript file written by speechscale export (no model description); "
                             "refused without running its code")
    if archive.getinfo(name).file_size > MAX_DESCRIPTION_BYTES:
        raise ModelFileError(f"{path}: its model description is larger than any speechscale writes")
    try:
        description = parse_json(archive.read(name))
    except ValueError:
        raise ModelFileError(f"{path}: its speechscale model description is not JSON") from None
    if not isinstance(description, dict):
        raise ModelFileError(f"{path}: its model description is not the JSON speechscale export writes")
    for _ in walk(description, path, tensors=False):
        pass
    return data, description


MAX_DESCRIPTION_BYTES = 16 << 20


def onnx_session(path: Path, providers: list[Any], usage: str) -> tuple[Any, dict[str, Any]]:
    """An onnxruntime session of the file at `path` and the model description its metadata holds ({} for an
    ONNX file that holds none), the file checked against the CRC-32 export wrote into it first (`onnx_damage`)."""
    from ..extras import require

    ort = require("onnxruntime", "export", usage)
    size = regular_file_size(path, "exported model")
    if size > limits().max_bytes:
        raise ModelFileError(f"{path}: {size} bytes, over the {limits().max_bytes >> 20} MB a model file may have "
                             "(SPEECHSCALE_MAX_MODEL_MB raises it)")
    damage = onnx_damage(path)
    if damage:
        raise ModelFileError(f"{path} is damaged: {damage} (the bytes changed after it was exported); export it again")
    try:
        session = ort.InferenceSession(str(path), providers=providers)
    except Exception as e:  # onnxruntime raises its own types (InvalidProtobuf, InvalidArgument, Fail, ...)
        raise ModelFileError(f"{path}: not an ONNX file ({type(e).__name__})") from None
    meta = session.get_modelmeta().custom_metadata_map.get(META_KEY, "{}")
    try:
        description = parse_json(meta) if len(meta) <= MAX_DESCRIPTION_BYTES else None
    except ValueError:
        description = None
    if not isinstance(description, dict):
        raise ModelFileError(f"{path}: its model description is not the JSON speechscale export writes")
    for _ in walk(description, path, tensors=False):
        pass
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


EXPORT_SUFFIXES = {".onnx": "onnx", ".ts": "torchscript", ".torchscript": "torchscript"}


def detect_backend(path: str | Path) -> str:
    """The runtime a model file needs, from its name alone, never its contents (a TorchScript file runs code when
    loaded, so running it is the choice its name states): .onnx for onnx, .ts or .torchscript for torchscript (a
    URL's path likewise), anything else a checkpoint (torch)."""
    from urllib.parse import urlparse

    from ..storage import is_remote

    name = urlparse(str(path)).path if is_remote(path) else str(path)
    return EXPORT_SUFFIXES.get(PurePosixPath(name).suffix.lower(), "torch")


@contextmanager
def exported_file(path: str | Path) -> Iterator[Path]:
    """An exported model's local file: `path` itself, or a URL's bytes in a temporary file for the block (onnxruntime
    and torch.jit read local files); errors inside name the URL, not the copy."""
    from ..storage import is_remote

    if not is_remote(path):
        yield Path(path)
        return
    data = read_model_bytes(path, "exported model")
    with tempfile.TemporaryDirectory(prefix="speechscale-export-") as folder:
        local = Path(folder) / (PurePosixPath(str(path)).name or "model")
        local.write_bytes(data)
        try:
            yield local
        except ConfigError as e:
            raise type(e)(str(e).replace(str(local), str(path))) from None


def card_of_file(path: str | Path) -> dict[str, Any]:
    """The model card a checkpoint or exported file carries (`speechscale info`)."""
    backend = detect_backend(path)
    if backend == "torch":
        from ..components import components_from_checkpoint
        from ..storage.cards import card_of_checkpoint
        from ..storage.checkpoints import load_checkpoint

        state = load_checkpoint(path)
        comps = components_from_checkpoint(state, str(path))
        card = card_of_checkpoint(state, lambda: sum(p.numel() for p in comps.model.parameters()))
        return {**card, "streaming": comps.streaming_card()}  # the model's own, whatever its config says now
    with exported_file(path) as local:
        if backend == "onnx":  # read, not run: a streaming step's file carries its card too
            session, description = onnx_session(local, ["CPUExecutionProvider"], "an ONNX model")
            if not description:
                raise ModelFileError(f"{local}: not an ONNX file written by speechscale export (no model description)")
            if "stream_step" in description:
                from .metadata import step_problem

                problem = step_problem(description["stream_step"], [i.name for i in session.get_inputs()])
                if problem:
                    raise ModelFileError(f"{local}: its streaming step's description {problem}")
                components_from_description(description, where=str(local))
            else:
                check_outputs(local, description, session.get_outputs()[0].shape)
        else:  # read from its archive: its code never runs for a card
            _, description = torchscript_description(local)
    card = description.get("card")
    if not isinstance(card, dict):
        raise ModelFileError(f"{path}: exported before model cards; export its checkpoint again")
    return card
