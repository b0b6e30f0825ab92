"""Markdown tables of `bench all` results, and their place in BENCHMARKS.md.

Each generated block sits between `<!-- bench-all:NAME -->` and `<!-- /bench-all:NAME -->`; `bench all`
rewrites those blocks from its JSON files and nothing else, and a test renders the committed JSON again
and compares, so the tables cannot drift from what was measured.
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Callable


def changes_note(prov: dict[str, Any]) -> str:
    """' (what a `+changes` commit had changed)', where the provenance says so; else ''."""
    return f" ({prov['changes']})" if prov.get("changes") else ""


def _provenance(doc: dict[str, Any]) -> str:
    p = doc["provenance"]
    took = f", took {doc['seconds']:.0f} s" if doc.get("seconds") is not None else ""
    return (f"\n_Measured {p['date']} on {p['machine']}, commit `{p['commit']}`{changes_note(p)}, torch {p['torch']}{took}; "
            f"command: `{p['command']}`._\n")


def _md(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _train(res: list[dict[str, Any]]) -> str:
    rows = [[r["model"], r["precision"], f"{r['params'] / 1e6:.2f} M", r["audio_seconds_per_second"],
             f"{r['ms_per_step']} ({r['ms_per_step_p10_p90'][0]}-{r['ms_per_step_p10_p90'][1]})",
             r.get("speedup_vs_fp32", "-"), r["mfu"] if r["mfu"] is not None else "n/a"] for r in res]
    return _md(["model", "precision", "params", "audio-s/s", "ms/step median (p10-p90)", "vs fp32", "MFU"], rows)


def _train_compile(res: list[dict[str, Any]]) -> str:
    """Rows in pairs: each model eager, then compiled (bench train --compile both)."""
    rows = [[e["model"], f"{e['params'] / 1e6:.2f} M",
             f"{e['ms_per_step']} ({e['ms_per_step_p10_p90'][0]}-{e['ms_per_step_p10_p90'][1]})",
             f"{c['ms_per_step']} ({c['ms_per_step_p10_p90'][0]}-{c['ms_per_step_p10_p90'][1]})",
             f"{c['compile_speedup']}x", f"{e['first_loss']} / {c['first_loss']}"] for e, c in zip(res[::2], res[1::2])]
    first = res[0]
    return (f"{first['device']}, fp32, batch {first['batch_size']} x {first['utterance_seconds']:g} s, "
            f"{first['steps']} timed steps each, interleaved\n\n"
            + _md(["model", "params", "eager ms/step median (p10-p90)", "compiled ms/step", "compiled vs eager",
                   "first loss eager / compiled"], rows))


def _gpu_train(res: list[dict[str, Any]]) -> str:
    def busy(r: dict[str, Any]) -> str:
        if "gpu_busy_ms" not in r:
            return "n/a"
        return f"{r['gpu_busy_ms']} ms ({100 * r['gpu_busy_fraction']:.0f} %)"

    def compute_rate(r: dict[str, Any]) -> float:  # audio-s/s of the step without its serial data phase
        return r["batch_size"] * r["utterance_seconds"] / ((r["ms_per_step"] - r["ms_per_phase"]["data"]) / 1000)

    fp32 = {r["model"]: compute_rate(r) for r in res if r["precision"] == "fp32"}
    rows = [[r["model"], r["precision"], f"{r['params'] / 1e6:.1f} M", f"{r['audio_seconds_per_second']:,.0f}",
             f"{r['ms_per_step']} ({r['ms_per_step_p10_p90'][0]}-{r['ms_per_step_p10_p90'][1]})",
             f"{r.get('speedup_vs_fp32', '-')}x", f"{r['ms_per_phase']['data']}",
             f"{compute_rate(r):,.0f} ({compute_rate(r) / fp32[r['model']]:.2f}x)" if r["model"] in fp32 else "-",
             f"{r['achieved_tflops']:.1f} / {r['peak_tflops']:.0f}",
             f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "n/a (above the probe)", busy(r),
             f"{r['gpu_kernels_per_step']:,}" if "gpu_kernels_per_step" in r else "n/a",
             f"{r.get('peak_mem_mb', 0) / 1024:.1f}"] for r in res]
    first = res[0]
    return (f"{first['device']}, batch {first['batch_size']} x {first['utterance_seconds']:g} s cut from "
            f"{first['source']}, {first['steps']} timed steps per mode, the modes interleaved step by step. The "
            "step includes the bench's serial data phase (features on the CPU; a DataLoader overlaps it in "
            "training), so the step is also shown without it. TFLOP/s: the model's analytic rate / a matmul "
            "probe in the mode's dtype (fp32 probe without TF32), MFU their ratio. GPU busy: the summed kernel "
            "time of one profiled step against the median step. Peak memory is the process's, all modes resident."
            "\n\n" +
            _md(["model", "precision", "params", "audio-s/s", "ms/step median (p10-p90)", "vs fp32", "data ms",
                 "audio-s/s without data (vs fp32)", "TFLOP/s model / probe", "MFU", "GPU busy", "kernels/step",
                 "peak GiB"], rows))


def _loader(res: list[dict[str, Any]]) -> str:
    rows = [[r["source"], "on" if r["augment"] else "off", r["workers"], r["x_realtime"], r["x_realtime_per_worker"],
             f"{r['seconds']} ({r['seconds_min_max'][0]}-{r['seconds_min_max'][1]})"] for r in res]
    return _md(["source", "augment", "workers", "x real time", "per worker", "s per pass median (min-max)"], rows)


def _scaling(res: list[dict[str, Any]]) -> str:
    rows = [[r["model"], r["processes"], r["ms_per_step"], r["audio_seconds_per_second"], r["speedup"],
             r["efficiency"], r["comm_mb_per_step"], r["comm_ms_per_step"]] for r in res]
    return _md(["model", "processes", "ms/step", "audio-s/s", "speedup", "efficiency", "allreduce MB/step",
                "allreduce ms/step"], rows)


def _range(spread: dict[str, float] | None, fmt: str = "{:g}") -> str:
    if not spread:
        return "-"
    return f"{fmt.format(spread['median'])} ({fmt.format(spread['min'])}-{fmt.format(spread['max'])})"


def _straggler(res: dict[str, Any]) -> str:
    target = res["target_wer"]
    pct = "{:.1%}"
    rows = [[r["strategy"], r["straggler"] or "none", r["runs"], r["epochs"], _range(r["utterances_per_second"]),
             _range(r["throughput_vs_no_straggler"]),
             f"{r['reached']} of {r['runs']}" if r["reached"] == r["runs"] else f"**{r['reached']} of {r['runs']}**",
             _range(r["seconds_to_target"], "{:.0f} s"), _range(r["final_wer"], pct)] for r in res["summary"]]
    return (f"Median (min-max) over seeds {', '.join(str(s) for s in res['summary'][0]['seeds'])}; time to target: "
            f"wall seconds from launch to the first validation at WER <= {target:.0%}, over the runs that reached "
            "it.\n\n" +
            _md(["strategy", "straggler", "runs", "epochs", "utt/s", "vs no straggler", f"reached {target:.0%}",
                 "time to target", "final WER"], rows))


def _planner(res: dict[str, Any]) -> str:
    goal = res.get("goal", 0.10)
    cal = [[r["case"], r["published"], round(r["predicted"], 2), f"{100 * r['error']:+.1f} %", r["role"],
            "within" if r.get("ok") else f"**{r['status']}**" if r["role"] == "prediction" else "not graded"]
           for r in res["calibration"]]
    preds = [r for r in res["calibration"] if r["role"] == "prediction"]
    v = res["validation"]
    val = [[r["model"], r["processes"], r["step_ms_measured"], r["step_ms_predicted"],
            f"{100 * (r['step_ms_predicted'] / r['step_ms_measured'] - 1):+.0f} %", r["comm_ms_measured"],
            r["comm_ms_predicted"], r["speedup_measured"], r["speedup_predicted"]] for r in v["rows"]]
    return (f"Goal, fixed before computing: every prediction within ±{100 * goal:.0f} %; "
            f"{sum(bool(r.get('ok')) for r in preds)} of {len(preds)} met it. A *fit* row is the figure a constant "
            "was fitted on; a *check* follows from its inputs by construction and is not graded.\n\n" +
            _md(["case", "published", "predicted", "error", "role", f"±{100 * goal:.0f} %"], cal) +
            f"\ngloo on this machine: fitted link {v['link']['bandwidth_gb_s']} GB/s, {v['link']['latency_us']} µs "
            "per hop.\n\n" +
            _md(["model", "processes", "step ms measured", "predicted", "error", "allreduce ms measured", "predicted",
                 "speedup measured", "predicted"], val))


def _goal(r: dict[str, Any]) -> str:
    """'WER ≤ 5 %: reached', or not reached with the gap (rows before the CER goals carry goal_wer only)."""
    metric, goal = r.get("goal_metric", "wer"), r.get("goal", r["goal_wer"])
    head = f"{metric.upper()} ≤ {f'{100 * goal:.1f}'.rstrip('0').rstrip('.')} %: "
    return head + ("reached" if r["reached"] else f"**not reached** (gap {100 * (r[metric] - goal):.1f} points)")


def _recipes(res: list[dict[str, Any]]) -> str:
    rows = [[f"`{r['config']}`" + (f" with `{' '.join(r['overrides'])}`" if r.get("overrides") else ""),
             r["scored_on"], r["epochs"], r["steps"], f"{100 * r['wer']:.1f} %",
             f"{100 * r['cer']:.1f} %", r["stopped_by"] or "its epochs", f"{r['wall_seconds']:.0f} s",
             _goal(r)] for r in res]
    return _md(["recipe", "scored on", "epochs", "steps", "WER", "CER", "stopped by", "wall", "goal"], rows)


def _recipes_copies(res: list[dict[str, Any]]) -> str:
    """_recipes, then each checkpoint on the altered copies of its test set, where the bench scored them."""
    from .shared import SILENT_MIC_DBFS

    rows = [[f"`{r['config']}`", label, f"{100 * c['wer']:.1f} %", f"{100 * c['cer']:.1f} %"]
            for r in res if r.get("copies") for label, c in {"the test set": r, **r["copies"]}.items()]
    if not rows:
        return _recipes(res)
    return (_recipes(res) + "\nThe same checkpoint on copies of its test set as a live microphone gives them (the "
            f"silence: white noise at {SILENT_MIC_DBFS:g} dBFS RMS under the whole recording):\n\n" +
            _md(["recipe", "scored on", "WER", "CER"], rows))


def _export(res: list[dict[str, Any]]) -> str:
    rows = [[r["model"], f"{r['torch_ms']} ({r['torch_p90_ms']})", f"{r['onnx_ms']} ({r['onnx_p90_ms']})",
             f"{r['torchscript_ms']} ({r['torchscript_p90_ms']})", f"{r['onnx_vs_torch']}x",
             f"{r['torchscript_vs_torch']}x"] for r in res]
    return (f"One {res[0]['seconds']:g} s clip, batch 1, initial weights, {res[0]['threads']} torch threads; ms "
            "median (90th percentile), the backends in turn each round.\n\n" +
            _md(["model", "PyTorch", "ONNX Runtime", "TorchScript", "ONNX vs PyTorch", "TorchScript vs PyTorch"],
                rows))


def _serve(res: list[dict[str, Any]]) -> str:
    rows = [[r["concurrency"], r["requests"], r["requests_per_s"], r["x_realtime"], f"{r['p50_ms']:,.0f} ms",
             f"{r['p95_ms']:,.0f} ms"] for r in res]
    return (f"`speechscale serve` in its own process, clients on the same machine posting a {res[0]['clip_seconds']:g}"
            " s clip of JFK.\n\n" +
            _md(["concurrency", "requests", "requests/s", "x real time", "p50 latency", "p95 latency"], rows))


def _stream(res: dict[str, Any]) -> str:
    """The live-transcription levels and memory run, each against its goal (fixed in benchmarks/suite.py)."""
    rows = [[r["streams"], r["chunks"], f"{r['p50_ms']:,.0f} ms", f"{r['p95_ms']:,.0f} ms", f"{r['max_ms']:,.0f} ms",
             f"{r['behind_s_median']:.2f} s", r["rtf_cpu"], f"{r['healthz']['answered']} of {r['healthz']['polls']}",
             (f"{r['refused']['code']}" if r["refused"] else "-"), r["failed_streams"]] for r in res["levels"]]
    first, top = res["levels"][0], res["levels"][-1]
    goal = not res["model"].startswith("conformer")  # the conformer's capacity is measured, with no goal set
    lines = [f"p95 with {top['streams']} streams {top['p95_ms']:,.0f} ms" + (", goal ≤ 150 ms: " + (
        "reached" if top["p95_ms"] <= 150 else f"**not reached** (gap {top['p95_ms'] - 150:,.0f} ms)") if goal else "")]
    if top["refused"] is not None:
        lines.append(f"stream {top['streams'] + 1} at a limit of {top['streams']}: closed with "
                     f"{top['refused']['code']}, goal 1013: " + ("reached" if top["refused"]["code"] == 1013
                                                                 else "**not reached**"))
    e = res.get("exactness")
    if e:
        chunked = f" (attention in chunks of {e['attention_chunk']} frames, as it streams)" if e.get("attention_chunk") else ""
        lines.insert(0, f"streamed text = offline transcript{chunked} for {e['equal']} of {e['pairs']} (file, chunk size) pairs "
                        f"({e['files']} real files, chunks of {', '.join(f'{c:g}' for c in e['chunk_ms'])} ms), goal "
                        "all: " + ("reached" if e["equal"] == e["pairs"] else "**not reached**"))
        if "onnx" in e:
            o = e["onnx"]
            lines.insert(1, f"the same through the exported ONNX step (onnxruntime): {o['equal']} of {o['pairs']}, "
                            "goal all: " + ("reached" if o["equal"] == o["pairs"] else "**not reached**"))
    m = res.get("memory")
    if m:
        lines.append(f"server VmRSS over {m['streams']} streams ({m['abandoned']} abandoned mid-stream, {m['failed']} "
                     f"failed): {m['rss_mb_warm']:,.0f} MB after {m['warm_after']}, {m['rss_mb_end']:,.0f} MB at the end, growth "
                     f"{m['growth_mb']:+.1f} MB, goal < 50 MB: " + ("reached" if m["growth_mb"] < 50 else
                                                                    "**not reached**"))
    return (f"`speechscale serve` in its own process ({res['model']}, {res['weights']} weights); each client sends "
            f"real speech as 16-bit PCM in {first['chunk_ms']} ms chunks in real time ({first['seconds']:g} s a "
            "stream) and times each chunk to the partial that answers it; *behind* is the audio sent minus the "
            "audio that answer covers (the model's lookahead and windows); *CPU/audio s* is the server's CPU "
            "seconds per second of audio streamed.\n\n" +
            _md(["streams", "chunks", "p50", "p95", "max", "behind", "CPU/audio s", "/healthz answered",
                 "one more stream", "failed streams"], rows) + "\n" + "".join(f"- {x}\n" for x in lines))


def _conformer_streaming(res: list[dict[str, Any]]) -> str:
    """benchmarks/streaming_conformer.py: one streaming conformer at full context and in chunks, the offline
    conformer-tiny beside it, each against its goal."""
    s, base = res

    def row(run: dict[str, Any], attention: str, score: dict[str, Any], own: bool = False) -> list[Any]:
        """One scored row; `own`: the run's own minutes (the other rows score the same run)."""
        times = [run["train_minutes"], run.get("epoch_seconds_median", "-")] if own else ["same run", ""]
        return [run["model"], attention, f"{100 * score['wer']:.1f} %", f"{100 * score['cer']:.2f} %", *times]

    rc = s.get("right_context", 0)

    def chunks(c: int | str) -> str:
        """A chunk's label: its frames, and those it reads after it."""
        return f"chunks of {c} frames" + (f" + {rc} after" if rc else "")

    rows = [row(s, "full context", s, own=True)]
    rows += [row(s, f"{chunks(c)} ({int(c) * 40}{f' + {rc * 40}' if rc else ''} ms)", v) for c, v in s["chunks"].items()]
    rows.append(row(base, "full context (offline model)", base, own=True))
    copies = {  # the test set again, altered (every recording quieter; after a silent start): each one's row
        # label and the sentence that describes it
        "quieter": (lambda v: f"test audio {v['db']} dB quieter",
                    lambda v: f" Both again on the same utterances {v['db']} dB quieter (each recording scaled down, "
                              "as a microphone set lower than the corpus's)."),
        "after_silence": (lambda v: f"test audio after {v['seconds']:g} s of silence ({v['floor_dbfs']:g} dBFS noise)",
                          lambda v: f" And after {v['seconds']:g} s of a silent microphone (white noise at "
                                    f"{v['floor_dbfs']:g} dBFS under the whole recording), as a live user who waits "
                                    "before speaking.")}
    also = ""
    for key, (label, sentence) in copies.items():
        if key in s:
            what, v = label(s[key]), s[key]
            also += sentence(v)
            rows += [row(s, f"full context, {what}", v), row(s, f"{chunks(16)}, {what}", v["chunks"]["16"]),
                     row(base, f"full context (offline model), {what}", base[key])]
    c16, full = s["chunks"]["16"]["cer"], s["cer"]
    goals = [f"CER at {chunks(16)} {100 * c16:.2f} % against {100 * full:.2f} % at full context, goal within 10 % "
             f"(≤ {100 * s['goal_chunk16_cer']:.2f} %): " + ("reached" if c16 <= s["goal_chunk16_cer"] else "**not reached**"),
             f"CER at full context {100 * full:.2f} % against the offline conformer-tiny's {100 * base['cer']:.2f} %, goal "
             f"within 0.5 points (≤ {100 * s['goal_full_cer']:.2f} %): " +
             ("reached" if full <= s["goal_full_cer"] else "**not reached**")]
    e = s.get("exactness")
    if e:
        goals.append(f"the trained checkpoint streamed: text = offline text in the same attention chunks for {e['equal']} "
                     f"of {e['pairs']} (file, chunk size) pairs in PyTorch, {e['onnx']['equal']} of {e['onnx']['pairs']}"
                     " through its ONNX step (20 real files, chunks of 20 ms to 1 s), goal all: " +
                     ("reached" if e["equal"] == e["pairs"] and e["onnx"]["equal"] == e["onnx"]["pairs"]
                      else "**not reached**"))
    return (f"`{s['recipe']}` ({s['epochs']} epochs) and the same recipe with `model.name=conformer-tiny`, each "
            f"scored with `speechscale eval` on {s['utterances']} utterances of the demo's test voice, never used in "
            "training; the streaming model with attention at full context and in chunks (`--attention-chunk`), "
            "as it streams with that chunk" + (f", each chunk also reading the {rc} output frames after it "
                                               f"(`right_context: {rc}`)" if rc else "") + f".{also}\n\n" +
            _md(["model", "attention", "WER", "CER", "training minutes", "median s per epoch"], rows) + "\n" +
            "".join(f"- {x}\n" for x in goals))


