"""Reading a model file that may come from a stranger (docs/untrusted-files.md): its bytes bounded in size and time,
and a torch archive checked, structure and tensors, before torch builds anything from it.

Three promises, as safetensors makes them: no code from the file runs; nothing is allocated beyond what the file's
own bytes (and a bound derived from them) justify; every refusal is one ModelFileError line, raised before work.

    >>> limits().max_bytes >= 1 << 30
    True
"""
from __future__ import annotations

import io
import math
import os
import pickle
import re
import stat
import tempfile
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import torch

from .._compat import PARAMETER_REBUILD, TENSOR_REBUILD
from .errors import ModelFileError, error_line
from .files import is_remote

MB = 1 << 20
MAX_PICKLE_BYTES = 64 * MB   # a checkpoint's structure (data.pkl); ds2-large with its optimizer state holds ~0.2 MB
MAX_RECORDS = 100_000        # records in one archive (a tensor's storage is one)
MAX_NODES = 1_000_000        # plain-data values visited when the structure is read out, shared references repeated
MAX_DEPTH = 64               # nesting of plain data
POINTER_BYTES = 256          # a run folder's `latest` pointer
MAX_CODE_BYTES = 16 * MB     # one compressed code record of a TorchScript archive, inflated
MAX_RATIO = 200              # ... and how much it may inflate


@dataclass(frozen=True)
class Limits:
    """What one model file may cost; SPEECHSCALE_MAX_MODEL_MB, SPEECHSCALE_MAX_PARAMETERS and
    SPEECHSCALE_MODEL_URL_TIMEOUT (seconds) set them."""

    max_bytes: int          # the file itself
    max_parameters: int     # the model's parameters (the tensors under `model`)
    url_timeout: float = 15.0   # seconds one read from a URL may wait
    url_deadline: float = 600.0  # seconds for a whole URL, all tries


def limits() -> Limits:
    """The limits in force (environment variables read now; a malformed one is a ModelFileError)."""
    def number(name: str, default: float) -> float:
        raw = os.environ.get(name, "")
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ModelFileError(f"{name}={raw[:40]!r} must be a positive number")
        return value

    return Limits(max_bytes=int(number("SPEECHSCALE_MAX_MODEL_MB", 4096) * MB),
                  max_parameters=int(number("SPEECHSCALE_MAX_PARAMETERS", 1e9)),
                  url_timeout=number("SPEECHSCALE_MODEL_URL_TIMEOUT", 15.0))


# ---- bytes: a regular file or a URL, bounded in size and time

def read_model_bytes(path: str | Path, what: str = "model file") -> bytes:
    """The bytes of the local file or URL `path`, held to `limits()`: a local path must be a regular file (not a
    FIFO, device or folder, which could block or never end); an http(s) URL is fetched with timeouts, retries and a
    bounded body (storage.fetch); another fsspec URL's size is asked first and its read bounded."""
    bound = limits().max_bytes
    if is_remote(path):
        return _remote_bytes(str(path), bound, what)
    local = Path(str(path).removeprefix("file://"))
    size = regular_file_size(local, what)
    if size > bound:
        raise ModelFileError(f"{path}: {size} bytes, over the {bound >> 20} MB a {what} may have "
                             "(SPEECHSCALE_MAX_MODEL_MB raises it)")
    try:
        with open(local, "rb", opener=_opener) as f:
            data = f.read(size)  # exactly: a read of more would copy the whole file once it shrinks the buffer
            grew = f.read(1)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({error_line(e)})") from None
    if len(data) != size or grew:
        raise ModelFileError(f"{path}: changed while it was read ({size} bytes, then {len(data) + len(grew)}); read "
                             "it again")
    return data


def _opener(path: str, flags: int) -> int:
    """open() that never blocks on a FIFO or a device's open (the checks after open refuse them)."""
    return os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))


