"""What reading a model file as a stranger's costs (docs/untrusted-files.md), side by side in one process: the
checked readers against the readers before them (a CRC-32 pass, then torch.load(weights_only=True); for an export,
its session or torch.jit.load and the components its description builds, as transcribe needs them), best of N,
each pair interleaved.

    python -m benchmarks.load_cost --run RUN_FOLDER [--repeats 7] [--out docs/figures/bench-all/load-cost.json]
"""
from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable

from benchmarks.checkout import pin_commit, record


def _crc_pass(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for r in z.infolist():
            if r.CRC or not r.file_size:
                with z.open(r) as f:
                    while f.read(1 << 22):
                        pass


def _before_checkpoint(path: Path) -> Any:
    import torch

    data = path.read_bytes()
    _crc_pass(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _before_torchscript(path: Path) -> Any:
    import torch

    from speechscale.components import components_from_description

    data = path.read_bytes()
    _crc_pass(data)
    extra = {"speechscale.json": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = torch.jit.load(io.BytesIO(data), map_location="cpu", _extra_files=extra)
    return module, components_from_description(json.loads(extra["speechscale.json"]))


def _before_onnx(path: Path) -> Any:
    import onnxruntime as ort

    from speechscale.components import components_from_description
    from speechscale.export.runtime import onnx_damage

    onnx_damage(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    description = json.loads(session.get_modelmeta().custom_metadata_map["speechscale"])
    return session, components_from_description(description)


def _best(pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], repeats: int) -> dict[str, Any]:
    rows = {}
    for name, (before, checked) in pairs.items():
        times: dict[str, list[float]] = {"before_s": [], "checked_s": []}
        for _ in range(repeats):
            for key, fn in (("before_s", before), ("checked_s", checked)):
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
        best = {k: min(v) for k, v in times.items()}
        rows[name] = {**best, "ratio": best["checked_s"] / best["before_s"]}
        print(json.dumps({"file": name, **rows[name]}), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    import torch

    from speechscale.components import build_components
    from speechscale.config import to_dict
    from speechscale.export.exporter import export_model
    from speechscale.export.runtime import ExportedModel
    from speechscale.recipe import load_recipe
    from speechscale.storage.checkpoints import load_checkpoint

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a trained run's folder (its checkpoints/last.pt is read)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    pin_commit()
    began = time.perf_counter()
    torch.set_num_threads(1)
    last = Path(args.run) / "checkpoints" / "last.pt"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cfg = load_recipe(None, ["model.name=ds2-large"])
        large = folder / "ds2-large.pt"
        torch.save({"format_version": 3, "config": to_dict(cfg),
                    "model": build_components(cfg).model.state_dict()}, large)
        onnx, ts = folder / "m.onnx", folder / "m.ts"
        export_model(str(last), "onnx", onnx)
        export_model(str(last), "torchscript", ts)
        pairs = {
            "run checkpoint (ds2-tiny, with optimizer state)": (lambda: _before_checkpoint(last),
                                                                 lambda: load_checkpoint(last)),
            "ds2-large checkpoint (59 M parameters)": (lambda: _before_checkpoint(large), lambda: load_checkpoint(large)),
            "ONNX export (ds2-tiny)": (lambda: _before_onnx(onnx), lambda: ExportedModel(onnx, "onnx").components()),
            "TorchScript export (ds2-tiny)": (lambda: _before_torchscript(ts),
                                              lambda: ExportedModel(ts, "torchscript").components()),
        }
        rows = _best(pairs, args.repeats)
    if args.out:
        record(args.out, "benchmarks.load_cost", argv, [{"file": name, **row} for name, row in rows.items()],
               {"repeats": args.repeats, "threads": 1}, began)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
