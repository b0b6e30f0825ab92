"""The planner's performance and cost model (written out, with its assumptions, in docs/planner.md).

One training step of one GPU = compute (its batch at its throughput) + the communication the strategy
cannot hide + the wait for the slowest GPU it synchronizes with. Communication follows the alpha-beta
model: a ring allreduce of B bytes over N GPUs moves 2(N-1)/N x B over each link and pays 2(N-1) hop
latencies per bucket; DDP sends gradients in buckets during backward, so all but what outlasts the
backward pass is hidden. ADPSGD exchanges the whole weights with one neighbour instead. Step times
vary between GPUs by a relative spread (jitter); a synchronous step waits for the maximum of N such
times, an ADPSGD exchange for the maximum of two. Preemptions arrive as a Poisson process per node;
each costs the work since the last checkpoint (half an interval on average) plus a restart.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

from .hardware import GPUS, JITTER, LINKS, Link

STRATEGIES = ("allreduce", "hierarchical", "adpsgd-fixed_ring", "adpsgd-random_ring", "adpsgd-delay_by_one",
              "h-adpsgd")


class PlanError(ValueError):
    """An impossible or inconsistent planner input (one line)."""


@dataclass
class Workload:
    """What is trained: model size and cost, data and schedule."""

    name: str
    params: int
    flops_per_audio_second: float = 0.0      # training (forward + backward) FLOPs per second of audio
    throughput_per_gpu: float = 0.0          # measured audio-s/s of one GPU; overrides FLOPs x MFU when > 0
    hours: float = 960.0                     # dataset hours
    epochs: float = 16.0
    batch_seconds: float = 320.0             # audio seconds per GPU per step (the batch the throughput is for)
    grad_bytes: int = 4                      # bytes per gradient element on the wire (4 fp32, 2 bf16/fp16)
    global_batch_seconds: float = 0.0        # > 0: the global batch stays fixed and each of N GPUs gets 1/N
    throughput_source: str = ""              # where the per-GPU rate comes from (printed with the plan)


@dataclass
class Cluster:
    """Where it is trained, and what it costs."""

    gpu: str = "h100"
    precision: str = "amp"                   # amp | fp32: which peak applies
    mfu: float = 0.1                         # achieved share of the peak (used without a measured throughput)
    gpus_per_node: int = 8
    intra: Link = field(default_factory=lambda: LINKS["nvlink-h100"])
    inter: Link = field(default_factory=lambda: LINKS["ib-ndr-x8"])
    jitter: float = JITTER                   # relative spread (sigma / mean) of one GPU's step time
    half_batch_seconds: float = 0.0          # per-GPU batch (audio s) at which a GPU runs at half its
                                             # large-batch rate; 0: the rate does not depend on the batch
    overlap: float = 1.0                     # share of backward that can hide gradient communication
    bucket_mb: float = 25.0                  # DDP gradient bucket size
    price_on_demand: float = 0.0             # $ per GPU-hour
    price_preemptible: float = 0.0
    preemptions_per_node_hour: float = 0.0   # on preemptible capacity
    checkpoint_minutes: float = 10.0         # interval between checkpoints
    checkpoint_seconds: float = 10.0         # time to write one (blocking)
    restart_minutes: float = 5.0             # from preemption to training again (new node, rendezvous, load)

    @property
    def peak_tflops(self) -> float:
        if self.gpu not in GPUS:
            raise PlanError(f"gpu {self.gpu!r} is unknown; choose one of {', '.join(GPUS)}")
        return GPUS[self.gpu]["amp" if self.precision in ("amp", "bf16", "fp16") else "fp32"]


@functools.lru_cache(maxsize=None)
def expected_max(n: int) -> float:
    """E[max of n standard normals]: the integral of x n phi(x) Phi(x)^(n-1) (midpoint rule on [-8, 8])."""
    if n <= 1:
        return 0.0
    nd, h = NormalDist(), 16 / 4000
    xs = (-8 + (i + 0.5) * h for i in range(4000))
    return sum(x * n * nd.pdf(x) * nd.cdf(x) ** (n - 1) for x in xs) * h


def per_gpu_throughput(w: Workload, c: Cluster) -> float:
    """Audio seconds per second one GPU trains: measured, else FLOPs at the cluster's MFU."""
    if w.throughput_per_gpu > 0:
        return w.throughput_per_gpu
    if w.flops_per_audio_second <= 0:
        raise PlanError("the workload needs a measured throughput_per_gpu or flops_per_audio_second")
    return c.peak_tflops * 1e12 * c.mfu / w.flops_per_audio_second


def batch_efficiency(batch_seconds: float, half_batch_seconds: float) -> float:
    """Share of a GPU's large-batch rate it reaches at `batch_seconds` per step: b / (b + b_half)
    (1 when b_half is 0)."""
    return 1.0 if half_batch_seconds <= 0 else batch_seconds / (batch_seconds + half_batch_seconds)


