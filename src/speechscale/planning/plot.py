"""PNG curves of a plan: scaling, the step split, wall time and cost against the GPU count."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_plan(result: dict[str, Any], path: Path) -> None:
    """Three panels: speedup against ideal, the step split (compute / exposed communication / straggler
    wait), wall hours and cost (on-demand and preemptible)."""
    from ..plotting import pyplot

    plt = pyplot()

    rows = result["rows"]
    gpus = [r["gpus"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    ax.plot(gpus, gpus, "k:", label="linear")
    ax.plot(gpus, [r["speedup"] for r in rows], "o-", label=result["strategy"])
    ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="speedup over 1 GPU", title="scaling")
    ax.legend()
    ax = axes[1]
    labels = list(range(len(gpus)))  # one bar per GPU count, evenly spaced
    compute = [1000 * r["compute_s"] for r in rows]
    comm = [1000 * r["exposed_comm_s"] for r in rows]
    wait = [1000 * r["straggler_s"] for r in rows]
    ax.bar(labels, compute, label="compute")
    ax.bar(labels, comm, bottom=compute, label="exposed communication")
    ax.bar(labels, wait, bottom=[a + b for a, b in zip(compute, comm)], label="straggler wait")
    ax.set_xticks(labels, [str(g) for g in gpus])
    ax.set(xlabel="GPUs", ylabel="ms per step", title="step time")
    ax.legend(fontsize=8)
    ax = axes[2]
    ax.plot(gpus, [r["wall_hours_on_demand"] for r in rows], "o-", label="wall hours")
    ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="hours", title="time and cost")
    cost_ax = ax.twinx()
    cost_ax.plot(gpus, [r["cost_on_demand"] for r in rows], "s--", color="C1", label="$ on-demand")
    if rows[0]["cost_preemptible"] is not None:
        cost_ax.plot(gpus, [r["cost_preemptible"] for r in rows], "^--", color="C2", label="$ preemptible")
    cost_ax.set(ylabel="$")
    lines = ax.get_legend_handles_labels()
    more = cost_ax.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8)
    fig.suptitle(f"{result['workload']['name']} on {result['cluster']['gpu']}: {result['workload']['hours']:g} h x "
                 f"{result['workload']['epochs']:g} epochs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
