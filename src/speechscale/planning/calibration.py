"""Published figures the planner is checked against (`speechscale plan --calibrate`, tests/planning).

Each case says which of its inputs come from the publication, which are fitted (and on which other
rows), and the error the model is held to. What a case predicts is never one of the figures it was
fitted on. Sources:
- NVIDIA DeepLearningExamples, PyTorch/SpeechRecognition/Jasper/README.md, "Training performance results"
  (PyTorch 19.10 NGC container; sequences padded to 16.7 s; throughput in sequences per second).
- Amodei et al., "Deep Speech 2", ICML 2016, section 4 (near-linear weak scaling to 64+ Titan X GPUs,
  8 per node, InfiniBand; synchronous SGD with their own allreduce after backward).
- Zhang et al., "Improving efficiency in large-scale decentralized distributed training", ICASSP 2020:
  SWB-2000 LSTM, ADPSGD 2.28 h on 64 V100, 1.98 h on 128 V100 (IBM P9 cluster).
- Narenthiran, "Training DeepSpeech using TorchElastic", PyTorch blog 2020: LibriSpeech DeepSpeech2
  about $510 on-demand, $153 on preemptible GPUs.
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Callable

from .hardware import JITTER, LINKS, Link
from .model import Cluster, Workload, batch_efficiency, run_plan, step

JASPER_PARAMS = 333_000_000  # Jasper 10x5 DR (Li et al. 2019)
JASPER_SECONDS = 16.7        # every benchmark sequence is padded to this length

# (system, GPUs, batch per GPU, precision, 1-GPU sequences/s, published speedup) from the Jasper README.
JASPER_ROWS: list[tuple[str, int, int, str, float, float]] = [
    ("dgx1-16g", 4, 16, "fp32", 10.0, 3.88), ("dgx1-16g", 8, 16, "fp32", 10.0, 7.66),
    ("dgx1-16g", 4, 16, "amp", 29.63, 3.60), ("dgx1-16g", 8, 16, "amp", 29.63, 7.08),
    ("dgx1-16g", 4, 32, "amp", 35.16, 3.83), ("dgx1-16g", 8, 32, "amp", 35.16, 7.51),
    ("dgx1-32g", 4, 32, "fp32", 12.26, 3.97), ("dgx1-32g", 8, 32, "fp32", 12.26, 7.82),
    ("dgx1-32g", 4, 32, "amp", 34.04, 3.88), ("dgx1-32g", 8, 32, "amp", 34.04, 7.45),
    ("dgx1-32g", 4, 64, "amp", 41.03, 3.88), ("dgx1-32g", 8, 64, "amp", 41.03, 7.61),
    ("dgx2", 4, 32, "fp32", 8.12, 3.96), ("dgx2", 8, 32, "fp32", 8.12, 7.84), ("dgx2", 16, 32, "fp32", 8.12, 15.38),
    ("dgx2", 4, 32, "amp", 24.24, 3.80), ("dgx2", 8, 32, "amp", 24.24, 7.49), ("dgx2", 16, 32, "amp", 24.24, 11.35),
    ("dgx2", 4, 64, "amp", 29.22, 3.91), ("dgx2", 8, 64, "amp", 29.22, 7.62), ("dgx2", 16, 64, "amp", 29.22, 14.19),
]


def _held_out(row: tuple[str, int, int, str, float, float]) -> bool:
    """The mixed-precision rows at 8 and 16 GPUs with batch >= 32: what the calibration predicts."""
    return row[3] == "amp" and row[1] >= 8 and row[2] >= 32


def jasper_speedup(row: tuple[str, int, int, str, float, float], jitter: float = JITTER, overlap: float = 1.0,
                   bandwidth_scale: float = 1.0, latency_us: float | None = None) -> float:
    """The planner's weak-scaling speedup for one Jasper row: measured 1-GPU throughput at the row's batch and
    precision, 333 M fp32 gradients in 25 MB DDP buckets over NVLink (DGX-1) or NVSwitch (DGX-2), the link's
    bandwidth x `bandwidth_scale` and `latency_us` per hop (default: the preset's), `overlap` of backward."""
    system, gpus, batch, _, seq_per_s, _ = row
    w = Workload("jasper-10x5dr", JASPER_PARAMS, throughput_per_gpu=seq_per_s * JASPER_SECONDS,
                 batch_seconds=batch * JASPER_SECONDS, grad_bytes=4)
    dgx2 = system == "dgx2"
    link = LINKS["nvswitch-v100" if dgx2 else "nvlink-v100"]
    link = Link(link.bandwidth * bandwidth_scale, link.latency_us if latency_us is None else latency_us)
    c = Cluster(gpu="v100", gpus_per_node=16 if dgx2 else 8, intra=link, jitter=jitter, overlap=overlap)
    return step(w, c, gpus).speedup


def fit_jitter() -> float:
    """The step-time jitter that best fits the Jasper rows that are not held out with the other constants at the
    planner's defaults (least squares on the relative error, grid of 0.001): where JITTER comes from."""
    rows = [r for r in JASPER_ROWS if not _held_out(r)]
    return min((j / 1000 for j in range(0, 151)),
               key=lambda j: sum((jasper_speedup(r, j) / r[5] - 1) ** 2 for r in rows))


@functools.lru_cache(maxsize=1)
def fit_jasper() -> dict[str, float]:
    """The step model's four constants fitted jointly on the Jasper rows that are not held out (least squares on
    the relative error over a grid): the overlap of communication with backward, the share of the link's
    bandwidth achieved, the latency per hop and bucket, and the jitter. With them, a row's prediction follows its
    batch, precision and 1-GPU rate (the step's compute time) instead of being one number per GPU count."""
    rows = [r for r in JASPER_ROWS if not _held_out(r)]
    grid = [(ov, bw, lat, j / 1000) for ov in (0.0, 0.5, 1.0) for bw in (1.0, 0.5, 0.25) for lat in range(0, 301, 10)
            for j in range(0, 61, 6)]
    best = min(grid, key=lambda g: sum((jasper_speedup(r, g[3], g[0], g[1], g[2]) / r[5] - 1) ** 2 for r in rows))
    return {"overlap": best[0], "bandwidth_scale": best[1], "latency_us": float(best[2]), "jitter": best[3]}


def jasper_fitted_speedup(row: tuple[str, int, int, str, float, float]) -> float:
    """A Jasper row's speedup with fit_jasper's constants."""
    f = fit_jasper()
    return jasper_speedup(row, f["jitter"], f["overlap"], f["bandwidth_scale"], f["latency_us"])


def ds2_paper_efficiency(gpus: int = 64, mfu: float = 0.45) -> float:
    """DeepSpeech2 paper setting: 7 bidirectional simple-RNN layers of 1760 (87 M parameters, 6 x params
    FLOPs per output frame at 50 frames/s, 26 GFLOP per audio second), Titan X at 45 % of peak, 64
    utterances of ~7 s per GPU, 8 GPUs per node on FDR InfiniBand, allreduce after backward (no overlap)."""
    params = 7 * 2 * 2 * 1760 * 1760
    w = Workload("ds2-paper-9-7-1760", params, flops_per_audio_second=6 * params * 50, batch_seconds=64 * 7.0)
    c = Cluster(gpu="titanx-maxwell", precision="fp32", mfu=mfu, gpus_per_node=8, intra=LINKS["pcie3"],
                inter=LINKS["ib-fdr"], overlap=0.0)
    return step(w, c, gpus).efficiency


def fit_half_batch() -> float:
    """The per-GPU batch (audio seconds) at which a V100 runs at half its large-batch rate, fitted (least
    squares on the ratio, grid of 1 s) on Jasper's single-GPU AMP throughputs at two batch sizes on the same
    system. Only 1-GPU inputs are used; no speedup the calibration predicts."""
    pairs = []
    for a in JASPER_ROWS:
        for b in JASPER_ROWS:
            if a[0] == b[0] and a[3] == b[3] == "amp" and a[2] < b[2]:
                pairs.append((a[2] * JASPER_SECONDS, b[2] * JASPER_SECONDS, b[4] / a[4]))
    pairs = sorted(set(pairs))

    def loss(h: float) -> float:
        return sum((batch_efficiency(big, h) / batch_efficiency(small, h) / ratio - 1) ** 2
                   for small, big, ratio in pairs)
    return float(min(range(1, 1001), key=loss))


SWB_BATCH_SECONDS = 128 * 2.0  # per GPU at 64 GPUs (128 utterances of about 2 s)


def _swb_lstm() -> Workload:
    """The ADPSGD papers' LSTM (our `lstm-ctc` preset with 32,000 outputs: 43.6 M parameters,
    8.6 GFLOP per audio second by the registry's analytic count), SWB-2000 for 16 epochs; the 64-GPU global
    batch is kept at 128 GPUs (each GPU gets half)."""
    return Workload("lstm-ctc-swb2000", 43_564_544, flops_per_audio_second=8.613e9, hours=2000, epochs=16,
                    batch_seconds=SWB_BATCH_SECONDS,
                    global_batch_seconds=64 * SWB_BATCH_SECONDS)


def _p9_cluster(mfu: float, half_batch: float = 0.0) -> Cluster:
    return Cluster(gpu="v100", precision="fp32", mfu=mfu, gpus_per_node=6, intra=LINKS["nvlink-v100"],
                   inter=LINKS["ib-edr-x2"], half_batch_seconds=half_batch)


def _mfu_for(target: float, figure: Callable[[float], float], lo: float) -> float:
    """The MFU in [lo, 1] at which `figure` (hours or cost: falling as the MFU rises) equals `target`
    (bisection)."""
    hi = 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if figure(mid) > target else (lo, mid)
    return (lo + hi) / 2


def fit_adpsgd_mfu(hours_64: float = 2.28, half_batch: float = 0.0) -> float:
    """The MFU at which 64 V100 with delay-by-one ADPSGD take the published 2.28 h."""
    return _mfu_for(hours_64, lambda mfu: run_plan(_swb_lstm(), _p9_cluster(mfu, half_batch), 64,
                                                   "adpsgd-delay_by_one").train_hours, lo=0.001)


def adpsgd_hours(gpus: tuple[int, ...], half_batch: float) -> tuple[list[float], float]:
    """(hours on each count of V100 in `gpus`, the MFU fitted once on the 64-GPU figure) for delay-by-one
    ADPSGD with the 64-GPU global batch kept fixed and a GPU's rate depending on its batch via `half_batch`."""
    mfu = fit_adpsgd_mfu(half_batch=half_batch)
    c = _p9_cluster(mfu, half_batch)
    return [run_plan(_swb_lstm(), c, n, "adpsgd-delay_by_one").train_hours for n in gpus], mfu


# GCP list prices of 2020 for a V100 (on-demand / preemptible, per GPU-hour).
GCP_V100 = (2.48, 0.74)


def librispeech_cost(preemptions_per_node_hour: float = 0.05) -> tuple[float, float]:
    """(on-demand, preemptible) cost of deepspeech.pytorch's LibriSpeech DS2 (5 x 1024 LSTM, 86.6 M
    parameters, 29.1 GFLOP per audio second, 16 epochs of 960 h) on two nodes of 4 V100, with its GPU rate
    fitted so the on-demand cost is the published $510; the preemptible cost is then predicted from the
    prices, the preemption rate, 10-minute checkpoints and 5-minute restarts."""
    w = Workload("ds2-librispeech", 86_618_365, flops_per_audio_second=29.08e9, hours=960, epochs=16,
                 batch_seconds=32 * 15.0, grad_bytes=2)
    base = Cluster(gpu="v100", precision="amp", gpus_per_node=4, intra=LINKS["nvlink-v100"], inter=LINKS["eth-25g"],
                   price_on_demand=GCP_V100[0], price_preemptible=GCP_V100[1],
                   preemptions_per_node_hour=preemptions_per_node_hour)
    mfu = _mfu_for(510.0, lambda m: run_plan(w, replace(base, mfu=m), 8).cost_on_demand, lo=1e-4)
    r = run_plan(w, replace(base, mfu=mfu), 8)
    return r.cost_on_demand, r.cost_preemptible or 0.0


# One goal for every prediction, fixed before any row is computed: within 10 % of the
# published figure. A row outside it is a miss and is printed and tabled as one.
GOAL = 0.10

ROLES = {"prediction": "a figure computed from inputs that do not include it; held to the goal",
         "fit": "the figure a constant was fitted on; shown so the fitted value is visible, not evidence",
         "check": "a consistency check: by construction it cannot miss by much, so it is not graded"}


def grade(row: dict[str, Any], goal: float = GOAL) -> dict[str, Any]:
    """Adds `error` (predicted / published - 1) and, for a prediction, `ok` (|error| <= goal) and `status`."""
    row["error"] = row["predicted"] / row["published"] - 1
    if row["role"] == "prediction":
        row["ok"] = abs(row["error"]) <= goal
        row["status"] = "within" if row["ok"] else f"missed by {abs(row['error']):.0%}"
    else:
        row["status"] = "fitted" if row["role"] == "fit" else "not graded"
    return row


def cases() -> list[dict[str, Any]]:
    """Every calibration case: published figure, prediction, relative error, its role and its grade."""
    rows = []
    f = fit_jasper()
    constants = (f"overlap {f['overlap']:g}, {f['bandwidth_scale']:g} of the link's bandwidth, "
                 f"{f['latency_us']:g} us a hop, jitter {f['jitter']:g}")
    for r in JASPER_ROWS:
        held = _held_out(r)
        rows.append({"case": f"Jasper {r[0]} {r[1]} GPUs, {r[3].upper()}, batch {r[2]}: speedup", "published": r[5],
                     "predicted": jasper_fitted_speedup(r), "role": "prediction" if held else "fit",
                     "fitted": ("held out: from its 1-GPU rate, batch and precision" if held
                                else f"fit row ({constants})")})
    rows.append({"case": "DeepSpeech2 paper: efficiency at 64 GPUs ('near-linear', >= 0.85)", "published": 0.85,
                 "predicted": ds2_paper_efficiency(64), "role": "check",
                 "fitted": "0.87-0.91 for any MFU from 0.3 to 1: the claim cannot be missed"})
    half = fit_half_batch()
    (h64, h128), mfu = adpsgd_hours((64, 128), half)
    without = adpsgd_hours((128,), 0.0)[0][0]
    rows.append({"case": "ADPSGD delay-by-one, SWB-2000, 64 V100: hours", "published": 2.28,
                 "predicted": h64, "role": "fit", "fitted": f"MFU {mfu:.3f} on this figure"})
    rows.append({"case": "ADPSGD delay-by-one, SWB-2000, 128 V100: hours", "published": 1.98, "predicted": h128,
                 "role": "prediction", "fitted": f"fixed global batch; half-rate batch {half:.0f} s from Jasper's "
                 f"1-GPU rows (without it: {without / 1.98 - 1:+.0%})"})
    on_demand, preemptible = librispeech_cost()
    rows.append({"case": "DS2 LibriSpeech on 8 V100: on-demand $", "published": 510.0, "predicted": on_demand,
                 "role": "fit", "fitted": "the GPU rate, on this figure"})
    rows.append({"case": "DS2 LibriSpeech on 8 V100: preemptible $", "published": 153.0, "predicted": preemptible,
                 "role": "check", "fitted": "$510 x the price ratio x the preemption overhead; throughput plays no part"})
    return [grade(row) for row in rows]