def _yesno_shards(res: dict[str, Any]) -> str:
    rows = [[r["source"], r["seed"], r["epochs"], r["steps"], f"{100 * r['wer']:.1f} %", f"{100 * r['cer']:.1f} %",
             f"{r['wall_seconds']:.0f} s"] for r in res["rows"]]
    summ = [[k, f"{v['steps']['median']:.0f} ({v['steps']['min']:.0f}-{v['steps']['max']:.0f})",
             f"{100 * v['wer']['median']:.1f} % ({100 * v['wer']['min']:.1f}-{100 * v['wer']['max']:.1f} %)"]
            for k, v in res["summary"].items()]
    return (f"`{res['recipe']}` trained from its manifest and from shards of {res['shard_size']} files of the same "
            "31 training files (`speechscale data shard`), each seed both ways.\n\n" +
            _md(["source", "seed", "epochs", "steps", "WER", "CER", "wall"], rows) + "\n" +
            _md(["source", "steps: median (range)", "WER: median (range)"], summ))


def _fsdd(res: dict[str, Any]) -> str:
    rows = [[d["decoder"], f"{100 * d['wer']:.1f} %", f"{100 * d['cer']:.1f} %", d["utterances"],
             f"{d['alpha']} / {d['beta']}" if d.get("alpha") is not None else "-"] for d in res["decoders"]]
    return (_recipes([res["recipe"]]) + "\nThe same `last.pt` through each decoder (LM: a "
            f"{next((d['lm_order'] for d in res['decoders'] if d.get('lm_order')), 2)}-gram of the training speakers' "
            "transcripts; lexicon: their words):\n\n" +
            _md(["decoder", "WER", "CER", "utterances", "LM alpha / beta"], rows))