def per_gpu_batch(w: Workload, n: int) -> float:
    """Audio seconds one of `n` GPUs trains per step: fixed (weak scaling), or the global batch / n."""
    return w.global_batch_seconds / n if w.global_batch_seconds > 0 else w.batch_seconds


def gpu_rate(w: Workload, c: Cluster, batch_seconds: float) -> float:
    """Audio-s/s of one GPU at a per-GPU batch of `batch_seconds`: the workload's throughput (which is for
    its own batch_seconds) scaled by the batch efficiency of the two batches."""
    scale = batch_efficiency(batch_seconds, c.half_batch_seconds) / batch_efficiency(w.batch_seconds,
                                                                                     c.half_batch_seconds)
    return per_gpu_throughput(w, c) * scale


def ring_allreduce_seconds(nbytes: float, n: int, link: Link, buckets: int = 1) -> float:
    """Ring allreduce of `nbytes` over `n` GPUs sent as `buckets` messages: 2(n-1)/n x bytes / bandwidth
    + 2(n-1) hop latencies per bucket."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (link.bandwidth * 1e9) + buckets * 2 * (n - 1) * link.latency_us * 1e-6


def allreduce_seconds(nbytes: float, n: int, c: Cluster, hierarchical: bool, buckets: int) -> float:
    """Gradient allreduce time over `n` GPUs: one flat ring (bounded by the slowest link it crosses), or
    hierarchical (reduce-scatter in the node, allreduce of each GPU's shard across nodes, all-gather)."""
    nodes = math.ceil(n / c.gpus_per_node)
    g = min(n, c.gpus_per_node)
    if nodes == 1:
        return ring_allreduce_seconds(nbytes, n, c.intra, buckets)
    if not hierarchical:  # the ring crosses each node's NIC once per direction: the NIC bounds it
        return ring_allreduce_seconds(nbytes, n, c.inter, buckets)
    inside = ring_allreduce_seconds(nbytes, g, c.intra, buckets)
    across = ring_allreduce_seconds(nbytes, nodes, c.inter, buckets)  # g shards share the NIC: B per node
    return inside + across


@dataclass
class StepModel:
    """One row of a plan: N GPUs."""

    gpus: int
    nodes: int
    global_batch_seconds: float
    compute_s: float
    comm_s: float              # communication time of one step (whether hidden or not)
    exposed_comm_s: float      # what the step waits for
    straggler_s: float         # expected wait for the slowest GPU it synchronizes with
    step_s: float
    throughput: float          # audio seconds per second, all GPUs
    speedup: float
    efficiency: float


def step(w: Workload, c: Cluster, n: int, strategy: str = "allreduce") -> StepModel:
    """The step of `n` GPUs under `strategy` (one of STRATEGIES)."""
    if strategy not in STRATEGIES:
        raise PlanError(f"strategy {strategy!r} is unknown; choose one of {', '.join(STRATEGIES)}")
    if n < 1:
        raise PlanError(f"gpus must be >= 1, got {n}")
    b = per_gpu_batch(w, n)
    t_c = b / gpu_rate(w, c, b)
    backward = t_c * 2 / 3
    nodes = math.ceil(n / c.gpus_per_node)
    g = min(n, c.gpus_per_node)
    grad = w.params * w.grad_bytes
    weights = w.params * 4  # ADPSGD exchanges fp32 weights
    buckets = max(1, math.ceil(grad / (c.bucket_mb * 2 ** 20)))
    if n == 1:
        comm = exposed = wait = 0.0
    elif strategy in ("allreduce", "hierarchical"):
        comm = allreduce_seconds(grad, n, c, strategy == "hierarchical", buckets)
        last = comm / buckets  # the first layers' bucket is ready only when backward ends
        exposed = max(comm - c.overlap * backward, last)
        wait = c.jitter * expected_max(n) * t_c
    elif strategy == "h-adpsgd":  # allreduce inside the node (a super learner), gossip between nodes
        inside = ring_allreduce_seconds(grad, g, c.intra, buckets)
        gossip = c.inter.seconds(weights) if nodes > 1 else 0.0
        comm = inside + gossip
        exposed = max(inside - c.overlap * backward, inside / buckets) + max(0.0, gossip - t_c)
        wait = c.jitter * (expected_max(g) + (expected_max(2) if nodes > 1 else 0.0)) * t_c
    else:
        # One exchange of the weights with one neighbour per step. A neighbour on another node shares the
        # NIC with the node's other cross-node exchanges of that round.
        if strategy == "adpsgd-random_ring":
            p_cross = (n - g) / (n - 1)
        else:  # ring neighbours are adjacent ranks: only the node's edge ranks cross
            p_cross = 0.0 if nodes == 1 else min(1.0, 1.0 / g)
        crossing = max(1.0, g * p_cross)
        inter = Link(c.inter.bandwidth / crossing, c.inter.latency_us)
        comm = p_cross * inter.seconds(weights) + (1 - p_cross) * c.intra.seconds(weights)
        # delay_by_one runs the exchange during the next step's compute; the rings wait for it.
        exposed = max(0.0, comm - t_c) if strategy == "adpsgd-delay_by_one" else comm
        wait = c.jitter * expected_max(2) * t_c
    step_s = t_c + exposed + wait
    thr = n * b / step_s
    one = gpu_rate(w, c, per_gpu_batch(w, 1))  # what a single GPU trains per second
    return StepModel(n, nodes, n * b, t_c, comm, exposed, wait, step_s, thr, thr / one, thr / one / n)


@dataclass
class RunPlan:
    """Wall time and cost of the whole run on `gpus` GPUs, on-demand and preemptible."""

    step: StepModel
    train_hours: float           # without preemption: epochs x hours / throughput, plus checkpoint writes
    wall_hours_on_demand: float
    cost_on_demand: float
    wall_hours_preemptible: float | None
    cost_preemptible: float | None
    lost_hours_preemptible: float | None  # work redone after preemptions plus restarts, expected


def run_plan(w: Workload, c: Cluster, n: int, strategy: str = "allreduce") -> RunPlan:
    """Time and cost of training `w` on `n` GPUs of `c`."""
    s = step(w, c, n, strategy)
    compute_h = w.hours * w.epochs * 3600 / s.throughput / 3600
    ckpt_overhead = c.checkpoint_seconds / (c.checkpoint_minutes * 60) if c.checkpoint_minutes > 0 else 0.0
    train_h = compute_h * (1 + ckpt_overhead)
    wall_p = cost_p = lost = None
    if c.price_preemptible > 0:
        rate = c.preemptions_per_node_hour * s.nodes  # preemptions per hour of wall time
        loss_h = (c.checkpoint_minutes / 2 + c.restart_minutes) / 60  # per preemption
        if rate * loss_h >= 1:
            raise PlanError(f"{n} GPUs: preemptions ({rate:.2f}/h) come faster than a checkpoint interval and a "
                            "restart; checkpoint more often or use fewer nodes")
        wall_p = train_h / (1 - rate * loss_h)
        cost_p = wall_p * n * c.price_preemptible
        lost = wall_p - train_h
    return RunPlan(s, train_h, train_h, train_h * n * c.price_on_demand, wall_p, cost_p, lost)


def gpu_counts(c: Cluster, max_gpus: int) -> list[int]:
    """1, 2, 4, ... within a node, then whole nodes up to `max_gpus`."""
    counts = [1]
    while counts[-1] * 2 <= min(c.gpus_per_node, max_gpus):
        counts.append(counts[-1] * 2)
    if c.gpus_per_node <= max_gpus and counts[-1] != c.gpus_per_node:
        counts.append(c.gpus_per_node)
    nodes = 2
    while nodes * c.gpus_per_node <= max_gpus:
        counts.append(nodes * c.gpus_per_node)
        nodes = nodes + 1 if nodes < 4 else nodes * 2
    if max_gpus not in counts and max_gpus % c.gpus_per_node == 0:
        counts.append(max_gpus)
    return counts


def plan(w: Workload, c: Cluster, max_gpus: int, strategy: str = "allreduce",
         deadline_hours: float | None = None) -> dict[str, Any]:
    """Every GPU count up to `max_gpus`: step split, scaling, wall time, cost; and the cheapest choice
    (GPU count x on-demand/preemptible) that finishes within `deadline_hours`."""
    rows = [run_plan(w, c, n, strategy) for n in gpu_counts(c, max_gpus)]
    options = []
    for r in rows:
        options.append({"gpus": r.step.gpus, "pricing": "on-demand", "wall_hours": r.wall_hours_on_demand,
                        "cost": r.cost_on_demand})
        if r.cost_preemptible is not None:
            options.append({"gpus": r.step.gpus, "pricing": "preemptible", "wall_hours": r.wall_hours_preemptible,
                            "cost": r.cost_preemptible})
    meeting = [o for o in options if deadline_hours is None or o["wall_hours"] <= deadline_hours]
    cheapest = min(meeting, key=lambda o: (o["cost"], o["wall_hours"])) if meeting else None
    return {"workload": asdict(w), "cluster": {**asdict(c), "peak_tflops": c.peak_tflops}, "strategy": strategy,
            "per_gpu_throughput": per_gpu_throughput(w, c), "deadline_hours": deadline_hours,
            "rows": [{**asdict(r.step), **{k: v for k, v in asdict(r).items() if k != "step"}} for r in rows],
            "cheapest": cheapest}
