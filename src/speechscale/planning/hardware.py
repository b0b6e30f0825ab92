"""GPU and interconnect presets for the planner: published peak rates and link figures, plus the two
figures fitted on published scaling tables (per-message latency and step-time jitter; docs/planner.md)."""
from __future__ import annotations

from dataclasses import dataclass

# Dense peak TFLOP/s from the vendors' data sheets: fp32 (no TF32), and the tensor-core rate used by
# mixed precision (fp16/bf16). The Titan X is the Maxwell card of the DeepSpeech2 paper.
GPUS: dict[str, dict[str, float]] = {
    "titanx-maxwell": {"fp32": 6.1, "amp": 6.1, "memory_gb": 12},
    "v100": {"fp32": 15.7, "amp": 125.0, "memory_gb": 32},
    "a100": {"fp32": 19.5, "amp": 312.0, "memory_gb": 80},
    "h100": {"fp32": 67.0, "amp": 989.0, "memory_gb": 80},
    "h200": {"fp32": 67.0, "amp": 989.0, "memory_gb": 141},
    "cpu": {"fp32": 0.3, "amp": 0.16, "memory_gb": 24},  # a 2-core AVX2 server: fp32 matmul, bf16 emulated
}


@dataclass
class Link:
    """A network in the alpha-beta model: `bandwidth` GB/s achieved by a collective (NCCL's bus
    bandwidth), `latency_us` per message hop."""

    bandwidth: float
    latency_us: float

    def seconds(self, nbytes: float, hops: int = 1) -> float:
        return nbytes / (self.bandwidth * 1e9) + hops * self.latency_us * 1e-6


# Bus bandwidths are what NCCL's all_reduce_perf reports on such systems (per GPU, large messages); the
# network entries are a node's NIC line rate at 90 %; latency is per ring hop.
LINKS: dict[str, Link] = {
    "nvlink-v100": Link(130.0, 10.0),      # DGX-1 hybrid cube mesh, NCCL 2.4 era
    "nvswitch-v100": Link(120.0, 10.0),    # DGX-2
    "nvlink-a100": Link(230.0, 20.0),
    "nvlink-h100": Link(360.0, 15.0),
    "pcie3": Link(10.0, 20.0),
    "ib-fdr": Link(6.3, 5.0),              # 56 Gb/s
    "ib-edr": Link(11.3, 5.0),             # 100 Gb/s
    "ib-edr-x2": Link(22.5, 5.0),          # dual-rail EDR (IBM AC922 / Summit-class nodes)
    "eth-100g": Link(11.3, 30.0),
    "eth-25g": Link(2.8, 30.0),
    "ib-ndr-x8": Link(360.0, 5.0),         # 8 x 400 Gb/s per node (H100 clusters)
    "loopback-gloo": Link(1.0, 100.0),     # this machine; `speechscale plan --validate` measures its own
}

# Fitted once on NVIDIA's Jasper tables (the 4-GPU and fp32 rows, not the 8/16-GPU mixed-precision rows
# the calibration predicts): the relative spread (sigma / mean) of one GPU's step time.
# `speechscale plan --calibrate` shows the fit; tests/planning checks that it is still this constant.
JITTER = 0.036
