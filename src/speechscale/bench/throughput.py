"""Steady-state training throughput of model presets in several precisions, side by side, with MFU.

    speechscale bench train --model ds2-tiny,wav2letter+-tiny --precision fp32,bf16 --batch-size 8 --seconds 2

Batches are real audio cut from `--manifest`'s recordings, else synthesized noise; the data phase includes loading,
features and the copy to the device. The modes run interleaved step by step in one process (bench/harness.py,
rotating order), so machine noise hits them alike; figures are medians over the timed steps, with the 10th-90th
percentile range. MFU is the analytic training FLOPs per second (models/flops.py) over the device peak:
`--peak-tflops` when given, else a matmul measured here in the mode's dtype (stated in the output as peak_source).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..components import build_components
from ..config import Config, from_dict
from ..data.audio import load_audio
from ..data.dataset import Batch
from ..distributed.strategy import LocalStrategy
from ..models.registry import RECOMMENDED_FEATURES
from ..models.rnn import BIDIRECTIONAL_SCHEMES, set_bidirectional_scheme
from ..training.optim import build_optimizer
from ..training.precision import Precision, resolve_device
from ..training.recompute import recompute_blocks, saved_bytes
from ..training.step import EagerStep, GraphedStep
from .harness import interleave, keeps_torch_threads

TEXT = "she had your dark suit in greasy wash water all year"


PHASES = ("data", "forward", "backward", "optimizer")  # what one timed step reports, in order


def _clips(manifest: str | None, sample_rate: int, seconds: float, n: int, seed: int) -> list[np.ndarray]:
    """`n` clips of `seconds` each: windows of real recordings, or noise when no manifest is given."""
    rng = np.random.default_rng(seed)
    need = int(seconds * sample_rate)
    if manifest:
        from ..data.manifest import read_manifest

        utts, _ = read_manifest(manifest)
        audio = np.concatenate([load_audio(u.audio_path, sample_rate) for u in utts[:50]])
        while audio.shape[0] < need + 1:
            audio = np.concatenate([audio, audio])
        starts = rng.integers(0, audio.shape[0] - need, size=n)
        return [audio[s:s + need].copy() for s in starts]
    return [rng.standard_normal(need).astype(np.float32) * 0.1 for _ in range(n)]


def targets(comps: Any, seconds: float, batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A label CTC can align to `seconds` of audio (a third of the model's output frames), for every
    utterance of the batch: (targets on `device`, target lengths on the CPU)."""
    out_frames = comps.output_frames([seconds])[0]
    text = (TEXT * (1 + out_frames // len(TEXT)))[: max(1, out_frames // 3)]
    tgt = torch.tensor(comps.tokenizer.encode(text) * batch_size, device=device)
    return tgt, torch.full((batch_size,), len(text), dtype=torch.long)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def kernel_profile(step: Callable[[], Any], device: torch.device, top_kernels: int = 8) -> dict[str, Any]:
    """Run `step` once more under torch.profiler: how many kernels and copies it put on the GPU, their
    summed time, and the `top_kernels` names that took most of it (summed over their launches). Against the
    step's wall clock this says whether the GPU or the host that feeds it is the bottleneck (a GPU busy for a
    fraction of the step waits on kernel launches)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        _sync(device)
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    per_name: dict[str, list[float]] = {}
    for e in events:
        per_name.setdefault(e.name[:80], []).append(e.time_range.elapsed_us() / 1000)
    top = sorted(per_name.items(), key=lambda kv: -sum(kv[1]))[:top_kernels]
    return {"gpu_kernels_per_step": len(events),
            "gpu_busy_ms": round(sum(e.time_range.elapsed_us() for e in events) / 1000, 1),
            "gpu_top_kernels": [{"kernel": k, "ms": round(sum(v), 2), "count": len(v)} for k, v in top]}


def matmul_peak_tflops(device: torch.device, dtype: torch.dtype, repeats: int = 3) -> float:
    """Best TFLOP/s of a large square matmul in `dtype` on `device`: the practical ceiling for MFU. The size
    grows from 256 until one product takes 50 ms (at most 8192 on a GPU, 2048 on a CPU), so a dtype
    without fast kernels (bf16 on a CPU without AVX512-BF16) costs seconds, not minutes."""
    limit = 8192 if device.type == "cuda" else 2048
    n = 256
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        (a @ b)
        _sync(device)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            (a @ b)
            _sync(device)
            best = min(best, time.perf_counter() - t0)
        if best >= 0.05 or n >= limit:
            return 2 * n ** 3 / best / 1e12
        n *= 2


BENCH_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def mode_parts(mode: str) -> tuple[str, bool, bool]:
    """A bench mode -> (the precision it trains in, whether TF32 is allowed, whether CUDA graphs replay the model).

    "fp32" is true fp32 on a CUDA device (TF32 off in matmuls and cuDNN), "tf32" fp32 with TF32 on, "bf16"/"fp16"
    autocast with TF32 on for what stays fp32; a "+graphs" suffix replays the model per fixed batch shape; an
    "@SCHEME" suffix (models/rnn.py's BIDIRECTIONAL_SCHEMES) picks how the padded path runs both directions."""
    base, _, extra = mode.partition("@")[0].partition("+")
    if extra not in ("", "graphs") or base not in BENCH_PRECISIONS:
        raise ValueError(f"bench mode {mode!r}: use one of {', '.join(BENCH_PRECISIONS)}, optionally +graphs")
    return ("fp32" if base == "tf32" else base), base != "fp32", extra == "graphs"


def bench_modes(precisions: list[str], graphs: str, schemes: list[str], cuda: bool) -> tuple[str, ...]:
    """The modes `bench train` runs for these precisions, `--graphs` (off, on, both) and bidirectional schemes (one
    graphed mode each; none: the layers' own), each eager mode first so that its graphed rows report their ratio;
    fp32, the reference of every ratio, leads. A precision may also be a whole mode (`fp16+graphs@stacked`), run as
    it is. `cuda`: whether the bench runs on a CUDA device. A one-line ConfigError for what cannot run."""
    from ..config import ConfigError, check_choice

    for p in precisions:
        if "+" in p or "@" in p:
            try:
                mode_parts(p)
            except ValueError as e:
                raise ConfigError(f"--precision: {e}") from None
            scheme = p.partition("@")[2]
            if scheme:
                check_choice("--precision's scheme", scheme, BIDIRECTIONAL_SCHEMES)
        else:
            check_choice("--precision", p, BENCH_PRECISIONS)
    modes = tuple(sorted(precisions, key=lambda p: p != "fp32"))
    if not cuda and (graphs != "off" or any("+graphs" in p for p in modes)):
        raise ConfigError("--graphs needs a CUDA device (CUDA graphs); use --graphs off")
    if graphs == "off":
        return modes
    graphed = tuple(f"{p}+graphs{x}" for p in modes if "+" not in p for x in ([f"@{s}" for s in schemes] or [""]))
    return graphed if graphs == "on" else modes + graphed


COMPILED = " compiled"  # the key suffix of a compiled mode run beside its eager twin (compile_model="both")
RECOMPUTED = " recomputed"  # ... of a mode with activation checkpointing beside its plain twin (recompute="both")


def _set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


class _Mode:
    """One mode's model, optimizer and timers (mode: a precision, optionally "+graphs"; see mode_parts)."""

    def __init__(self, mode: str, cfg: Config, device: torch.device, compile_mode: str | None,
                 recompute: bool = False) -> None:
        mode, _, self.scheme = mode.partition("@")
        precision, self.tf32, self.graphed = mode_parts(mode)
        if self.graphed and device.type != "cuda":
            raise ValueError(f"bench mode {mode!r}: CUDA graphs need a CUDA device")
        if self.graphed and recompute:
            raise ValueError(f"bench mode {mode!r}: CUDA graphs stay off with activation checkpointing")
        torch.manual_seed(0)
        self.comps = build_components(cfg)
        self.model = self.comps.model.to(device).train()
        self.recompute = recompute
        if recompute:
            recompute_blocks(self.model)
        if self.scheme:  # the padded path's bidirectional scheme (what graphed steps run)
            set_bidirectional_scheme(self.model, self.scheme)
        self.forward = self.model if compile_mode is None else torch.compile(
            self.model, dynamic=False, mode=None if compile_mode == "default" else compile_mode)
        self.compile_mode = compile_mode
        self.graphs = compile_mode == "reduce-overhead"  # CUDA graphs: each step must say where it begins
        self.opt = build_optimizer(self.model, cfg.optim)
        self.precision = Precision(precision, device)
        self.marks: dict[str, float] = {}  # phase -> the time it ended (the step's clock)

        def clock(phase: str) -> None:
            _sync(device)
            self.marks[phase] = time.perf_counter()

        # the trainer's step (grad_clip from the recipe's default), timed phase by phase
        self.step = (GraphedStep(self.model, self.opt, self.precision, LocalStrategy(), cfg.optim.grad_clip, device,
                                 clock=clock) if self.graphed else
                     EagerStep(self.model, self.forward, self.opt, self.precision, LocalStrategy(),
                               cfg.optim.grad_clip, device, clock=clock))
        self.losses: list[float] = []


def _activation_bytes(m: _Mode, clips: list[Any], comps: Any, dev: torch.device) -> int:
    """Bytes autograd keeps for one forward of mode `m`'s model on the bench's batch (training.recompute's
    saved_bytes), in the mode's precision; the graph is dropped after."""
    feats = torch.stack([comps.features(torch.from_numpy(c)) for c in clips]).to(dev)  # (B, F, T)
    lens = torch.full((len(clips),), feats.shape[-1], dtype=torch.long)
    with m.precision.autocast():
        return saved_bytes(lambda: m.model(feats, lens))


@keeps_torch_threads
def bench_config(model: str, overrides: dict[str, Any] | None = None) -> Config:
    """The config a training bench of preset `model` runs: its recommended features, `overrides` applied."""
    return from_dict(Config, {"model": {"name": model, "overrides": overrides or {}},
                              "features": RECOMMENDED_FEATURES.get(model, {})})


def bench_train(model: str = "ds2-tiny", batch_size: int = 8, seconds: float = 2.0, steps: int = 5,
                warmup: int = 2, manifest: str | None = None, threads: int = 0,
                overrides: dict[str, Any] | None = None, precisions: tuple[str, ...] = ("fp32",),
                device: str = "auto", peak_tflops: float | None = None, compile_model: bool | str = False,
                recompute: str = "off") -> list[dict[str, Any]]:
    """Time `steps` training steps per precision after `warmup`, interleaved; one result dict per mode, with the
    bytes of activations autograd keeps for one step (`activations_mb`). `compile_model`: torch.compile's mode
    (True: its default), or "both": each mode eager and compiled (default mode), the compiled row with its
    `compile_speedup` over the eager one. `recompute`: activation checkpointing off, on, or "both": each mode plain
    and recomputed, the recomputed row with its `recompute_speed` relative to the plain one."""
    if recompute not in ("off", "on", "both"):
        raise ValueError(f"recompute: off, on or both, not {recompute!r}")
    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    cfg = bench_config(model, overrides)
    compile_mode = "default" if compile_model is True else (compile_model or None)  # e.g. "reduce-overhead"
    if compile_mode == "both" and recompute == "both":
        raise ValueError("compile both and recompute both: one side-by-side comparison at a time")
    if compile_mode == "both":  # each precision eager, then compiled: "fp32" and "fp32 compiled"
        variants = [("", None, recompute == "on"), (COMPILED, "default", recompute == "on")]
    elif recompute == "both":  # each precision plain, then recomputed: "fp32" and "fp32 recomputed"
        variants = [("", compile_mode, False), (RECOMPUTED, compile_mode, True)]
    else:
        variants = [("", compile_mode, recompute == "on")]
    modes = {f"{p}{suffix}": _Mode(p, cfg, dev, mode, rc) for p in precisions for suffix, mode, rc in variants}
    comps = next(iter(modes.values())).comps
    clips = _clips(manifest, comps.features.cfg.sample_rate, seconds, batch_size, seed=0)
    tgt, tgt_lens = targets(comps, seconds, batch_size, dev)
    frames = 0

    def one_step(m: _Mode) -> dict[str, float]:
        """One training step of mode `m`; seconds per phase."""
        nonlocal frames
        t0 = time.perf_counter()
        if dev.type == "cuda":
            _set_tf32(m.tf32)
        feats = torch.stack([comps.features(torch.from_numpy(c)) for c in clips])  # (B, F, T)
        frames = feats.shape[-1]
        lens = torch.full((batch_size,), frames, dtype=torch.long)  # eager: lengths stay on the CPU
        # graphed: a batch of a fixed shape (all rows real), its lengths moved to the device by Batch.to
        batch = Batch(feats, lens, tgt, tgt_lens, [""] * batch_size, [], {},
                      torch.ones(batch_size) if m.graphed else None).to(dev)
        _sync(dev)
        t1 = time.perf_counter()
        if m.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        loss, _ = m.step([batch] if not m.graphed else [dataclasses.replace(batch, feat_lens=lens)])
        m.losses.append(float(loss))
        t = m.marks
        return {"data": t1 - t0, "forward": t["forward"] - t1, "backward": t["backward"] - t["forward"],
                "optimizer": t["optimizer"] - t["backward"]}

    stats = interleave({p: (lambda m=m: one_step(m)) for p, m in modes.items()}, repeats=steps, warmup=warmup,
                       sync=lambda: _sync(dev))
    results = []
    base = None
    for key, m in modes.items():
        st, p = stats[key], key.removesuffix(COMPILED).removesuffix(RECOMPUTED)
        step_s = st.median  # the median step: one slow step (a page fault, a neighbour) does not move it
        fwd, bwd = m.model.flops(frames)  # type: ignore[operator]
        step_flops = batch_size * (fwd + bwd)
        achieved = step_flops / step_s / 1e12
        if peak_tflops:
            peak, source = peak_tflops, "given"
        else:
            if dev.type == "cuda":
                _set_tf32(m.tf32)
            peak, source = matmul_peak_tflops(dev, m.precision.dtype), f"measured {p.partition('+')[0]} matmul"
        res = {
            "model": model, "precision": p, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "params": sum(q.numel() for q in m.model.parameters()), "batch_size": batch_size,
            "utterance_seconds": seconds, "steps": steps, "threads": torch.get_num_threads(),
            "source": Path(manifest).parent.name if manifest else "noise",
            "audio_seconds_per_second": round(batch_size * seconds / step_s, 2),
            "utterances_per_second": round(batch_size / step_s, 2),
            "ms_per_step": round(1000 * step_s, 1), "ms_per_step_p10_p90": [round(1000 * st.p10, 1),
                                                                             round(1000 * st.p90, 1)],
            # the phases of the median step itself (medians taken per phase would not add up to it)
            "ms_per_phase": {k: round(1000 * statistics.fmean(x[k] for x in st.at_median()), 1) for k in PHASES},
            "gflop_per_audio_second": round((fwd + bwd) / seconds / 1e9, 2),
            "achieved_tflops": round(achieved, 4), "peak_tflops": round(peak, 4), "peak_source": source,
            "mfu": round(achieved / peak, 4), "first_loss": round(m.losses[0], 4), "final_loss": round(m.losses[-1], 3),
        }
        # as in training, where loader workers prepare the next batch while the GPU trains: the step without its data
        # phase (features on the host and the copy to the device), shown apart
        compute_s = step_s - res["ms_per_phase"]["data"] / 1000
        res.update(compute_ms_per_step=round(1000 * compute_s, 1),
                   audio_seconds_per_second_compute=round(batch_size * seconds / compute_s, 2))
        eager = next((r for r in results if r["precision"] == p.partition("@")[0].partition("+")[0]), None)
        if eager is not None and "+graphs" in p:
            res["graphs_speedup"] = round(res["audio_seconds_per_second_compute"]
                                          / eager["audio_seconds_per_second_compute"], 3)
        if m.compile_mode:
            res["compile"] = m.compile_mode
        if key.endswith(COMPILED):  # its eager twin ran beside it
            res["compile_speedup"] = round(res["audio_seconds_per_second"]
                                           / results[-1]["audio_seconds_per_second"], 3)
        if m.recompute:
            res["activation_checkpointing"] = True
        if key.endswith(RECOMPUTED):  # its plain twin ran beside it
            res["recompute_speed"] = round(res["audio_seconds_per_second"]
                                           / results[-1]["audio_seconds_per_second"], 3)
        if m.scheme:
            res["rnn_scheme"] = m.scheme
        if dev.type == "cuda":
            res.update(tf32=m.tf32, cuda_graphs=m.graphed)
            if m.graphed:
                res["graph_captures"] = m.step.graphs.captures  # type: ignore[union-attr]
        if achieved > peak and not peak_tflops:  # e.g. fp16 on a CPU: the matmul probe hit a slow kernel
            res["mfu"] = None
            res["peak_source"] += " (below the model's own rate: no fast kernel for this dtype; pass --peak-tflops)"
        if dev.type == "cuda":
            res["peak_mem_mb"] = round(torch.cuda.max_memory_allocated(dev) / 2 ** 20, 1)
            try:
                res.update(kernel_profile(lambda m=m: one_step(m), dev))
                res["gpu_busy_fraction"] = round(res["gpu_busy_ms"] / res["ms_per_step"], 3)
            except Exception as e:  # the profile is an extra column: its failure must not lose the timings
                res["gpu_profile_error"] = f"{type(e).__name__}: {e}"
        # after the timings and the device's peak memory, which this extra forward must not move
        res["activations_mb"] = round(_activation_bytes(m, clips, comps, dev) / 2 ** 20, 1)
        base = base or (res if key == "fp32" else None)
        if base is not None:
            res["speedup_vs_fp32"] = round(res["audio_seconds_per_second"] / base["audio_seconds_per_second"], 3)
        results.append(res)
    return results
