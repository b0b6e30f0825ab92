"""`python -m benchmarks all --out DIR`: every bench with settings that finish in about 7 minutes on a
2-core CPU, one JSON per bench (with machine, date, commit and command), PNG plots, and the measured
tables of BENCHMARKS.md regenerated from those JSON files (benchmarks/tables.py)."""
from __future__ import annotations

import json
import logging
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from .shared import exactness_files, ldc93s1_manifest, shared_data, speech_files

log = logging.getLogger(__name__)

FSDD = shared_data("fsdd", "manifest.jsonl")

# What each bench runs inside `bench all` (the settings are written into its JSON).
SETTINGS: dict[str, dict[str, Any]] = {
    # bf16 only where it finishes: on a CPU without AVX512-BF16/AMX (this machine's AMD EPYC has AVX2), bf16
    # is emulated; one lstm-ctc-tiny bf16 step did not finish in 4 minutes.
    "train": {"models": {"ds2-tiny": ["fp32", "bf16", "fp16"], "wav2letter+-tiny": ["fp32", "bf16"], "lstm-ctc-tiny": ["fp32"]},
              "batch_size": 8, "seconds": 2.0, "steps": 8, "warmup": 2},
    "loader": {"workers": [0, 1, 2], "augment": [False, True], "limit": 120, "clip_seconds": 12.0,
               "batch_seconds": 60.0, "repeats": 3},
    "scaling": {"models": ["ds2-tiny", "wav2letter+-tiny"], "procs": [1, 2], "batch_size": 8, "seconds": 2.0,
                "steps": 5, "warmup": 2},
    # 2 learners on 2 cores (none shares a core, so the sleeping straggler frees nothing for the others; with
    # 2 learners the random ring is the fixed one). Goal fixed before measuring: the time to the target WER;
    # each run stops there, and 24 epochs is the cap (12 left 5 of 18 runs short of it on 2026-11-24).
    "straggler": {"procs": 2, "epochs": 24, "slowdown": 2.0, "seeds": [1, 2, 3], "target_wer": 0.05,
                  "strategies": ["allreduce", "adpsgd-fixed_ring", "adpsgd-delay_by_one"],
                  "config": "configs/yesno.yaml",
                  "overrides": ["data.root=../shared/data/yesno", "data.max_batch_size=2"]},
    "planner": {"validate_models": ["ds2-tiny", "wav2letter+-tiny"], "world": 2},
    "export": {"models": ["ds2-tiny", "ds2-large", "wav2letter+", "lstm-ctc"], "seconds": 5.0, "repeats": 20},
    # initial ds2-tiny weights (latency does not depend on them), a 5 s clip of JFK
    "serve": {"model": "ds2-tiny", "seconds": 5.0, "concurrency": [1, 8, 32], "requests": 64},
    # WS /v1/stream: ds2-streaming-tiny's initial weights, real speech sent in real time in 100 ms chunks; goals
    # fixed before measuring: p95 chunk-to-answer <= 150 ms with 64 streams, stream 65 refused at a limit of 64,
    # resident set growth < 50 MB over 500 streams (125 abandoned), streamed = offline in PyTorch and ONNX
    "stream": {"streams": [16, 32, 64], "seconds": 20.0, "chunk_ms": 100, "memory_streams": 500, "abandoned": 125},
    # the same bench with the streaming conformer (conformer-streaming-tiny's initial weights): measured, no goal
    "stream-conformer": {"streams": [16, 32, 64], "seconds": 20.0, "chunk_ms": 100, "memory_streams": 500,
                         "abandoned": 125, "model": "conformer-streaming-tiny"},
    # shipped recipes trained to their end (the figures the recipe tests used to re-measure)
    "recipes": {"recipes": ["yesno", "ldc93s1", "yesno-conformer", "ldc93s1-conformer"]},
    # the long ones: configs/fsdd.yaml to its end, then its `last.pt` through each decoder on nicolas; and
    # `make demo`'s synth + train (about 10 and 10-20 minutes on 2 idle cores)
    "fsdd": {"recipe": "fsdd", "lm_order": 2, "train_speakers": ["george", "jackson", "lucas"],
             "test_speakers": ["nicolas"]},
    "demo": {"recipes": ["demo"]},
    # the same with the streaming model (configs/demo_streaming.yaml), what `transcribe --stream` runs; its
    # checkpoint scored again on copies of the test set as a live microphone gives them: quieter than the corpus,
    # after a wait in the microphone's own noise, and both (benchmarks.shared.altered_manifest's arguments)
    "demo-streaming": {"recipes": ["demo_streaming"],
                       "copies": {"20 dB quieter": {"quieter_db": 20.0}, "after 2 s of silence": {"lead_s": 2.0},
                                  "20 dB quieter after 2 s of silence": {"quieter_db": 20.0, "lead_s": 2.0}}},
}
BENCHES = tuple(SETTINGS)

