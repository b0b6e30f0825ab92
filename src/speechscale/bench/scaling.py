"""Data-parallel scaling: throughput with 1..N processes (DDP, gloo on CPU / nccl on GPU), with the time
spent in gradient allreduce and the bytes it moves per step.

    speechscale bench scaling --model ds2-tiny --procs 1,2 --batch-size 8 --seconds 2

Each process trains on its own batch of the same size (weak scaling: the global batch grows with the
process count), one thread each unless --threads says otherwise. Real processes, real collectives on
loopback. Step times are medians over the timed steps (bench/harness.py); process counts run one after
another (interleaved, they would share the cores). Communication is timed by a DDP communication hook
from the moment a gradient bucket is handed to allreduce until its result is ready. That time overlaps
backward, so it is an upper bound on what communication costs the step.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .ports import free_port
from .ranks import PRELOAD, RankLauncher

# What each rank imports, imported once by the launcher that forks them.
WORKER_IMPORTS = (*PRELOAD, "speechscale.components", "speechscale.config", "speechscale.distributed",
                  "speechscale.training.optim", "speechscale.training.step", "speechscale.bench.throughput")


class _CommMeter:
    """State of the timing allreduce hook: seconds and bytes of bucket allreduces."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.bytes = 0
        self.calls = 0


def _timed_allreduce(state, bucket):  # no annotations: DDP checks them, and they are strings here
    """Allreduce one gradient bucket (averaged), recording its bytes and time to completion."""
    buf = bucket.buffer()
    started = time.perf_counter()
    state.bytes += buf.numel() * buf.element_size()
    state.calls += 1
    world = dist.get_world_size()
    fut = dist.all_reduce(buf, async_op=True).get_future()

    def done(f: torch.futures.Future) -> torch.Tensor:
        state.seconds += time.perf_counter() - started
        return f.value()[0].div_(world)

    return fut.then(done)


def _worker(rank: int, world: int, port: int, opts: dict[str, Any], out_dir: str) -> None:
    from ..components import build_components
    from ..config import Config, DistributedConfig, from_dict
    from ..data.dataset import Batch
    from ..distributed import build_strategy
    from ..models.registry import RECOMMENDED_FEATURES
    from ..training.optim import build_optimizer
    from ..training.precision import Precision, resolve_device
    from ..training.step import EagerStep
    from .harness import summarize
    from .throughput import _clips, targets

    torch.set_num_threads(opts["threads"])
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    strategy = build_strategy(DistributedConfig("allreduce"), device=opts["device"])  # the trainer's
    dev = resolve_device(strategy.device(opts["device"]))
    torch.manual_seed(0)
    cfg = from_dict(Config, {"model": {"name": opts["model"]}, "features": RECOMMENDED_FEATURES.get(opts["model"], {})})
    comps = build_components(cfg)
    model = comps.model.to(dev).train()
    meter = _CommMeter()
    forward = strategy.wrap(model)
    if isinstance(forward, torch.nn.parallel.DistributedDataParallel) and world > 1:
        forward.register_comm_hook(meter, _timed_allreduce)
    opt = build_optimizer(model, cfg.optim)
    step = EagerStep(model, forward, opt, Precision("fp32", dev), strategy, cfg.optim.grad_clip, dev)  # the trainer's
    b, secs = opts["batch_size"], opts["seconds"]
    clips = _clips(opts["manifest"], comps.features.cfg.sample_rate, secs, b, seed=rank)
    feats = torch.stack([comps.features(torch.from_numpy(c)) for c in clips]).to(dev)  # (B, F, T)
    tgt, tgt_lens = targets(comps, secs, b, dev)
    batch = Batch(feats, torch.full((b,), feats.shape[-1], dtype=torch.long), tgt, tgt_lens, [""] * b, [], {})
    times = []
    for i in range(opts["warmup"] + opts["steps"]):
        if i == opts["warmup"]:
            meter.seconds, meter.bytes, meter.calls = 0.0, 0, 0
        strategy.barrier()
        t0 = time.perf_counter()
        step([batch])
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= opts["warmup"]:
            times.append(time.perf_counter() - t0)
    steps = opts["steps"]
    row = {"rank": rank, "ms_per_step": 1000 * summarize(times).median,
           "comm_ms_per_step": 1000 * meter.seconds / steps,
           "comm_bytes_per_step": meter.bytes // steps, "allreduce_calls_per_step": meter.calls / steps,
           "params": sum(p.numel() for p in model.parameters())}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(row))
    strategy.close()


def bench_scaling(model: str = "ds2-tiny", procs: tuple[int, ...] = (1, 2), batch_size: int = 8,
                  seconds: float = 2.0, steps: int = 5, warmup: int = 2, threads: int = 1,
                  manifest: str | None = None, device: str = "auto",
                  launcher: RankLauncher | None = None) -> list[dict[str, Any]]:
    """One result per process count: throughput, scaling efficiency against 1 process, comm time/bytes. The
    ranks are forked by `launcher` (default: one of this call's own)."""
    if launcher is None:
        with RankLauncher(WORKER_IMPORTS) as own:
            return bench_scaling(model, procs, batch_size, seconds, steps, warmup, threads, manifest, device, own)
    opts = {"model": model, "batch_size": batch_size, "seconds": seconds, "steps": steps, "warmup": warmup,
            "threads": threads, "manifest": manifest, "device": device}
    results: list[dict[str, Any]] = []
    base: tuple[float, int] | None = None  # (unrounded throughput, processes) of the first count
    for world in procs:
        with tempfile.TemporaryDirectory() as tmp:
            launcher.run(_worker, world, (world, free_port(), opts, tmp),
                         env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))})
            rows = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
        step_ms = max(r["ms_per_step"] for r in rows)  # the step ends when the slowest rank does
        thr = world * batch_size * seconds / (step_ms / 1000)
        res = {"model": model, "processes": world, "threads_per_process": threads, "cpu_cores": os.cpu_count(),
               "batch_per_process": batch_size, "utterance_seconds": seconds, "params": rows[0]["params"],
               "ms_per_step": round(step_ms, 1), "audio_seconds_per_second": round(thr, 2),
               "comm_ms_per_step": round(max(r["comm_ms_per_step"] for r in rows), 1),
               "comm_mb_per_step": round(rows[0]["comm_bytes_per_step"] / 2 ** 20, 2),
               "allreduce_calls_per_step": rows[0]["allreduce_calls_per_step"]}
        base = base or (thr, world)  # ratios from the unrounded figure: 1 process is exactly 1.0
        res["speedup"] = round(thr / base[0], 3)
        res["efficiency"] = round(res["speedup"] / (world / base[1]), 3)
        results.append(res)
    return results
