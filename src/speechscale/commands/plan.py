"""`speechscale plan`: flags, the printed table and the calibration report (the model is in planning/)."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from ..planning.hardware import GPUS, JITTER, LINKS, Link
from ..planning.model import STRATEGIES, Cluster, PlanError, Workload, plan
from .args import fraction, non_negative, out_folder, positive, yaml_mapping


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `speechscale plan`."""
    m = p.add_argument_group("model")
    m.add_argument("--model", default="ds2-large", help="registry model: parameters and FLOPs from its analytic count")
    m.add_argument("--model-overrides", default=None, help="YAML mapping of architecture fields")
    m.add_argument("--params", type=positive(int), default=None, help="parameters (instead of --model's count)")
    m.add_argument("--flops-per-audio-second", type=positive(float), default=None,
                   help="training FLOPs per audio second (instead of --model's count)")
    m.add_argument("--throughput", type=positive(float), default=None,
                   help="measured audio-s/s of one GPU (replaces FLOPs x MFU)")
    m.add_argument("--throughput-json", default=None,
                   help="take --throughput from `bench train` / `bench all` output for --model and --precision")
    d = p.add_argument_group("data and schedule")
    d.add_argument("--hours", type=positive(float), default=960.0, help="dataset hours")
    d.add_argument("--epochs", type=positive(float), default=16.0, help="passes over the data")
    d.add_argument("--batch-seconds", type=positive(float), default=320.0, help="audio seconds per GPU per step")
    c = p.add_argument_group("cluster")
    c.add_argument("--gpu", choices=list(GPUS), default="h100", help="GPU type: its data-sheet peak FLOP/s")
    c.add_argument("--precision", choices=["amp", "fp32"], default="amp",
                   help="amp: tensor-core peak and 2-byte gradients on the wire; fp32: 4 bytes")
    c.add_argument("--mfu", type=fraction, default=0.1,
                   help="achieved share of the peak where no throughput is given or shipped (planning/data/measured.json)")
    c.add_argument("--gpus-per-node", type=positive(int), default=8, help="GPUs sharing one node's fast link")
    c.add_argument("--max-gpus", type=positive(int), default=64, help="largest GPU count to plan")
    c.add_argument("--intra", choices=list(LINKS), default="nvlink-h100", help="network inside a node")
    c.add_argument("--inter", choices=list(LINKS), default="ib-ndr-x8", help="network between nodes")
    c.add_argument("--intra-gbps", type=positive(float), default=None,
                   help="measured allreduce bus bandwidth inside a node, GB/s (overrides --intra's)")
    c.add_argument("--inter-gbps", type=positive(float), default=None,
                   help="measured bandwidth between nodes, GB/s (overrides --inter's)")
    c.add_argument("--intra-latency-us", type=non_negative(float), default=None, help="latency per ring hop inside a node")
    c.add_argument("--inter-latency-us", type=non_negative(float), default=None, help="latency per ring hop between nodes")
    c.add_argument("--jitter", type=float, default=JITTER, help="relative spread of one GPU's step time")
    c.add_argument("--overlap", type=float, default=1.0, help="share of backward that hides gradient communication")
    c.add_argument("--strategy", choices=STRATEGIES, default="allreduce", help="how the GPUs combine their work")
    cost = p.add_argument_group("cost and preemption")
    cost.add_argument("--price-on-demand", type=non_negative(float), default=0.0, help="$ per GPU-hour")
    cost.add_argument("--price-preemptible", type=non_negative(float), default=0.0, help="$ per GPU-hour (0: not considered)")
    cost.add_argument("--preemptions-per-node-hour", type=non_negative(float), default=0.05,
                      help="preemptible capacity: expected preemptions per node per hour")
    cost.add_argument("--checkpoint-minutes", type=positive(float), default=10.0, help="interval between checkpoints")
    cost.add_argument("--checkpoint-seconds", type=non_negative(float), default=10.0, help="time one checkpoint write blocks")
    cost.add_argument("--restart-minutes", type=non_negative(float), default=5.0,
                      help="from a preemption to training again (new node, rendezvous, checkpoint load)")
    cost.add_argument("--deadline-hours", type=positive(float), default=None,
                      help="report the cheapest GPU count and pricing that finishes in time")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the plan as JSON")
    o.add_argument("--out", type=out_folder, default=None, help="folder for plan.json and plan.png")
    o.add_argument("--calibrate", action="store_true", help="print the calibration against published runs and exit")
    o.add_argument("--validate", action="store_true",
                   help="measure gloo allreduce here and compare the model with real DDP steps, then exit")