# Long benches, run by name only (`bench all --only NAME`), never by a plain `bench all`.
LONG_SETTINGS: dict[str, dict[str, Any]] = {
    # issue #43 §4: yesno from its manifest and from shards of 8 files, 3 seeds each (steps and WER side by side);
    # about 26 minutes on 2 cores (2026-11-27: 4 to 4.5 minutes a run)
    "yesno-shards": {"seeds": [1, 2, 3], "shard_size": 8},
    # the service for an hour under honest and hostile load at once; goals fixed before measuring: RSS
    # drift < 50 MB from minute 5, the last 10 minutes' stream p95 within 20 % of the first 10, every well-formed
    # request answered, no stream slot held past its idle limit
    "soak": {"minutes": 60.0, "interval_s": 60.0, "streams": 4},
    # bench stream on the guarded stack and on uvicorn's wsproto (the stack before), one run
    # (12 streams are about what 2 cores keep in real time: bench stream's CPU per audio second)
    "stream-stacks": {"streams": [8, 12], "seconds": 20.0, "chunk_ms": 100, "memory_streams": 200,
                      "abandoned": 50, "ws": ["guarded", "wsproto"]},
    # trainer.compile on the CPU: each tiny preset's step eager and torch.compile'd, interleaved in one process
    # (bench train --compile both), the compiled twin from the same weights on the same batches
    "train-compile": {"models": ["conformer-tiny", "wav2letter+-tiny", "lstm-ctc-tiny", "ds2-tiny"], "batch_size": 8,
                      "seconds": 2.0, "steps": 10, "warmup": 3},
}
LONG_BENCHES = tuple(LONG_SETTINGS)

# Figures made outside the package (benchmarks/*.py, which write their JSON into the same folder); only rendered here.
# align, align-long: `speechscale bench align` on trained checkpoints (align-long with --long-minutes)
# pieces-demo, pieces-demo-long: benchmarks/pieces.py (the long one with trainer.max_epochs=42 --arms 0,64)
# int8: benchmarks/int8.py (full-size speed, and trained demo models' accuracy)
# selftrain-demo: benchmarks/selftrain.py (fine-tuning on a model's own labels of the demo's unseen voice)
# longform-demo: benchmarks/longform.py (long recordings cut into training segments by align and label)
# chunking-demo, chunking-demo-connected, chunking-yesno: benchmarks/chunking.py (long recordings transcribed whole,
# cut into chunks several ways; the connected one with --gap 0,0; yesno's with --manifest, its held-out files joined
# as recorded)
# loader-remote: benchmarks/remote_shards.py (shards read over HTTP with a round trip, and the loader from them)
# load-cost: benchmarks/load_cost.py (model files read as a stranger's, against the readers before)
# segments-yesno: benchmarks/segments_yesno.py (align, label and transcribe on yesno's held-out recordings)
# dspt-streaming: benchmarks/dspt_streaming.py (a deepspeech.pytorch model's streams against its offline text)
EXTERNAL_BENCHES = ("demo-conformer-streaming", "align", "align-long", "transfer-de", "pieces-demo", "pieces-demo-long",
                    "int8", "selftrain-demo", "longform-demo", "chunking-demo", "chunking-demo-connected",
                    "chunking-yesno", "loader-remote", "load-cost", "segments-yesno", "dspt-streaming")

