"""Hostile model files built from a genuine trained run (docs/untrusted-files.md): each case is a file (or folder)
a stranger could hand to `transcribe`, `info`, `eval`, `export`, `average` or `speechscale.load`, and the words
its refusal must hold. `python -m tests.storage.hostile_models CASES.json` loads each through the API in this
process and prints one JSON line per case (what the suite runs in a child, to measure its memory and time)."""
from __future__ import annotations

import json
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

MARKER = "HOSTILE-CODE-RAN"  # what a case's code prints, or the file it touches, when it runs


def _state(ckpt: Path) -> dict[str, Any]:
    import torch

    return torch.load(ckpt, weights_only=True)  # our own run's file


def _save(state: Any, path: Path) -> Path:
    import torch

    torch.save(state, path)
    return path


def _records(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _zip(path: Path, records: dict[str, bytes], deflated: set[str] = frozenset()) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in records.items():
            z.writestr(name, data, zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED)
    return path


def _with_pickle(ckpt: Path, path: Path, pkl: bytes) -> Path:
    records = _records(ckpt)
    prefix = next(iter(records)).split("/", 1)[0]
    records[f"{prefix}/data.pkl"] = pkl
    return _zip(path, records)


class _Runs:
    """torch.save of this runs a shell command on unpickling (what weights_only=False would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.marker}",)


def _torchscript_that_runs_code(path: Path, marker: Path) -> Path:
    """A scripted module whose loading (its __setstate__) prints MARKER."""
    source = path.with_suffix(".src.py")
    source.write_text(f'''import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x

    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]):
        self.w = state[0]
        self.training = state[1]
        print("{MARKER}")


torch.jit.save(torch.jit.script(M()), {str(path)!r})
''')
    import subprocess

    subprocess.run([sys.executable, str(source)], check=True, capture_output=True, timeout=120)
    return path


def _bomb(depth: int = 9, width: int = 10) -> list[Any]:
    """A list whose shared references expand to width**depth values (small in memory, vast when copied out)."""
    node: list[Any] = ["x"] * width
    for _ in range(depth):
        node = [node] * width
    return node


def build_cases(root: Path, ckpt: Path, onnx: Path) -> list[dict[str, str]]:
    """Every file case under `root`: [{name, path, expect}] (expect: words the one-line refusal holds)."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    marker = root / MARKER
    good = _state(ckpt)
    cases: list[dict[str, str]] = []

    def case(name: str, expect: str, make: Callable[[Path], Path]) -> None:
        cases.append({"name": name, "path": str(make(root / name)), "expect": expect})

    def changed(**parts: Any) -> Callable[[Path], Path]:
        return lambda p: _save({**good, **parts}, p)

    def config(section: str, **values: Any) -> dict[str, Any]:
        cfg = json.loads(json.dumps(good["config"]))
        cfg[section].update(values)
        return cfg

    case("torchscript.pt", "a TorchScript archive, not a checkpoint", lambda p: _torchscript_that_runs_code(p, marker))
    case("foreign.ts", "not a TorchScript file written by speechscale export",
         lambda p: _torchscript_that_runs_code(p, marker))
    case("code.pt", "posix.system", lambda p: _save({**good, "card": _Runs(marker)}, p))
    # bytearray is on torch's own weights_only list: bytearray(10**11) would allocate 100 GB while unpickling
    case("bytearray.pt", "builtins.bytearray",
         lambda p: _with_pickle(ckpt, p, b"\x80\x02cbuiltins\nbytearray\n\x8a\x05\x00\xe8vH\x17\x85R."))
    # a memo index of 2**31 - 1: the C unpickler would grow its memo array to it
    case("memo.pt", "no model", lambda p: _with_pickle(ckpt, p, b"\x80\x02}r\xff\xff\xff\x7f."))
    case("inflates.pt", "is compressed", lambda p: _inflating(ckpt, p))
    case("stride0.pt", "a view larger than its bytes", lambda p: _save(
        {**good, "model": {**good["model"], "fc.weight": torch.zeros(1).expand(300_000, 1_000_000)}}, p))
    case("storage-size.pt", "its record holds", lambda p: _storage_lies(ckpt, p))
    case("layers.pt", "rnn_layers=100000 is out of range",
         changed(config=config("model", overrides={"rnn_layers": 100_000})))
    case("window.pt", "features.sample_rate=1000000000", changed(config=config("features", sample_rate=10 ** 9)))
    case("expands.pt", "expands to more than", changed(card={"notes": _bomb()}))
    case("model-list.pt", "its model is a list", changed(model=list(good["model"].values())))
    case("card-list.pt", "its card is a list", changed(card=[1, 2, 3]))
    case("training-string.pt", "its training is a str", changed(training="step 10"))
    case("weight-int.pt", "holds an int under 'extra'", changed(model={**good["model"], "extra": 5}))
    case("config-tensor.pt", "a tensor where only plain data belongs",
         changed(config=config("model", overrides={"rnn_hidden": torch.tensor(256)})))
    case("legacy.pt", "legacy format", lambda p: _legacy(p))
    case("empty.pt", "empty file", lambda p: (p.write_bytes(b""), p)[1])
    case("dev-zero", "a device, not a regular file", lambda p: Path("/dev/zero"))
    case("fifo.pt", "a FIFO, not a regular file", lambda p: (os.mkfifo(p), p)[1])
    case("short-alphabet.onnx", "its graph outputs", lambda p: _onnx_alphabet(onnx, p))
    case("junk-description.onnx", "description is not valid", lambda p: _onnx_description(onnx, p, {"config": 7}))
    return cases


def _inflating(ckpt: Path, path: Path) -> Path:
    """The run's archive with one storage record deflated from 256 MB of zeros (a zip bomb: ~250 KB on disk)."""
    records = _records(ckpt)
    prefix = next(iter(records)).split("/", 1)[0]
    records[f"{prefix}/data/0"] = bytes(256 << 20)
    return _zip(path, records, deflated={f"{prefix}/data/0"})


def _storage_lies(ckpt: Path, path: Path) -> Path:
    """The run's archive with one storage record cut to 4 bytes (its structure still claims all its elements)."""
    records = _records(ckpt)
    prefix = next(iter(records)).split("/", 1)[0]
    records[f"{prefix}/data/0"] = b"\0" * 4
    return _zip(path, records)


def _legacy(path: Path) -> Path:
    import torch

    torch.save({"model": {}, "config": {}}, path, _use_new_zipfile_serialization=False)
    return path


def _onnx_description(onnx_path: Path, path: Path, description: Any) -> Path:
    import onnx

    model = onnx.load(str(onnx_path))
    kept = [(p.key, p.value) for p in model.metadata_props if p.key != "speechscale.crc32"]  # another tool's save
    del model.metadata_props[:]
    for key, value in kept:
        model.metadata_props.add(key=key, value=json.dumps(description) if key == "speechscale" else value)
    onnx.save(model, str(path))
    return path


def _onnx_alphabet(onnx_path: Path, path: Path) -> Path:
    import onnx

    model = onnx.load(str(onnx_path))
    prop = next(p for p in model.metadata_props if p.key == "speechscale")
    desc = json.loads(prop.value)
    desc["config"]["text"]["alphabet"] = "ab "
    return _onnx_description(onnx_path, path, desc)


def run_cases(cases: list[dict[str, str]]) -> None:
    """Load each case through the API, one JSON line each: how it ended, its message, its seconds."""
    import speechscale

    for c in cases:
        start = time.monotonic()
        try:
            speechscale.load(c["path"], device="cpu")
            ended, message = "loaded", ""
        except speechscale.ModelFileError as e:
            ended, message = "refused", str(e)
        except Exception as e:  # noqa: BLE001 - what the suite must never see
            ended, message = f"raised {type(e).__name__}", str(e)
        print(json.dumps({"name": c["name"], "ended": ended, "message": message,
                          "seconds": time.monotonic() - start}), flush=True)


if __name__ == "__main__":
    run_cases(json.loads(Path(sys.argv[1]).read_text()))