def workload_from_args(args: argparse.Namespace, overrides: dict[str, Any]) -> Workload:
    """The workload the flags describe (registry counts unless --params/--flops-per-audio-second)."""
    from ..planning.workload import measured_throughput, registry_cost, shipped_throughput

    params, flops = args.params, args.flops_per_audio_second
    if params is None or flops is None:
        from ..config import ConfigError

        try:
            counted = registry_cost(args.model, overrides)
        except ConfigError as e:
            raise PlanError(str(e)) from None
        params, flops = params or counted[0], flops or counted[1]
    throughput, source = args.throughput or 0.0, "--throughput"
    if args.throughput_json:
        throughput = measured_throughput(args.throughput_json, args.model, args.precision)
        source = f"--throughput-json {args.throughput_json}"
    elif not throughput and args.model_overrides is None and args.params is None and args.flops_per_audio_second is None:
        shipped = shipped_throughput(args.gpu, args.model, args.precision, args.batch_seconds)
        if shipped:
            throughput, source = shipped
    if not throughput:
        source = f"analytic FLOPs x MFU {args.mfu:g} of the {args.gpu} peak (no measurement of this model on it)"
    return Workload(args.model, params, flops, throughput, args.hours, args.epochs, args.batch_seconds,
                    2 if args.precision == "amp" else 4, throughput_source=source)


def cluster_from_args(args: argparse.Namespace) -> Cluster:
    if not 0 <= args.jitter < 1 or not 0 <= args.overlap <= 1:
        raise PlanError("--jitter must be in [0, 1) and --overlap in [0, 1]")
    if args.price_preemptible and not args.price_on_demand:
        raise PlanError("--price-preemptible needs --price-on-demand too")
    intra, inter = LINKS[args.intra], LINKS[args.inter]
    intra = Link(args.intra_gbps or intra.bandwidth,
                 intra.latency_us if args.intra_latency_us is None else args.intra_latency_us)
    inter = Link(args.inter_gbps or inter.bandwidth,
                 inter.latency_us if args.inter_latency_us is None else args.inter_latency_us)
    return Cluster(gpu=args.gpu, precision=args.precision, mfu=args.mfu, gpus_per_node=args.gpus_per_node,
                   intra=intra, inter=inter, jitter=args.jitter, overlap=args.overlap,
                   price_on_demand=args.price_on_demand, price_preemptible=args.price_preemptible,
                   preemptions_per_node_hour=args.preemptions_per_node_hour,
                   checkpoint_minutes=args.checkpoint_minutes, checkpoint_seconds=args.checkpoint_seconds,
                   restart_minutes=args.restart_minutes)