# `bench all --gpu`: what only a GPU shows, run on a lent one (not by `bench all` on the CPU machine).
# Full-size presets on 10 s windows of real speech, every precision interleaved step by step; "fp32" is
# what PyTorch runs by default (TF32 in cuDNN's convolutions and RNNs on Ampere and later).
_FULL = ("ds2-large", "wav2letter+", "lstm-ctc", "conformer")
GPU_SETTINGS: dict[str, dict[str, Any]] = {
    "gpu-train": {"models": {m: ["fp32", "bf16", "fp16"] for m in _FULL}, "batch_size": 32, "seconds": 10.0,
                  "steps": 10, "warmup": 3, "device": "cuda"},
    "gpu-train-b128": {"models": {m: ["fp32", "bf16"] for m in _FULL}, "batch_size": 128, "seconds": 10.0,
                       "steps": 6, "warmup": 2, "device": "cuda"},
    # issue #40: eager against CUDA-graphed (trainer.cuda_graphs) steps, interleaved; fp32 = TF32 off, tf32 = on
    "gpu-graphs": {"models": {"ds2-large": ["fp32", "tf32", "bf16", "fp32+graphs", "tf32+graphs", "bf16+graphs"],
                              **{m: ["bf16", "bf16+graphs"] for m in ("lstm-ctc", "conformer", "wav2letter+")}},
                   "batch_size": 32, "seconds": 10.0, "steps": 6, "warmup": 3, "device": "cuda"},
    "gpu-graphs-b128": {"models": {"ds2-large": ["bf16", "bf16+graphs"]}, "batch_size": 128, "seconds": 10.0,
                        "steps": 5, "warmup": 3, "device": "cuda"},
    # the exact bidirectional schemes side by side, fp16 graphed, the other families graphed (model and
    # update); inference RTFx eager against a CUDA graph and onnxruntime's CUDA provider
    "gpu-step": {"models": {"ds2-large": ["bf16", "bf16+graphs@split", "bf16+graphs@stacked", "fp16+graphs@stacked"],
                            "lstm-ctc": ["bf16+graphs@split", "bf16+graphs@stacked"],
                            **{m: ["bf16", "bf16+graphs"] for m in ("conformer", "wav2letter+")}},
                 "batch_size": 32, "seconds": 10.0, "steps": 6, "warmup": 3, "device": "cuda"},
    "gpu-infer": {"models": ["ds2-large", "conformer"], "modes": ["eager", "graphed", "onnx"], "batch_size": 32,
                  "seconds": 10.0, "steps": 4, "precision": "bf16", "device": "cuda"},
    # the yesno recipe trained to its end on the GPU in each precision, ds2-tiny and conformer-tiny
    "gpu-recipes": {"recipes": ["yesno", "yesno-conformer"], "precisions": ["fp32", "bf16", "fp16"],
                    "overrides": ["trainer.device=cuda"]},
}
GPU_BENCHES = tuple(GPU_SETTINGS)


def _train(s: dict[str, Any], out: Path, name: str = "train") -> list[dict[str, Any]]:
    from speechscale.bench.throughput import bench_train

    rows = []
    for model, precisions in s["models"].items():
        rows += bench_train(model, s["batch_size"], s["seconds"], s["steps"], s["warmup"],
                            ldc93s1_manifest(), precisions=tuple(precisions),
                            device=s.get("device", "auto"))
    from .plots import plot_train

    plot_train(rows, out / f"{name}.png")
    return rows