def regular_file_size(path: Path, what: str = "model file") -> int:
    """The size of local `path` when it is a regular file (links followed); ModelFileError naming what it is else."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelFileError(_not_found(path, what)) from None
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({error_line(e)})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelFileError(f"{path}: a folder, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or
                stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
        raise ModelFileError(f"{path}: {kind}, not a regular file; a {what} is read from a regular file only")
    return st.st_size


def _remote_bytes(url: str, bound: int, what: str) -> bytes:
    from .fetch import DownloadError, Policy, fetch

    lim = limits()
    if url.split("://", 1)[0].lower() in ("http", "https"):
        with tempfile.TemporaryDirectory(prefix="speechscale-model-") as tmp:
            dest = Path(tmp) / "model"
            try:
                fetch(url, dest, Policy(max_bytes=bound, timeout=lim.url_timeout, deadline=lim.url_deadline,
                                        attempts=3, bound_by=f"a {what} may have (SPEECHSCALE_MAX_MODEL_MB)",
                                        resumable=False), progress=False)
            except DownloadError as e:
                raise ModelFileError(_shortened(str(e))) from None
            return dest.read_bytes()
    import fsspec

    try:
        fs, inner = fsspec.core.url_to_fs(url)
        info = fs.info(inner)
        if info.get("type") == "directory":
            raise ModelFileError(f"{url}: a folder, not a {what}")
        size = info.get("size")
        if size is not None and int(size) > bound:
            raise ModelFileError(f"{url}: {size} bytes, over the {bound >> 20} MB a {what} may have "
                                 "(SPEECHSCALE_MAX_MODEL_MB raises it)")
        data = fs.cat_file(inner, start=0, end=bound + 1)
    except ModelFileError:
        raise
    except FileNotFoundError:
        raise ModelFileError(_not_found(url, what)) from None
    except Exception as e:  # fsspec's backends raise their own types (a missing s3fs is an ImportError)
        raise ModelFileError(_shortened(f"{url}: cannot be read ({error_line(e)})")) from None
    if len(data) > bound:
        raise ModelFileError(f"{url}: more than the {bound >> 20} MB a {what} may have (SPEECHSCALE_MAX_MODEL_MB "
                             "raises it)")
    return data


def _not_found(path: str | Path, what: str) -> str:
    return f"{what} not found: {path}" if what == "checkpoint" else f"{path}: no such {what}"


def _shortened(text: str, most: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= most else line[:most - 3] + "..."


# ---- a torch archive (torch.save's zip format), checked before torch.load

TORCHSCRIPT_RECORDS = re.compile(r"[^/]+/(code/|constants\.pkl$)")


def archive_records(data: bytes, path: str | Path, what: str = "checkpoint") -> zipfile.ZipFile:
    """The zip archive of `data`, its records checked as torch writes them: stored (never compressed, so no record
    inflates past the file), their sizes within the file, each record's CRC-32 where the writer stored one (torch.load
    checks none: a flipped bit loads as a changed weight)."""
    if not data.startswith(b"PK\x03\x04"):
        if data.startswith(b"\x80"):
            raise ModelFileError(f"{path}: torch's legacy format (before torch 1.6), which speechscale does not read; "
                                 "load and save it with a torch you trust")
        raise ModelFileError(f"{path} is not a {what}: not a file torch.save writes (a checkpoint is the .pt file "
                             "`speechscale train` writes)")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        records = archive.infolist()
    except Exception as e:  # noqa: BLE001 - zipfile raises BadZipFile, ValueError, struct.error ...
        raise ModelFileError(f"{path} is not a {what}: its zip archive is torn or malformed ({error_line(e)}); a torn "
                             "write? resume=auto passes over such files") from None
    if what == "checkpoint" and is_torchscript(archive):
        raise ModelFileError(f"{path}: a TorchScript archive, not a checkpoint; TorchScript is code, which speechscale "
                             "runs only from a file named .ts or .torchscript that `speechscale export` wrote (rename "
                             "it so only if you trust where it came from)")
    if len(records) > MAX_RECORDS:
        raise ModelFileError(f"{path}: {len(records)} records, more than a {what} holds ({MAX_RECORDS})")
    for r in records:
        if r.compress_type != zipfile.ZIP_STORED or r.file_size != r.compress_size:
            # torch.save stores every record; torch.jit.save deflates its code, which stays small
            code = what != "checkpoint" and r.compress_type == zipfile.ZIP_DEFLATED and "/code/" in r.filename
            if not code:
                raise ModelFileError(f"{path}: its record {_shortened(r.filename, 80)} is compressed, which torch "
                                     f"never writes there (it could inflate past the file); refused")
            if r.file_size > MAX_CODE_BYTES or r.file_size > MAX_RATIO * max(r.compress_size, 1):
                raise ModelFileError(f"{path}: its record {_shortened(r.filename, 80)} inflates to {r.file_size} bytes "
                                     f"from {r.compress_size}, past any code torch writes; refused")
        if r.header_offset + r.compress_size > len(data):
            raise ModelFileError(f"{path}: its record {_shortened(r.filename, 80)} claims more bytes than the file "
                                 "holds; torn or malformed")
    damaged = damaged_in(archive)
    if damaged:
        raise ModelFileError(f"{path} is damaged: its record {damaged} does not match the CRC-32 written with it "
                             f"(the bytes changed after it was written); resume=auto passes over such files")
    return archive


def damaged_in(archive: zipfile.ZipFile) -> str | None:
    """The first record whose bytes fail its stored CRC-32 (records stored with CRC 0 are not checked: torch's
    set_crc32_options(False) writes none)."""
    for record in archive.infolist():
        if record.CRC == 0 and record.file_size:
            continue
        try:
            with archive.open(record) as f:  # zipfile compares the CRC when the record's end is read
                while f.read(1 << 22):
                    pass
        except zipfile.BadZipFile:
            return record.filename
        except Exception:  # noqa: BLE001 - torn inside a record: the structure check names it
            return None
    return None


def record_bytes(data: bytes, record: zipfile.ZipInfo) -> memoryview:
    """A stored record's bytes, sliced from the archive's (zipfile's own read would refuse a record torch wrote with
    CRC 0, and the CRCs were checked where stored)."""
    if record.compress_type != zipfile.ZIP_STORED:
        raise ModelFileError(f"its record {_shortened(record.filename, 80)} is compressed")
    at = record.header_offset
    if data[at:at + 4] != b"PK\x03\x04":
        raise ModelFileError(f"its record {_shortened(record.filename, 80)} has no local header where listed")
    begin = at + 30 + int.from_bytes(data[at + 26:at + 28], "little") + int.from_bytes(data[at + 28:at + 30], "little")
    return memoryview(data)[begin:begin + record.compress_size]  # no copy


def is_torchscript(archive: zipfile.ZipFile) -> bool:
    """Whether the archive holds TorchScript code (which runs when torch.jit loads it)."""
    return any(TORCHSCRIPT_RECORDS.match(n) for n in archive.namelist())


def archive_prefix(archive: zipfile.ZipFile, path: str | Path) -> str:
    """The one top folder every record of a torch archive sits in."""
    names = archive.namelist()
    prefix = names[0].split("/", 1)[0] if names and "/" in names[0] else ""
    if not prefix or any(not n.startswith(prefix + "/") for n in names):
        raise ModelFileError(f"{path}: its records are not in one folder, as torch.save writes them")
    return prefix


# The only objects a speechscale checkpoint's structure names besides plain data: ordered mappings, tensors (a
# storage and a view of it) and parameters. Anything else is refused by name before torch.load sees the file.
_STORAGES = ("BFloat16Storage", "BoolStorage", "ByteStorage", "CharStorage", "DoubleStorage", "FloatStorage",
             "HalfStorage", "IntStorage", "LongStorage", "ShortStorage", "ComplexFloatStorage", "ComplexDoubleStorage")


@dataclass(frozen=True)
class _StorageType:
    name: str
    itemsize: int


@dataclass(frozen=True)
class _Storage:
    key: str
    numel: int
    values: Any  # the record's bytes as a 1-D tensor of the storage's dtype


_STORAGE_DTYPES: dict[str, Any] = {}


def _storage_dtypes() -> dict[str, Any]:
    if not _STORAGE_DTYPES:
        _STORAGE_DTYPES.update({
            "BFloat16Storage": torch.bfloat16, "BoolStorage": torch.bool, "ByteStorage": torch.uint8,
            "CharStorage": torch.int8, "DoubleStorage": torch.float64, "FloatStorage": torch.float32,
            "HalfStorage": torch.float16, "IntStorage": torch.int32, "LongStorage": torch.int64,
            "ShortStorage": torch.int16, "ComplexFloatStorage": torch.complex64,
            "ComplexDoubleStorage": torch.complex128})
    return _STORAGE_DTYPES


class _Reader(pickle._Unpickler):  # the pure-Python unpickler: its memo is a dict (the C one allocates by index)
    """Reads a checkpoint's structure as torch.load would, knowing only ordered mappings, typed storages and tensor
    views: each storage is checked against its record before its bytes are taken, each view against its storage
    before it is made, and any other global is refused by name (never imported)."""

    def __init__(self, data: bytes, pkl: memoryview, records: dict[str, zipfile.ZipInfo],
                 foreign: Callable[[str], Any] | None = None) -> None:
        super().__init__(io.BytesIO(pkl))  # type: ignore[arg-type]
        self.data, self.records = data, records  # the archive's bytes; storage key -> its record
        self.storages: dict[str, _Storage] = {}
        self.foreign = foreign  # another tool's names -> inert stand-ins (None: a speechscale checkpoint's only)
        self.foreign_seen: list[str] = []  # the foreign names the structure used, in order

    def find_class(self, module: str, name: str) -> Any:
        module = "builtins" if module == "__builtin__" else module  # protocol 2 names Python 2's module
        dotted = f"{module}.{name}"
        stand_in = self.foreign(dotted) if self.foreign is not None else None
        if stand_in is not None:
            self.foreign_seen.append(dotted)
            return stand_in
        if dotted == "collections.OrderedDict":
            return OrderedDict
        if module == "torch" and name in _STORAGES:
            return _StorageType(name, _element_size(_storage_dtypes()[name]))
        if dotted == TENSOR_REBUILD:
            return _tensor
        if dotted == PARAMETER_REBUILD:
            return _parameter
        raise pickle.UnpicklingError(f"it names {_shortened(dotted, 80)}, which a speechscale checkpoint never holds "
                                     "(refused without running or building it)")

    def load_build(self) -> None:
        """BUILD sets the state of an ordered mapping (its attributes, as torch's state dicts carry `_metadata`) or of a
        stand-in that takes one; on anything else (a rebuild function, a storage type) it is refused."""
        state, inst = self.stack.pop(), self.stack[-1]
        if type(inst) is OrderedDict and isinstance(state, dict) and all(isinstance(k, str) for k in state):
            inst.__dict__.update(state)
        elif getattr(type(inst), "takes_state", False):  # a foreign stand-in (Foreign)
            inst.__setstate__(state)
        else:
            raise pickle.UnpicklingError(f"it sets the state of {_kind(inst)}, which no checkpoint does")

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]
    dispatch[pickle.BUILD[0]] = load_build

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and isinstance(pid[2], str) and isinstance(pid[4], int) and pid[4] >= 0):
            raise pickle.UnpicklingError("a storage reference torch.save does not write")
        kind, key, numel = pid[1], pid[2], pid[4]
        record = self.records.get(key)
        if record is None:
            raise pickle.UnpicklingError(f"a storage whose record data/{_shortened(key, 40)} is not in the archive")
        if record.file_size != numel * kind.itemsize:
            raise pickle.UnpicklingError(f"storage data/{_shortened(key, 40)} claims {numel} elements of "
                                         f"{kind.itemsize} bytes; its record holds {record.file_size} bytes")
        if key not in self.storages:
            dtype = _storage_dtypes()[kind.name]
            raw = bytearray(record_bytes(self.data, record))  # one copy: writable, owned by the tensor
            values = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
            self.storages[key] = _Storage(key, numel, values)
        return self.storages[key]


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False, hooks: Any = None,
            metadata: Any = None) -> torch.Tensor:
    """A view of `storage` as torch.save described it, once it is shown to lie inside the storage."""
    ints = (isinstance(offset, int) and isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) and len(size) <= 16
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, *size, *stride)))
    if not isinstance(storage, _Storage) or not ints or not isinstance(requires_grad, bool):
        raise pickle.UnpicklingError("a tensor whose storage, offset, shape or strides are not torch.save's")
    if hooks or metadata:
        raise pickle.UnpicklingError("a tensor with hooks or metadata, which a checkpoint never holds")
    numel = math.prod(size)
    if numel:
        span = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1  # elements the view reaches
        if span > storage.numel or numel > storage.numel:
            raise pickle.UnpicklingError(f"a tensor of shape {list(size)[:8]} claims {numel} elements over a "
                                         f"storage of {storage.numel} (a view larger than its bytes)")
    t = storage.values.as_strided(size, stride, offset if numel else 0)
    return t.requires_grad_() if requires_grad and t.is_floating_point() else t


def _parameter(data: Any, requires_grad: Any = False, hooks: Any = None, *state: Any) -> Any:
    if not isinstance(data, torch.Tensor) or hooks or state:
        raise pickle.UnpicklingError("a parameter that is not a plain tensor")
    return data


_ELEMENT_SIZES: dict[Any, int] = {}


def _element_size(dtype: Any) -> int:
    if dtype not in _ELEMENT_SIZES:
        _ELEMENT_SIZES[dtype] = torch.empty(0, dtype=dtype).element_size()
    return _ELEMENT_SIZES[dtype]


@dataclass
class Structure:
    """A checkpoint as read: plain data and tensors, checked."""

    tree: Any
    parameters: int      # elements of the tensors under `model`
    tensor_bytes: int    # bytes all tensors claim, shared references counted each time
    foreign: list[str] = field(default_factory=list)  # another tool's names its structure used (read_archive)


class Foreign(Protocol):
    """The names another tool's checkpoints hold (storage/deepspeech_pytorch.py): an inert stand-in for each one it
    knows (None for the rest, which are refused), and the tree turned into plain data and tensors once read."""

    def stand_in(self, dotted: str) -> Any: ...

    def plain(self, tree: Any) -> Any: ...


def read_archive(data: bytes, archive: zipfile.ZipFile, path: str | Path, foreign: Foreign | None = None) -> Structure:
    """The checkpoint held by torch archive `archive` (its bytes `data`), read in place of torch.load: only ordered
    mappings, tensors and plain data; every storage the size of its record; every view within its storage; the
    plain data within MAX_NODES and MAX_DEPTH when read out; little-endian, as torch writes it here. `foreign`: the
    names another tool's checkpoints hold besides, each read as an inert stand-in and turned into plain data
    (Structure.foreign lists those met)."""
    prefix = archive_prefix(archive, path)
    info = {r.filename: r for r in archive.infolist()}
    pkl = info.get(f"{prefix}/data.pkl")
    if pkl is None:
        raise ModelFileError(f"{path} is not a checkpoint: no data.pkl in its archive")
    if pkl.file_size > MAX_PICKLE_BYTES:
        raise ModelFileError(f"{path}: its structure (data.pkl) is {pkl.file_size >> 20} MB, more than a checkpoint's "
                             f"{MAX_PICKLE_BYTES >> 20} MB")
    order = info.get(f"{prefix}/byteorder")
    records = {n[len(prefix) + 6:]: r for n, r in info.items() if n.startswith(f"{prefix}/data/")}
    try:
        if order is not None and bytes(record_bytes(data, order)) != b"little":
            raise ModelFileError("its tensors are not little-endian")
        structure = record_bytes(data, pkl)
    except ModelFileError as e:
        raise ModelFileError(f"{path}: {e}") from None
    try:
        reader = _Reader(data, structure, records, foreign.stand_in if foreign is not None else None)
        tree = reader.load()
        if foreign is not None and reader.foreign_seen:
            tree = foreign.plain(tree)
    except ModelFileError:
        raise
    except pickle.UnpicklingError as e:
        raise ModelFileError(f"{path} is not a speechscale checkpoint: {_shortened(str(e), 200)}") from None
    except RecursionError:
        raise ModelFileError(f"{path}: its structure is nested too deeply to read") from None
    except Exception as e:  # noqa: BLE001 - a malformed pickle raises many types (EOFError, KeyError, ...)
        raise ModelFileError(f"{path} is not a speechscale checkpoint: its structure does not read "
                             f"({error_line(e)[:120]})") from None
    budget = 4 * len(data) + MB
    tensor_bytes = 0
    for value, _ in walk(tree, path):
        if isinstance(value, torch.Tensor):
            tensor_bytes += value.numel() * value.element_size()
            if tensor_bytes > budget:
                raise ModelFileError(f"{path}: its tensors claim more bytes than the file holds (shared references "
                                     "read out many times); refused")
    model = tree.get("model") if isinstance(tree, dict) else None
    parameters = sum(v.numel() for v in model.values() if isinstance(v, torch.Tensor)) if isinstance(model, dict) \
        else 0
    return Structure(tree, parameters, tensor_bytes, reader.foreign_seen)


PLAIN = (str, int, float, bool, type(None), bytes)


def walk(tree: Any, path: str | Path, tensors: bool = True) -> Iterator[tuple[Any, int]]:
    """Every value of `tree` with its depth, as a reader that copies it out would visit them (shared references each
    time): ModelFileError past MAX_NODES or MAX_DEPTH, or at a value that is not plain data (nor a tensor, when
    `tensors`)."""
    stack: list[tuple[Any, int]] = [(tree, 0)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ModelFileError(f"{path}: its data expands to more than {MAX_NODES} values when read out (shared "
                                 "references nested in each other); refused")
        if depth > MAX_DEPTH:
            raise ModelFileError(f"{path}: its data is nested more than {MAX_DEPTH} levels deep; refused")
        yield value, depth
        if isinstance(value, dict):
            extra = vars(value) if type(value) is OrderedDict and hasattr(value, "__dict__") else {}
            for k, v in [*value.items(), *extra.items()]:
                if not isinstance(k, (str, int)):
                    raise ModelFileError(f"{path}: a mapping key of type {type(k).__name__}; refused")
                stack.append((v, depth + 1))
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, torch.Tensor):
            if not tensors:
                raise ModelFileError(f"{path}: a tensor where only plain data belongs; refused")
        elif not isinstance(value, PLAIN):
            raise ModelFileError(f"{path}: a value of type {type(value).__name__} where only plain data belongs")


# what each top-level entry of a checkpoint is (storage/checkpoints.py, training/state.py): a mapping of tensors,
# plain data, or data that holds tensors (optimizer moments, RNG states)
TENSORS_ONLY = ("model",)
PLAIN_MAPPINGS = ("config", "meta", "card", "training", "precision", "sampler")
HOLDS_TENSORS = ("optimizer", "ema")


def check_layout(structure: Structure, path: str | Path) -> None:
    """The checkpoint's top-level entries are what speechscale writes: `model` a non-empty mapping of names to
    tensors within the parameter bound, `config` (or format 2's `meta`) plain data, the card, training state and
    the rest mappings of the right kind; one ModelFileError line naming the first entry that is not."""
    tree = structure.tree
    if not isinstance(tree, dict):
        raise ModelFileError(f"{path} is not a speechscale checkpoint: it holds a {type(tree).__name__}, not a mapping")
    missing = [k for k in ("model", "config") if k not in tree and not (k == "config" and "meta" in tree)]
    if missing:
        raise ModelFileError(f"{path} is not a speechscale checkpoint (no {', '.join(missing)} in it)")
    model = tree["model"]
    if not isinstance(model, dict):
        raise ModelFileError(f"{path}: its model is {_kind(model)}, not the mapping of tensors speechscale writes")
    bad = next((k for k, v in model.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise ModelFileError(f"{path}: its model holds {_kind(model[bad])} under {_shortened(str(bad), 60)!r}, "
                             "where only tensors belong")
    bound = limits().max_parameters
    if structure.parameters > bound:
        raise ModelFileError(f"{path}: a model of {structure.parameters} parameters, over the {bound} allowed "
                             "(SPEECHSCALE_MAX_PARAMETERS raises it)")
    for key in PLAIN_MAPPINGS + HOLDS_TENSORS:
        if key in tree and not isinstance(tree[key], dict):
            raise ModelFileError(f"{path}: its {key} is {_kind(tree[key])}, not the mapping speechscale writes")
        if key in PLAIN_MAPPINGS and key in tree:
            for _ in walk(tree[key], f"{path}: its {key}", tensors=False):
                pass
    if "ranks" in tree and not (isinstance(tree["ranks"], list) and all(isinstance(r, dict) for r in tree["ranks"])):
        raise ModelFileError(f"{path}: its ranks are {_kind(tree['ranks'])}, not the list of mappings speechscale writes")
    for key in ("format_version", "world_size"):
        if key in tree and (not isinstance(tree[key], int) or isinstance(tree[key], bool) or tree[key] < 0):
            raise ModelFileError(f"{path}: its {key} is {_kind(tree[key])}, not a count")


def _kind(value: Any) -> str:
    """What a value is, as a refusal names it."""
    if isinstance(value, torch.Tensor):
        return "a tensor"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}" if value is not None else "null"