def table(result: dict[str, Any]) -> str:
    """The plan as a fixed-width table, one row per GPU count, then the cheapest choice."""
    w = result["workload"]
    lines = [f"{w['name']}: {w['params'] / 1e6:.1f} M parameters, {w['hours']:g} h x {w['epochs']:g} epochs, "
             f"{result['per_gpu_throughput']:.0f} audio-s/s per GPU, strategy {result['strategy']}",
             f"per-GPU rate: {w['throughput_source'] or 'given'}",
             f"{'GPUs':>5} {'step ms':>8} {'compute':>8} {'comm':>7} {'exposed':>8} {'wait':>6} {'speedup':>8} "
             f"{'eff':>5} {'hours':>8} {'$ on-dem':>9} {'$ preempt':>10} {'lost h':>7}"]
    for r in result["rows"]:
        pre = f"{r['cost_preemptible']:10.0f}" if r["cost_preemptible"] is not None else f"{'-':>10}"
        lost = f"{r['lost_hours_preemptible']:7.2f}" if r["lost_hours_preemptible"] is not None else f"{'-':>7}"
        lines.append(f"{r['gpus']:5d} {1000 * r['step_s']:8.1f} {1000 * r['compute_s']:8.1f} {1000 * r['comm_s']:7.1f} "
                     f"{1000 * r['exposed_comm_s']:8.1f} {1000 * r['straggler_s']:6.1f} {r['speedup']:8.2f} "
                     f"{r['efficiency']:5.2f} {r['wall_hours_on_demand']:8.2f} {r['cost_on_demand']:9.0f} {pre} {lost}")
    best = result["cheapest"]
    if result["deadline_hours"] is not None:
        lines.append(f"cheapest within {result['deadline_hours']:g} h: " + (
            f"{best['gpus']} GPUs {best['pricing']}, {best['wall_hours']:.2f} h, ${best['cost']:.0f}" if best
            else "none of these GPU counts finishes in time"))
    return "\n".join(lines)


def calibration_table() -> tuple[str, bool]:
    """The calibration as printed by `plan --calibrate`, and whether every prediction met the goal."""
    from ..planning.calibration import GOAL, ROLES, cases

    rows = cases()
    preds = [r for r in rows if r["role"] == "prediction"]
    met = sum(r["ok"] for r in preds)
    lines = [f"goal, fixed before computing: every prediction within ±{GOAL:.0%} of the published figure",
             f"{'case':<66} {'published':>9} {'predicted':>9} {'error':>7}  {'role':<10} {'result':<15} inputs"]
    for r in rows:
        lines.append(f"{r['case']:<66} {r['published']:9.2f} {r['predicted']:9.2f} {r['error']:+7.1%}  "
                     f"{r['role']:<10} {r['status']:<15} {r['fitted']}")
    lines.append(f"{met} of {len(preds)} predictions within ±{GOAL:.0%}; missed: "
                 + (", ".join(f"{r['case']} ({r['error']:+.0%})" for r in preds if not r["ok"]) or "none"))
    lines += [f"{role}: {text}" for role, text in ROLES.items()]
    from ..planning.calibration import fit_jasper

    f = fit_jasper()
    eight = [r for r in preds if r["case"].startswith("Jasper") and " 8 GPUs" in r["case"]]
    lines.append(f"Jasper: overlap {f['overlap']:g}, {f['bandwidth_scale']:g} of the link's bandwidth, "
                 f"{f['latency_us']:g} us a hop and bucket, jitter {f['jitter']:g}, fitted jointly on the fit rows; "
                 f"the held-out 8-GPU rows are predicted {min(r['predicted'] for r in eight):.2f}-"
                 f"{max(r['predicted'] for r in eight):.2f} (published {min(r['published'] for r in eight):.2f}-"
                 f"{max(r['published'] for r in eight):.2f}): each from its own step time")
    return "\n".join(lines), met == len(preds)


def run(args: argparse.Namespace) -> int:
    """`speechscale plan`: one line on a bad plan, never a traceback."""
    return _run(args, yaml_mapping(args.model_overrides, "--model-overrides"))


def _run(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    if args.calibrate:
        print(calibration_table()[0])  # a report: misses are printed, not an error
        return 0
    if args.validate:
        from ..bench.planner import validate_planner

        print(json.dumps(validate_planner(), indent=2))
        return 0
    result = plan(workload_from_args(args, overrides), cluster_from_args(args), args.max_gpus, args.strategy,
                  args.deadline_hours)
    if args.out:
        from ..planning.plot import plot_plan

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "plan.json").write_text(json.dumps(result, indent=2))
        plot_plan(result, args.out / "plan.png")
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `plan` to the subcommand table."""
    pl = command(sub, "plan", "predict time-to-train and cost on 1..N GPUs (docs/planner.md)")
    add_arguments(pl)
    pl.set_defaults(func=run)