def _train_compile(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.throughput import bench_train

    rows = []
    for model in s["models"]:
        rows += bench_train(model, s["batch_size"], s["seconds"], s["steps"], s["warmup"], ldc93s1_manifest(),
                            device="cpu", compile_model="both")
    return rows


def _gpu_infer(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.infer import bench_infer

    return bench_infer(s["models"], s["batch_size"], s["seconds"], s["steps"], modes=tuple(s["modes"]),
                       device=s["device"], precision=s["precision"])


def _loader(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.loader import bench_loader_interleaved, flac_corpus
    from speechscale.data.shards import write_shards

    if not FSDD.is_file():
        raise FileNotFoundError(f"{FSDD}: the loader bench reads FSDD from ../shared/data")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = flac_corpus(FSDD, tmp, 16000, s["limit"], s["clip_seconds"])
        write_shards(str(manifest), Path(tmp) / "shards", shard_size=20)
        rows = bench_loader_interleaved([str(manifest), str(Path(tmp) / "shards" / "index.jsonl")], s["workers"],
                                        s["augment"], batch_seconds=s["batch_seconds"], repeats=s["repeats"])
    from .plots import plot_loader

    plot_loader(rows, out / "loader.png")
    return rows


def _scaling(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.ranks import RankLauncher
    from speechscale.bench.scaling import WORKER_IMPORTS, bench_scaling
    rows = []
    with RankLauncher(WORKER_IMPORTS) as launcher:
        for model in s["models"]:
            rows += bench_scaling(model, tuple(s["procs"]), s["batch_size"], s["seconds"], s["steps"], s["warmup"],
                                  1, ldc93s1_manifest(), launcher=launcher)
    from .plots import plot_scaling

    plot_scaling(rows, out / "scaling.png")
    return rows


def _straggler(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from speechscale.bench.straggler import bench_straggler, summarize

    with tempfile.TemporaryDirectory() as tmp:
        runs = bench_straggler(s["procs"], s["epochs"], s["slowdown"], s["config"], tmp, s["overrides"],
                               s["strategies"], seeds=s["seeds"], target_wer=s["target_wer"])
        (out / "straggler.png").write_bytes((Path(tmp) / "straggler.png").read_bytes())
    return {"target_wer": s["target_wer"], "summary": summarize(runs), "runs": runs}


def _planner(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from speechscale.bench.planner import validate_planner
    from speechscale.planning.calibration import GOAL, cases

    from .plots import plot_calibration

    result = {"goal": GOAL, "calibration": cases(), "validation": validate_planner(tuple(s["validate_models"]),
                                                                                    world=s["world"])}
    plot_calibration(result["calibration"], out / "planner.png")
    return result


def _recipes(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from .recipes import bench_recipes

    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_recipes(s["recipes"], Path(tmp))
    from .plots import plot_recipes

    plot_recipes(rows, out / "recipes.png")
    return rows


def _fsdd(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from .decoding import bench_decoding, split_manifest
    from .plots import plot_recipes
    from .recipes import RECIPES, run_recipe

    if not FSDD.is_file():
        raise FileNotFoundError(f"{FSDD}: the fsdd bench reads FSDD from ../shared/data")
    with tempfile.TemporaryDirectory() as tmp:
        row = run_recipe(s["recipe"], RECIPES[s["recipe"]], Path(tmp) / "run")
        test = Path(tmp) / "test.jsonl"
        split_manifest(FSDD, {"speaker": s["test_speakers"]}, test)
        train = split_manifest(FSDD, {"speaker": s["train_speakers"]}, Path(tmp) / "train.jsonl")
        decoders = bench_decoding(Path(tmp) / "run" / "checkpoints" / "last.pt", test, [r["text"] for r in train],
                                  Path(tmp) / "lm", s["lm_order"])
    plot_recipes([row], out / "fsdd.png")
    return {"recipe": row, "decoders": decoders}


def _demo(s: dict[str, Any], out: Path, name: str = "demo") -> list[dict[str, Any]]:
    from .plots import plot_recipes
    from .recipes import bench_recipes, score_copies

    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_recipes(s["recipes"], Path(tmp))
        for row in rows:
            run = Path(tmp) / row["recipe"]  # run_recipe's folder, the corpus synthesized in its data/
            if s.get("copies"):
                row["copies"] = score_copies(run / "checkpoints" / "last.pt", run / "data" / "test.jsonl", run,
                                             s["copies"])
    plot_recipes(rows, out / f"{name}.png")
    return rows


def _stream(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from speechscale.bench.stream import MODEL, bench_stream

    from .plots import plot_stream

    model = s.get("model", MODEL)
    result = bench_stream(None, tuple(s["streams"]), s["seconds"], s["chunk_ms"], s["memory_streams"],
                          s["abandoned"], model=model, files=speech_files(), exact_files=exactness_files())
    plot_stream(result, out / ("stream.png" if model == MODEL else "stream-conformer.png"))
    return result


def _soak(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from speechscale.bench.soak import bench_soak, plot_soak

    result = bench_soak(None, s["minutes"], s["interval_s"], s["streams"], files=speech_files())
    plot_soak(result, out / "soak.png")
    return result


def _stream_stacks(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.stream import bench_stream

    return [bench_stream(None, tuple(s["streams"]), s["seconds"], s["chunk_ms"], s["memory_streams"],
                         s["abandoned"], exact=False, ws=ws, files=speech_files()) for ws in s["ws"]]


def _yesno_shards(s: dict[str, Any], out: Path) -> dict[str, Any]:
    from .shard_seeds import bench_shard_seeds

    return bench_shard_seeds(s["seeds"], s["shard_size"])


def _gpu_recipes(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from .plots import plot_recipes
    from .recipes import RECIPES, run_recipe

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in s["recipes"]:
            for p in s["precisions"]:
                rows.append(run_recipe(name, RECIPES[name], Path(tmp) / f"{name}-{p}",
                                       [*s["overrides"], f"trainer.precision={p}"]))
    plot_recipes(rows, out / "gpu-recipes.png")
    return rows


def _export(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.export import bench_export

    from .plots import plot_export

    rows = bench_export(s["models"], s["seconds"], s["repeats"])
    plot_export(rows, out / "export.png")
    return rows


def _serve(s: dict[str, Any], out: Path) -> list[dict[str, Any]]:
    from speechscale.bench.export import initial_checkpoint
    from speechscale.bench.serve import bench_serve

    from .plots import plot_serve

    with tempfile.TemporaryDirectory() as tmp:
        ckpt, _ = initial_checkpoint(s["model"], Path(tmp) / "serve.pt")
        rows = bench_serve(str(ckpt), s["seconds"], s["concurrency"], s["requests"], files=speech_files()[:1])
    plot_serve(rows, out / "serve.png")
    return rows


RUNNERS: dict[str, Callable[[dict[str, Any], Path], Any]] = {
    "train": _train, "loader": _loader, "scaling": _scaling, "straggler": _straggler, "planner": _planner,
    "recipes": _recipes, "export": _export, "serve": _serve, "fsdd": _fsdd, "demo": _demo, "stream": _stream,
    "stream-conformer": _stream,
    "yesno-shards": _yesno_shards, "soak": _soak, "stream-stacks": _stream_stacks, "train-compile": _train_compile,
    "demo-streaming": partial(_demo, name="demo-streaming"),
    "gpu-train": partial(_train, name="gpu-train"), "gpu-train-b128": partial(_train, name="gpu-train-b128"),
    "gpu-graphs": partial(_train, name="gpu-graphs"), "gpu-graphs-b128": partial(_train, name="gpu-graphs-b128"),
    "gpu-recipes": _gpu_recipes, "gpu-step": partial(_train, name="gpu-step"), "gpu-infer": _gpu_infer}
ALL_SETTINGS = {**SETTINGS, **GPU_SETTINGS, **LONG_SETTINGS}


def run_all(out: Path, only: list[str] | None = None, command: list[str] | None = None,
            report: Callable[[str, float], None] | None = None) -> dict[str, dict[str, Any]]:
    """Run the benches (all, or `only`), writing OUT/NAME.json and OUT/NAME.png after each; returns the
    documents by name. A bench that fails is written as {"error": ...} and the others still run."""
    from speechscale.bench.harness import write_json

    out.mkdir(parents=True, exist_ok=True)
    docs = {}
    for name in only or list(BENCHES):
        started = time.perf_counter()
        try:
            results: Any = RUNNERS[name](ALL_SETTINGS[name], out)
        except Exception as e:  # one broken bench must not lose the others' figures
            log.error("bench %s failed: %s", name, e)
            results = {"error": f"{type(e).__name__}: {e}"}
        seconds = round(time.perf_counter() - started, 1)
        docs[name] = write_json(out / f"{name}.json", results, command, seconds, ALL_SETTINGS[name])
        if report:
            report(name, seconds)
    return docs


def load_docs(folder: Path, names: tuple[str, ...] = BENCHES) -> dict[str, dict[str, Any]]:
    """The bench JSON files in `folder` (of the benches `names`), by bench name."""
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in names
            if (folder / f"{name}.json").is_file()}