def _gpu_graphs(res: list[dict[str, Any]]) -> str:
    eager = {(r["model"], r["precision"]): r for r in res if not r.get("cuda_graphs")}
    fp32 = {r["model"]: r for r in res if r["precision"] == "fp32+graphs"}
    rows = []
    for r in res:
        base = eager.get((r["model"], r["precision"].partition("+")[0]))
        ref = fp32.get(r["model"])
        rows.append([r["model"], r["precision"], f"{r['audio_seconds_per_second_compute']:,.0f}",
                     f"{r['graphs_speedup']:.2f}x" if "graphs_speedup" in r else "-",
                     f"{r['audio_seconds_per_second_compute'] / ref['audio_seconds_per_second_compute']:.2f}x"
                     if ref and r.get("cuda_graphs") else "-",
                     f"{r['compute_ms_per_step']}", f"{r['ms_per_phase']['data']}",
                     f"{r['gpu_busy_ms']} ms" if "gpu_busy_ms" in r else "n/a",
                     f"{r['gpu_kernels_per_step']:,}" if "gpu_kernels_per_step" in r else "n/a",
                     f"{r['final_loss']}" + (f" ({base['final_loss']})" if base and base is not r else "")])
    first = res[0]
    return (f"{first['device']}, batch {first['batch_size']} x {first['utterance_seconds']:g} s cut from "
            f"{first['source']}, {first['steps']} timed steps per mode, each model's modes interleaved step by step. "
            "fp32 is true fp32 (TF32 off in matmuls and cuDNN), tf32 allows it; `+graphs`: the model's forward and "
            "backward replayed as a CUDA graph (trainer.cuda_graphs), CTC and the optimizer eager. Rates are of the "
            "step without the bench's serial data phase (a DataLoader overlaps it in training; shown apart). GPU "
            "busy: summed kernel time of one profiled step; kernels of a graphed step are counted as replayed.\n\n" +
            _md(["model", "mode", "audio-s/s", "graphed vs eager", "vs fp32 graphed", "ms/step", "data ms",
                 "GPU busy", "kernels/step", "final loss (eager)"], rows))


