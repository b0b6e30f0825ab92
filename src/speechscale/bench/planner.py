"""Check the planner's communication model against real collectives on this machine (gloo on loopback).

1. Measure allreduce of several message sizes with N processes and fit the link (bandwidth, per-hop
   latency) of the alpha-beta ring model to them.
2. Run the DDP scaling bench (real model, real buckets) and compare its measured allreduce time per step
   and step time with what the planner predicts from that link and the 1-process step time.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..planning.hardware import Link
from ..planning.model import Cluster, Workload, ring_allreduce_seconds, step
from .ports import free_port
from .ranks import RankLauncher

SIZES_MB = (0.25, 1.0, 4.0, 16.0)


def _allreduce_worker(rank: int, world: int, port: int, repeats: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = {}
    for mb in SIZES_MB:
        buf = torch.ones(int(mb * 2 ** 20) // 4)
        dist.all_reduce(buf)  # warm-up
        times = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - t0)
        rows[str(mb)] = statistics.median(times)
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure_allreduce(world: int = 2, repeats: int = 9, launcher: RankLauncher | None = None) -> dict[float, float]:
    """Median seconds of one fp32 allreduce per message size (MB) with `world` gloo processes, forked by
    `launcher` (default: one of this call's own)."""
    if launcher is None:
        with RankLauncher() as own:
            return measure_allreduce(world, repeats, own)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp, "allreduce.json"))
        launcher.run(_allreduce_worker, world, (world, free_port(), repeats, out))
        return {float(k): v for k, v in json.loads(Path(out).read_text()).items()}


def fit_link(times: dict[float, float], world: int) -> Link:
    """Least-squares fit of t = 2(n-1)/n x bytes / bandwidth + 2(n-1) x latency to measured times."""
    xs = [2 * (world - 1) / world * mb * 2 ** 20 for mb in times]
    ys = list(times.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = max(0.0, my - slope * mx)
    return Link(bandwidth=1 / slope / 1e9, latency_us=intercept / (2 * (world - 1)) * 1e6)


def validate_planner(models: tuple[str, ...] = ("ds2-tiny", "wav2letter+-tiny"), world: int = 2, batch_size: int = 4,
             seconds: float = 2.0, steps: int = 4) -> dict[str, Any]:
    """Prediction vs measurement for each model's DDP step on `world` gloo processes."""
    from .scaling import WORKER_IMPORTS, bench_scaling

    with RankLauncher(WORKER_IMPORTS) as launcher:  # one launcher forks the ranks of every measurement
        times = measure_allreduce(world, launcher=launcher)
        runs = {m: bench_scaling(m, (1, world), batch_size, seconds, steps, warmup=2, threads=1, launcher=launcher)
                for m in models}
    link = fit_link(times, world)
    rows = []
    for model in models:
        one, many = runs[model]
        grad = many["comm_mb_per_step"] * 2 ** 20
        buckets = max(1, round(many["allreduce_calls_per_step"]))
        w = Workload(model, one["params"], throughput_per_gpu=one["audio_seconds_per_second"],
                     batch_seconds=batch_size * seconds)
        c = Cluster(gpu="cpu", gpus_per_node=world, intra=link, bucket_mb=grad / buckets / 2 ** 20 + 1e-9)
        predicted = step(w, c, world)
        comm_pred = ring_allreduce_seconds(grad, world, link, buckets)
        rows.append({"model": model, "processes": world, "params": one["params"],
                     "allreduce_mb_per_step": many["comm_mb_per_step"], "buckets": buckets,
                     "comm_ms_measured": many["comm_ms_per_step"], "comm_ms_predicted": round(1000 * comm_pred, 1),
                     "step_ms_measured": many["ms_per_step"], "step_ms_predicted": round(1000 * predicted.step_s, 1),
                     "step_error": round(1000 * predicted.step_s / many["ms_per_step"] - 1, 4),
                     "speedup_measured": many["speedup"], "speedup_predicted": round(predicted.speedup, 3)})
    return {"link": {"bandwidth_gb_s": round(link.bandwidth, 3), "latency_us": round(link.latency_us, 1)},
            "allreduce_seconds": times, "processes": world, "rows": rows}