def _gpu_step(res: list[dict[str, Any]]) -> str:
    """The GPU step's leases: the training step by scheme, the probe beside it, the real trainer's log, the loader."""
    bench = [[r.get("lease", "-"), r["model"], r["batch_size"], f"{r['utterance_seconds']:g}", r["precision"],
              f"{r['audio_seconds_per_second_compute']:,.0f}", r["compute_ms_per_step"], r["ms_per_phase"]["optimizer"],
              f"{r['gpu_busy_ms']} ms" if "gpu_busy_ms" in r else "n/a"] for r in res if r.get("kind", "bench") == "bench"]
    probe = [[r["lease"], r["B"], r["precision"], r["path"], r["ms_median"], f"{r['audio_s_per_s']:,}"]
             for r in res if r.get("kind") == "probe"]
    logs = [[r["lease"], r["features"], ", ".join(f"{x['audio_s_per_s']:,.0f}" for x in r["rows"]),
             ", ".join(f"{x['host_ms_per_step']:.0f}" for x in r["rows"] if "host_ms_per_step" in x) or "n/a",
             f"{100 * r['val']['wer']:.1f} %" if r.get("val") else "n/a"] for r in res if r.get("kind") == "train-log"]
    loader = [[r["features"], "on" if r["augment"] else "off", r["workers"], f"{r['x_realtime_per_worker']:,.0f}x"]
              for r in res if r.get("kind") == "loader"]
    return ("`bench train` on ds2-large and the other families at 10 s utterances (yesno's for the train's batch), "
            "modes interleaved step by step within a lease; `bf16+graphs@SCHEME` names the bidirectional scheme, plain "
            "`+graphs` the layers' own. Rates are of the step without the bench's serial data phase; the optimizer phase "
            "is the graphed update where the mode is graphed (eager under fp16).\n\n" +
            _md(["lease", "model", "batch", "s", "mode", "audio-s/s", "ms/step", "optimizer ms", "GPU busy"], bench) +
            "\nThe limit probe (`../shared/tools/gpu_limit_probe.py`), its fused bidirectional call inexact for padded "
            "rows:\n\n" + _md(["lease", "batch", "precision", "path", "ms/step", "audio-s/s"], probe) +
            "\n`speechscale train` of ds2-large in bf16 with graphs on yesno x 20 (batches of 32 files, 2 shapes): "
            "audio-s/s and host ms per step of each logged interval (6 steps; the first and the fourth hold a shape's "
            "capture), WER after the last step.\n\n" +
            _md(["lease", "features", "audio-s/s per interval", "host ms/step", "val WER"], logs) +
            "\nThe training loader on the lent machine's CPU (16 kHz flac, 12 s utterances), the features in the loader "
            "or left to the step; one pass each, in the table's order (the first also read the files cold):\n\n" +
            _md(["features", "augment", "workers", "x real time per worker"], loader))


def _gpu_infer(res: list[dict[str, Any]]) -> str:
    rows = [[r["model"], r["mode"], r["precision"], r["batch_size"], r.get("ms_per_batch", "-"),
             f"{r['rtfx']:,.0f}" if "rtfx" in r else "-", f"{r['vs_eager']:.2f}x" if "vs_eager" in r else "-",
             f"{r['max_abs_diff_vs_eager']:.1e}" if "max_abs_diff_vs_eager" in r else
             (r["unavailable"] if "unavailable" in r else "-")] for r in res]
    first = res[0]
    return (f"{first['device']}, batches of {first['batch_size']} x {first['utterance_seconds']:g} s cut from LDC93S1, "
            f"{first['steps']} timed batches per mode, interleaved. RTFx: audio seconds per second of the forward and "
            "log-softmax, features prepared outside the clock.\n\n" +
            _md(["model", "mode", "precision", "batch", "ms/batch", "RTFx", "vs eager", "max diff vs eager"], rows))


def _align(res: list[dict[str, Any]]) -> str:
    def cells(e: dict[str, Any]) -> list[Any]:
        if not e.get("words"):
            return ["-"] * 6
        return [e["words"], f"{e['median_abs_ms']:g} ms", f"{e['p90_abs_ms']:g} ms", f"{e['mean_ms']:+g} ms",
                f"{100 * e['within_50_ms']:.0f} %", f"{100 * e['within_100_ms']:.0f} %"]

    rows = []
    for r in res:
        model = r["model"] + (f", {r['word_pieces']} word pieces" if r.get("word_pieces") else "")
        rows.append([model, f"{r['frame_ms']:g} ms", "`align` (the known text)", *cells(r["align"])])
        for key, what in (("align_first", "each sentence's first word (after a pause)"),
                          ("align_later", "the words inside sentences"),
                          ("align_letters", "every word started at its first letter, not at the space before it")):
            if key in r:
                rows.append([model, "", f"`align`: {what}", *cells(r[key])])
        rows.append([model, "", f"greedy word times ({r['greedy']['sentences']} of {r['sentences']} "
                     "sentences transcribed exactly)", *cells(r["greedy"])])
        if "long" in r:
            rows.append([model, "", f"`align` over one recording of the sentences repeated, {r['long']['minutes']:g} "
                         f"min (in segments; {r['long']['seconds']:g} s)", *cells(r["long"])])
    first = res[0]
    return (f"{first['sentences']} sentences of the demo's grammar spoken by espeak-ng's {first['voice']} (the demo's "
            "test voice, never trained on), each after a random lead of faint noise; a word's true start is espeak-ng's "
            "word event. Error: the timed start minus the true one.\n\n" +
            _md(["model", "output frame", "timed by", "words", "median abs. error", "p90 abs. error", "mean error",
                 "within 50 ms", "within 100 ms"], rows))


_ARM_LABELS = {"scratch": "from scratch", "init_from": "`trainer.init_from` the English model (shared symbols keep their rows)",
               "init_from_fresh_output": "the English model with its output layer started fresh",
               "init_from_frozen_front": "`trainer.init_from` the English model, its front end frozen "
                                         "(`trainer.freeze=[convs, conv_norms]`)"}


def _transfer(res: dict[str, Any]) -> str:
    """benchmarks/transfer.py: German trained from scratch and from the English demo model, per arm over seeds."""
    c, src = res["corpus"], res["source"]
    rows = []
    for arm, v in res["summary"].items():
        mine = [r for r in res["runs"] if r["arm"] == arm]
        lo, hi = v["wer_range"]
        rows.append([_ARM_LABELS.get(arm, arm), f"{100 * v['wer']:.1f} % ({100 * lo:.1f}-{100 * hi:.1f} %)",
                     f"{100 * v['cer']:.1f} %", v["seeds"], f"{sum(r['minutes'] for r in mine) / len(mine):.1f} min"])
    new = ", ".join(res["new_symbols"].replace(" ", "space"))
    return (f"The demo recipe's {src['model']} trained on English (the demo corpus, {src['epochs']} epochs: WER "
            f"{100 * src['wer']:.1f} % on its test voice) starts a German run: {c['utterances']['train']} utterances "
            f"({c['train_minutes']:g} min) of a small German grammar spoken by espeak-ng in {len(c['voices'])} German "
            f"voices, scored on {c['utterances']['test']} utterances of {c['test_voice']}, a voice never trained on; "
            f"{res['epochs']} epochs of the `{res['recipe']}` recipe, the German alphabet ({new} new). Medians over "
            "seeds.\n\n" + _md(["start", "WER: median (range)", "CER", "seeds", "training, a run"], rows))


def _pieces(res: dict[str, Any]) -> str:
    """benchmarks/pieces.py: one recipe trained with characters and with word pieces, on one seed."""
    rows = []
    for r in res["runs"]:
        units = "characters" if not r["pieces"] else f"`text.pieces={r['pieces']}`"
        lm = r.get("lm") or {}
        beam = [f"{100 * lm[k]['wer']:.1f} %" if k in lm else "-" for k in ("beta_0", "beta_1")]
        rows.append([units, r["units"], f"{r['target_units']:.1f} ({r['target_units'] / r['target_chars']:.2f}x)",
                     f"{100 * r['wer']:.1f} %", f"{100 * r['cer']:.1f} %", *beam,
                     f"{lm['beta_0']['seconds']:.0f} s" if "beta_0" in lm else "-"])
    first = res["runs"][0]
    extra = f" with {', '.join(f'`{o}`' for o in res['overrides'])}" if res.get("overrides") else ""
    return (f"The `{res['recipe']}` recipe ({first['model']}{extra}), {first['epochs']} epochs, seed {first['seed']}, "
            f"once per output unit; a training transcript averages {first['target_chars']:.1f} characters. WER and "
            "CER on the recipe's validation manifest: greedy, and a beam search with a 3-gram LM of the training "
            "transcripts (`lm build`, alpha 0.5) at a word bonus of 0 and of 1.\n\n"
            + _md(["output units", "classes (no blank)", "units a training transcript", "WER", "CER",
                   "WER, beam + LM, bonus 0", "bonus 1", "eval with the LM, wall"], rows)
            + _trained_at([r for r in res["runs"] if r.get("reused")]))


def _trained_at(reused: list[dict[str, Any]]) -> str:
    """The commits reused arms were trained at: one sentence for the block."""
    commits = sorted({r["trained_at"] for r in reused})
    if len(commits) <= 1:
        return "".join(f"\nThe runs were trained at commit `{c}` and scored again at this block's.\n" for c in commits)
    arms = [("characters" if not r["pieces"] else f"{r['pieces']} pieces", r["trained_at"]) for r in reused]
    listed = ", ".join(f"{label} at `{c}`" for label, c in arms)
    return f"\nThe runs were trained at their own commits ({listed}) and scored again at this block's.\n"


def int8_pairs(speed: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """bench infer's rows paired per model: (its onnx-int8 row, its float onnx row), both timed."""
    onnx = {r["model"]: r for r in speed if r["mode"] == "onnx" and "ms_per_batch" in r}
    return [(r, onnx[r["model"]]) for r in speed if r["mode"] == "onnx-int8" and "ms_per_batch" in r and r["model"] in onnx]


def _int8(res: dict[str, Any]) -> str:
    """benchmarks/int8.py: float and int8 ONNX files, full-size speed (bench infer) and trained models' accuracy."""
    speed = [[r["model"], r["mode"], r.get("ms_per_batch", "-"), f"{r['rtfx']:,.0f}" if "rtfx" in r else "-",
              f"{r['vs_eager']:.2f}x" if "vs_eager" in r else "-",
              f"{r['max_abs_diff_vs_eager']:.1e}" if "max_abs_diff_vs_eager" in r else r.get("unavailable", "-")]
             for r in res["speed"]]
    ratio = {q["model"]: f["ms_per_batch"] / q["ms_per_batch"] for q, f in int8_pairs(res["speed"])}
    acc = []
    for r in res["accuracy"]:
        f, q = r["float"], r["int8"]
        acc.append([r["model"], f"{100 * r['int8_share']:.1f} %", f"{100 * f['wer']:.2f} / {100 * q['wer']:.2f} %",
                    f"{100 * f['cer']:.2f} / {100 * q['cer']:.2f} %", f"{r['differing_transcripts']} of {r['utterances']}",
                    f"{f['bytes'] / 1e6:.1f} / {q['bytes'] / 1e6:.1f} MB",
                    f"{f['seconds']:.2f} / {q['seconds']:.2f} s ({f['seconds'] / q['seconds']:.2f}x)"])
    first, a0 = res["speed"][0], res["accuracy"][0]
    return (f"Full-size presets (initial weights), {first['device']}, {first['threads']} threads, batches of "
            f"{first['batch_size']} x {first['utterance_seconds']:g} s cut from LDC93S1, {first['steps']} timed batches "
            "per mode, interleaved: RTFx of the forward and log-softmax (features prepared outside the clock).\n\n"
            + _md(["model", "mode", "ms/batch", "RTFx", "vs eager", "max diff vs eager"], speed)
            + "\nint8 against float ONNX, the same run: "
            + ", ".join(f"{m} {x:.2f}x" for m, x in ratio.items())
            + f".\n\nTrained demo models, each exported as float ONNX and with `--int8`, transcribing the "
            f"{a0['utterances']} utterances ({a0['audio_seconds']:g} s) of the demo's test voice (greedy, `transcribe`'s "
            "path: features, model, decoding), float and int8 alternated twice, the faster pass of each kept.\n\n"
            + _md(["model", "weights int8", "WER float / int8", "CER float / int8", "transcripts that differ",
                   "file float / int8", "wall float / int8"], acc))


def remote_reads(res: dict[str, Any]) -> dict[tuple[float, str], dict[str, Any]]:
    """benchmarks/remote_shards.py's batch reads by (round trip s, reader)."""
    return {(r["round_trip_s"], r["reader"]): r for r in res["reads"]}


def remote_loader_share(res: dict[str, Any]) -> dict[int, float]:
    """The loader's rate over HTTP as a share of local disk's, by worker count (one run, passes interleaved)."""
    local = {r["workers"]: r["x_realtime"] for r in res["loader"] if r["where"] == "local"}
    return {r["workers"]: r["x_realtime"] / local[r["workers"]] for r in res["loader"] if r["where"] == "http"}


def _remote_shards(res: dict[str, Any]) -> str:
    """benchmarks/remote_shards.py: training batches read from shards over HTTP with a round trip, and the loader."""
    reads = remote_reads(res)
    rows = []
    for (delay, reader), r in reads.items():
        other = reads.get((delay, "buffered"))
        rows.append([f"{1000 * delay:g} ms", reader, f"{r['requests'] / r['batches']:.1f}",
                     f"{r['member_bytes'] / r['batches'] / 1e6:.1f} MB", f"{r['sent_bytes'] / r['batches'] / 1e6:.1f} MB",
                     f"{r['bytes_ratio']:.2f}x", f"{r['ms_per_batch']:g} ({r['ms_min_max'][0]:g}-{r['ms_min_max'][1]:g})",
                     f"{other['ms_per_batch'] / r['ms_per_batch']:.1f}x" if other else "-"])
    share = remote_loader_share(res)
    loader = [[r["where"], r["workers"], f"{r['x_realtime']:,.0f}",
               f"{r['seconds']:g} ({r['seconds_min_max'][0]:g}-{r['seconds_min_max'][1]:g})",
               f"{100 * share[r['workers']]:.0f} %" if r["where"] == "http" else "-"] for r in res["loader"]]
    first = res["reads"][0]
    return (f"{first['batches']} training batches ({first['utterances']} utterances of about "
            f"{res['loader'][0]['audio_seconds'] / res['loader'][0]['utterances']:.1f} s, 16 kHz flac) read from tar "
            "shards over HTTP on loopback, each answer after the round trip named; the two readers alternate batch by "
            "batch. Per batch: requests, the members' bytes, the bytes sent, their ratio, milliseconds median "
            "(min-max), and the buffered reader's time over this one's.\n\n"
            + _md(["round trip", "reader", "requests", "members", "sent", "sent / members", "ms per batch",
                   "buffered / this"], rows)
            + f"\nThe training loader (augmentation off), one pass over the corpus a time, passes interleaved, the "
            f"HTTP round trip {1000 * res['loader_round_trip_s']:g} ms:\n\n"
            + _md(["shards", "workers", "x real time", "s per pass median (min-max)", "share of local disk"], loader))


def _arm_rows(runs: list[dict[str, Any]], names: dict[str, str]) -> list[list[Any]]:
    """A row per fine-tuning arm (in first-seen order) of `runs` (each with arm, greedy and lm WER): its name, the
    lines it added, greedy WER by seed and its median, and the LM's median (range)."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_arm.setdefault(r["arm"], []).append(r)
    rows = []
    for arm, its in by_arm.items():
        greedy = [100 * r["greedy"]["wer"] for r in its]
        lm = [100 * r["lm"]["wer"] for r in its]
        rows.append([names.get(arm, arm), its[0].get("utterances", "-"),
                     " / ".join(f"{x:.1f}" for x in greedy) + " %", f"{statistics.median(greedy):.1f} %",
                     f"{statistics.median(lm):.1f} %" + (f" ({min(lm):.1f}-{max(lm):.1f})" if len(lm) > 1 else "")])
    return rows


def _selftrain(res: dict[str, Any]) -> str:
    """benchmarks/selftrain.py: the teacher's labels of an unseen voice's speech, and fine-tuning on them, by seed."""
    settings = res.get("settings") or {}
    bound = settings.get("min_confidence")
    labels = []
    for name, lab in res["labels"].items():
        at = next((b for b in lab.get("by_confidence", []) if b["min_confidence"] == bound), None)
        kept = f"{100 * at['share']:.0f} %" + (f", WER {100 * at['wer']:.1f} %" if at["wer"] is not None else "") \
            if at else "-"
        labels.append(["greedy" if name == "greedy" else "beam + 3-gram LM",
                       f"{100 * lab['wer_kept']:.1f} %" if lab.get("wer_kept") is not None else "-", kept,
                       f"{lab['seconds']:.0f} s"])
    names = {"teacher": "the teacher (no fine-tuning)", "control": "training data only (the control)",
             "greedy": "+ greedy labels", "lm": "+ the LM's labels", "lm-confident": f"+ the LM's labels ≥ {bound}"}
    seeds = sorted({r["seed"] for r in res["arms"] if "seed" in r})
    arms = _arm_rows(res["arms"], names)
    trained = sorted({(r["trained_at"], r["seed"]) for r in res["arms"] if "trained_at" in r})
    commits = sorted({c for c, _ in trained})
    where = ", ".join(f"`{c}` (seed {', '.join(str(sd) for cc, sd in trained if cc == c)})" for c in commits)
    return (f"The teacher `{res['teacher']}` labels {res['pool_utterances']} new sentences spoken in the demo's test "
            f"voice ({res['pool_left_out']} synthesized sentences left out as the test set's own); the labels' WER is "
            f"read from their references after labelling. Then each arm fine-tunes the teacher for "
            f"{settings.get('steps')} steps (peak lr {settings.get('lr')}) on the demo's training data plus its labels, "
            f"once on each seed ({', '.join(map(str, seeds))}), and each run's `last.pt` is scored on the demo's test "
            "set.\n\n"
            + _md(["labels by", "WER of the labels", f"kept at --min-confidence {bound}", "labelling wall"], labels)
            + "\n" + _md(["fine-tuned on", "labelled utterances", "WER greedy, by seed", "median",
                          "WER, beam + LM: median (range)"], arms)
            + f"\nThe runs were trained at commit {where} and scored at this block's.\n")


def _longform(res: dict[str, Any]) -> str:
    """benchmarks/longform.py: long recordings cut at their pauses by align and label, against the same sentences cut
    by hand; the cutter's ablation; fine-tuning on each, by seed."""
    settings = res.get("settings") or {}

    def quality(name: str, q: dict[str, Any], extra: list[str]) -> list[Any]:
        share = f"{100 * q['share_in_pauses']:.1f} %" if q.get("share_in_pauses") is not None else "-"
        return [name, q["segments"], f"{q['mean_seconds']:.1f} s (at most {q['max_seconds']:.1f})",
                f"{q['cuts_in_pauses']} of {q['cuts']} ({share})", f"{100 * q['wer_vs_truth']:.1f} %", *extra]

    cuts = [quality("`align --out-manifest` (the true text)", res["cuts"]["align"], [f"{res['cuts']['align']['seconds']:.0f} s"]),
            quality("`label --decoder beam --lm` (no text)", res["cuts"]["label"], [f"{res['cuts']['label']['seconds']:.0f} s"])]
    if "align-short" in res["cuts"]:
        cuts.append(quality(f"`align --out-manifest --max-seconds {settings.get('short_seconds')}`",
                            res["cuts"]["align-short"], [f"{res['cuts']['align-short']['seconds']:.0f} s"]))
    names = {"align/audio": "aligned words, pauses in the audio (align's)", "align/word_times":
             "aligned words, gaps of their own times", "greedy/audio": "greedy's words, pauses in the audio",
             "greedy/word_times": "greedy's words, gaps of their own times",
             "greedy/audio/again": "greedy's words, pauses in the audio, each segment decoded again alone (label's)"}
    ablation = [quality(names.get(k, k), q, []) for k, q in res["ablation"].items()]
    arm_names = {"teacher": "the teacher (no fine-tuning)", "control": "training data only (the control)",
                 "lm": "+ the sentences' files, the LM's labels", "sentences-true": "+ the sentences' files, true text",
                 "long-align": "+ the long recordings' segments, `align` (true text)",
                 "long-label": "+ the long recordings' segments, `label` (LM labels)",
                 "long-align-short": f"+ the long recordings' segments of at most {settings.get('short_seconds')} s, "
                                     "`align`"}
    arms = _arm_rows(res["arms"], arm_names)
    seeds = sorted({r["seed"] for r in res["arms"] if "seed" in r})
    trained = sorted({(r["trained_at"], r["seed"], r["arm"]) for r in res["arms"] if "trained_at" in r})
    commits = sorted({c for c, _, _ in trained})
    where = "; ".join(f"`{c}`: " + ", ".join(sorted({a for cc, _, a in trained if cc == c})) for c in commits)
    return (f"{res['pool_utterances']} sentences in the demo's unseen test voice joined in order into "
            f"{res['recordings']} recordings of about {res['recording_minutes']:.1f} minutes (a drawn pause of "
            f"0.25-1 s between two sentences), cut into segments of at most {settings.get('max_seconds')} s (or, where named, "
            f"{settings.get('short_seconds')} s) by the "
            "teacher `" + res["teacher"] + "`. A cut is in a pause when it falls between two sentences' files (each "
            "file's own edge silence counts as the sentence's); a segment's text is scored against the sentences "
            "whose middle it holds. The LM's labels of the same sentences as separate files have a WER of "
            f"{100 * res['sentences_lm_wer']:.1f} %.\n\n"
            + _md(["cut by", "segments", "length: mean", "cuts in a pause", "WER of the segments' text", "wall"], cuts)
            + "\nThe cutter's ablation, on the same recordings (the words of each alignment or greedy transcript cut "
            "twice)" + (f"; greedy on each sentence's own file has a WER of {100 * res['sentences_greedy_wer']:.1f} %"
                        if "sentences_greedy_wer" in res else "") + ":\n\n"
            + _md(["words and pauses", "segments", "length: mean", "cuts in a pause", "WER of the segments' text"],
                  ablation)
            + f"\nEach arm fine-tunes the teacher for {settings.get('steps')} steps on the demo's training data plus "
            f"what it names, once on each seed ({', '.join(map(str, seeds))}); each run's `last.pt` is scored on the "
            "demo's test set.\n\n"
            + _md(["fine-tuned on", "added lines", "WER greedy, by seed", "median", "WER, beam + LM: median (range)"],
                  arms)
            + f"\nThe runs were trained at commit {where}, and scored at this block's.\n")


CHUNKING_GOAL_POINTS = 2.0  # auto's WER at most this many points above each sentence alone, in every condition


def _chunking(res: dict[str, Any]) -> str:
    """benchmarks/chunking.py: long recordings transcribed whole, cut into chunks each arm's way, against each sentence
    alone; WER by noise condition, the chunks' lengths and the wall."""
    conds = res["conditions"]
    real = "manifest" in res  # files of a corpus joined as recorded, not the pool's sentences
    names = {"sentences": f"each {'file' if real else 'sentence'}'s span alone (the mark)",
             "fixed-20": "chunks of at most 20 s at the quietest 20 ms (the old default)",
             "fixed-auto": f"chunks of at most {res['auto_seconds']:g} s at the quietest 20 ms",
             "pauses-20": "cut at pauses, at most 20 s",
             "pauses-auto-untrimmed": f"cut at pauses, at most {res['auto_seconds']:g} s, the pauses kept",
             "auto": f"`transcribe`'s default: cut at pauses, at most {res['auto_seconds']:g} s, 0.2 s of each pause kept"}
    first = next(iter(conds))
    label = {c: "clean" if c == "clean" else f"SNR {c} dB" for c in conds}
    rows = [[names.get(a, a), f"{conds[first][a]['median_seconds']:.1f} s ({conds[first][a]['max_seconds']:.1f})",
             *(f"{100 * conds[c][a]['wer']:.1f} %" for c in conds), f"{100 * conds[first][a]['heard_share']:.0f} %",
             conds[first][a]["rtfx"]] for a in conds[first]]
    gaps = {c: 100 * (conds[c]["auto"]["wer"] - conds[c]["sentences"]["wer"]) for c in conds}
    ok = all(g <= CHUNKING_GOAL_POINTS for g in gaps.values())
    sec = res.get("training_seconds") or {}
    trained = (f"its card says its training utterances last {sec['median']:g} s (median), 90 % under {sec['p90']:g} s, "
               f"so `transcribe` cuts at most {res['auto_seconds']:g} s") if sec else \
        f"its card does not say how long its training utterances were, so `transcribe` cuts {res['auto_seconds']:g} s"
    joined = (f"{res['pool_utterances']} files of `{res['manifest']}` (lines `{res['lines']}`) joined back to back as "
              f"recorded into {res['recordings']} recordings of about {res['recording_minutes']:.1f} minutes (each file "
              "keeps its own room noise at its edges)") if real else (
        f"{res['pool_utterances']} sentences in the demo's unseen test voice joined in order into {res['recordings']} "
        f"recordings of about {res['recording_minutes']:.1f} minutes ({_pool_gap(res)})")
    return (f"{joined}, transcribed greedy by the teacher `{res['teacher']}`: {trained}. Each recording is "
            f"transcribed whole by each arm in turn and its text scored against the {'files' if real else 'sentences'}'; "
            "noise is white, added "
            "throughout at the SNR named (below the speech's mean power). Chunk lengths, the share of the audio the "
            f"model hears and the real-time factor are the {label[first]} condition's.\n\n"
            + _md(["cut", "chunks: median (longest)", *(f"WER {label[c]}" for c in conds), "audio heard", "RTFx"], rows)
            + f"\nGoal, set before this run: the default within {CHUNKING_GOAL_POINTS:g} points of each "
            f"{'file' if real else 'sentence'} alone in "
            f"every condition: {'reached' if ok else '**not reached**'} ("
            + ", ".join(f"{label[c]} {g:+.1f}" for c, g in gaps.items()) + " points).\n")


def pool_gap(res: dict[str, Any]) -> tuple[float, float]:
    """The pause (low, high s) drawn between two of the pool's sentences in benchmarks/chunking's recordings (its
    --gap; longform's pause in a run from before the option)."""
    from .longform import POOL_GAP

    low, high = (res.get("settings") or {}).get("gap_seconds", POOL_GAP)
    return low, high


def _pool_gap(res: dict[str, Any]) -> str:
    """What parts two of the pool's sentences in benchmarks/chunking's recordings, in words."""
    low, high = pool_gap(res)
    if high == 0:
        return "back to back: nothing parts two sentences, cut tight to their speech"
    return f"a drawn pause of {low:g}-{high:g} s between two"


def _load_cost(res: list[dict[str, Any]]) -> str:
    """Reading model files through the checked reader against the readers before it (benchmarks/load_cost.py)."""
    return _md(["file", "before (s)", "checked (s)", "checked / before"],
               [[r["file"], f"{r['before_s']:.3f}", f"{r['checked_s']:.3f}", f"{r['ratio']:.2f}"] for r in res])


def _segments_yesno(res: list[dict[str, Any]]) -> str:
    """align, label and transcribe on yesno's held-out recordings (benchmarks/segments_yesno.py)."""
    rows = []
    for r in res:
        if r["tool"] == "transcribe":
            rows.append([r["tool"], r["recordings"], "-", "-", "-", r["words_past_end"]])
        else:
            rows.append([r["tool"], r["recordings"], r["segments"], r["silent_segments"],
                         f"{r['recordings_words_exact']} of {r['recordings']}", "-"])
    return _md(["command", "recordings", "segments", "segments without speech", "recordings whose segments spell "
                "their eight words", "words past the end"], rows)


def _dspt_streaming(res: list[dict[str, Any]]) -> str:
    """A deepspeech.pytorch model's streamed text against its own offline text (benchmarks/dspt_streaming.py)."""
    return _md(["statistics over", "their mean / deviation", "recording", "CER against deepspeech.pytorch's offline "
                "text", "frames whose best symbol differs"],
               [[r["stats"], f"{r['mean']:.3f} / {r['std']:.3f}", r["recording"], f"{100 * r['cer']:.1f} %",
                 f"{100 * r['frames_other_symbol']:.1f} %"] for r in res])


def _serving(name: str) -> Callable[[Any], str]:
    def render(res: Any) -> str:
        from .serving_tables import RENDERERS

        return RENDERERS[name](res)
    return render


RENDER: dict[str, Callable[[Any], str]] = {"train": _train, "loader": _loader, "scaling": _scaling,
                                           "straggler": _straggler, "planner": _planner, "recipes": _recipes,
                                           "export": _export, "serve": _serve, "fsdd": _fsdd, "demo": _recipes,
                                           "demo-streaming": _recipes_copies, "stream": _stream,
                                           "stream-conformer": _stream,
                                           "demo-conformer-streaming": _conformer_streaming,
                                           "yesno-shards": _yesno_shards, "train-compile": _train_compile,
                                           "gpu-train": _gpu_train, "gpu-train-b128": _gpu_train,
                                           "gpu-graphs": _gpu_graphs, "gpu-graphs-b128": _gpu_graphs,
                                           "gpu-recipes": _recipes, "gpu-step": _gpu_step, "gpu-infer": _gpu_infer,
                                           "soak": _serving("soak"), "stream-stacks": _serving("stream-stacks"),
                                           "align": _align, "align-long": _align, "transfer-de": _transfer,
                                           "pieces-demo": _pieces, "pieces-demo-long": _pieces, "int8": _int8,
                                           "selftrain-demo": _selftrain, "longform-demo": _longform,
                                           "chunking-demo": _chunking, "chunking-demo-connected": _chunking,
                                           "chunking-yesno": _chunking, "loader-remote": _remote_shards,
                                           "load-cost": _load_cost, "segments-yesno": _segments_yesno,
                                           "dspt-streaming": _dspt_streaming}


def render(name: str, doc: dict[str, Any]) -> str:
    """The block for bench `name`: its table and the provenance line (or the error it stopped with)."""
    res = doc["results"]
    body = f"**This bench failed:** `{res['error']}`\n" if isinstance(res, dict) and "error" in res \
        else RENDER[name](res)
    return body + _provenance(doc)


def _pattern(tag: str) -> re.Pattern[str]:
    """A generated block of BENCHMARKS.md: `<!-- TAG -->`, newline, body, `<!-- /TAG -->`."""
    return re.compile(rf"(<!-- {re.escape(tag)} -->\n)(.*?)(<!-- /{re.escape(tag)} -->)", re.S)


def read_block(text: str, tag: str) -> str | None:
    """The body of the `tag` block in `text`, if any."""
    m = _pattern(tag).search(text)
    return m.group(2) if m else None


def _replace(text: str, tag: str, body: str) -> str | None:
    """`text` with the `tag` block's body replaced, or None when there is no such block."""
    pat = _pattern(tag)
    return pat.sub(lambda m: m.group(1) + body + m.group(3), text) if pat.search(text) else None


def blocks(text: str) -> dict[str, str]:
    """The generated blocks in a BENCHMARKS.md text, by bench name."""
    pat = r"<!-- bench-all:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /bench-all:(?P=name) -->"
    return {m.group("name"): m.group("body") for m in re.finditer(pat, text, re.S)}


DETAIL_PAGES = Path("docs") / "benchmarks"  # each area's detail page, beside BENCHMARKS.md


def pages(md: Path) -> list[Path]:
    """BENCHMARKS.md and the area pages beside it (docs/benchmarks/*.md): where the generated blocks live."""
    return [md, *sorted((md.parent / DETAIL_PAGES).glob("*.md"))]


def pages_text(md: Path) -> str:
    """BENCHMARKS.md and its area pages, one after the other (to find a block wherever it is)."""
    return "\n".join(p.read_text() for p in pages(md) if p.is_file())


def replace_in_pages(md: Path, tag: str, body: str) -> bool:
    """Replace the `tag` block's body in whichever of `md`'s pages holds it; False when none does."""
    found = False
    for page in pages(md):
        if page.is_file() and (replaced := _replace(page.read_text(), tag, body)) is not None:
            page.write_text(replaced)
            found = True
    return found


def update(path: Path, docs: dict[str, dict[str, Any]]) -> list[str]:
    """Replace each bench's block, in BENCHMARKS.md (`path`) or the area page that holds it, with its rendering
    (blocks missing from every page are appended to `path` under a new heading); returns the names written."""
    if not path.is_file():
        path.write_text("# Benchmarks\n")
    appended = []
    for name, doc in docs.items():
        block = render(name, doc)
        if not replace_in_pages(path, f"bench-all:{name}", block):
            appended.append(f"### {name}\n\n<!-- bench-all:{name} -->\n{block}<!-- /bench-all:{name} -->\n")
    if appended:
        path.write_text(path.read_text().rstrip("\n") + "\n\n## `python -m benchmarks all` (generated)\n\n"
                        + "\n".join(appended))
    return list(docs)


# ---- ADPSGD on one GPU (docs/figures/gpu/adpsgd.sh): one JSON per (device, precision, seed) ---------------


def render_gpu_adpsgd(docs: dict[str, dict[str, Any]]) -> str:
    """One row per learner group run (file stem x variant): where, precision, seed, final and best WER,
    consensus distance, rank 0's exchanges, wall; then one provenance line per file."""
    rows, notes = [], []
    for name, doc in sorted(docs.items()):
        for r in doc["results"]:
            s = r["summary"] or {}
            rows.append([f"`{name}`", r["variant"], s.get("device", "-"), s.get("precision", "-"),
                         _seed(doc["settings"]["overrides"]),
                         f"{100 * s['wer']:.1f} % ({100 * s['best_wer']:.1f} %)" if s else "**failed**",
                         f"{s['consensus_distance']:.2g}" if s else "-", f"{s['exchanges']:.0f}" if "exchanges" in s else "-",
                         f"{r['wall_seconds']:.0f} s"])
        p = doc["provenance"]
        notes.append(f"- `{name}`: {p['machine']}, {p['date']}, commit `{p['commit']}`, torch {p['torch']}; "
                     f"`{doc['settings']['config']}` with `{' '.join(doc['settings']['overrides'])}`")
    return (_md(["run", "variant", "device", "precision", "seed", "WER at the end (best)", "consensus distance",
                 "exchanges (rank 0)", "wall"], rows) + "\n" + "\n".join(notes) + "\n")


def _seed(overrides: list[str]) -> str:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("trainer.seed=")), "1 (the recipe's)")


def gpu_adpsgd_docs(folder: Path) -> dict[str, dict[str, Any]]:
    """The ADPSGD run files in `folder`, by file stem."""
    return {f.stem: json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))}


def gpu_adpsgd_block(text: str) -> str | None:
    return read_block(text, "gpu-adpsgd")


def update_gpu_adpsgd(path: Path, docs: dict[str, dict[str, Any]]) -> bool:
    """Rewrite the `<!-- gpu-adpsgd -->` block of `path` or its area pages from `docs`; False when none has it."""
    return replace_in_pages(path, "gpu-adpsgd", render_gpu_adpsgd(docs))
