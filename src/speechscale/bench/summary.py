"""The summary at the top of BENCHMARKS.md, rendered from the committed data (issue #43 §1): one row per headline
figure with its goal, reached or not (with the gap), when it was measured and the file it comes from.

    speechscale bench all --tables-only --out docs/figures/bench-all   # re-renders this block too

No figure here is typed by hand: each is read from `docs/figures/` (bench-all, gpu, test-time), and
tests/bench/test_summary.py fails when the block in BENCHMARKS.md differs from this rendering. A goal is
"reached" only when every measured value clears it (a figure with one run says "1 run"; one over seeds or
repeats is judged on its worst).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .tables import _goal, _md, _replace, read_block

TAG = "summary"
TEST_GOAL_S = 480  # `make test` on a normal day (development.md)


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _when(doc: dict[str, Any]) -> str:
    return doc["provenance"]["date"].split(" ")[0]


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _status(ok: bool, why: str = "") -> str:
    return "reached" if ok else f"**not reached**{f' ({why})' if why else ''}"


def _recipe_row(area: str, r: dict[str, Any], doc: dict[str, Any], source: str) -> dict[str, Any]:
    head, _, status = _goal(r).partition(": ")
    head = head.replace("≤ 0 %", "0 %")  # a goal of zero errors
    return {"area": area, "figure": f"WER {_pct(r['wer'])}, CER {_pct(r['cer'])} ({r['epochs']} epochs, 1 run)",
            "goal": head, "status": status, "date": _when(doc), "source": source}


def summary_rows(figures: Path) -> list[dict[str, Any]]:
    """The rows, from the JSON under `figures` (docs/figures); a missing file leaves its rows out."""
    bench, rows = figures / "bench-all", []
    demo = _load(bench / "demo.json")
    if demo:
        r = demo["results"][0]
        ok = r["cer"] <= r["goal"] and r["wall_seconds"] <= 900
        rows.append({"area": "`make demo` (synth + 14 epochs, unseen voice)",
                     "figure": f"{r['wall_seconds'] / 60:.1f} min, CER {_pct(r['cer'])}, WER {_pct(r['wer'])} (1 run)",
                     "goal": "≤ 15 min and CER ≤ 5 %", "status": _status(ok), "date": _when(demo),
                     "source": "bench-all/demo.json"})
    recipes = _load(bench / "recipes.json")
    for r in (recipes or {}).get("results", []):
        rows.append(_recipe_row(f"recipe `{r['recipe']}`", r, recipes, f"bench-all/recipes.json#{r['recipe']}"))
    fsdd = _load(bench / "fsdd.json")
    if fsdd:
        rows.append(_recipe_row("recipe `fsdd` (unseen speaker)", fsdd["results"]["recipe"], fsdd,
                                "bench-all/fsdd.json"))
    streaming = _load(bench / "demo-streaming.json")
    if streaming:
        rows.append(_recipe_row("recipe `demo_streaming` (offline score; goal: the demo's WER + 2 points)",
                                streaming["results"][0], streaming, "bench-all/demo-streaming.json"))
    rows += _throughput_rows(figures)
    rows += _service_rows(bench)
    rows += _straggler_rows(bench)
    rows += _test_time_rows(figures / "test-time")
    return rows


def _throughput_rows(figures: Path) -> list[dict[str, Any]]:
    rows = []
    train = _load(figures / "bench-all" / "train.json")
    for r in (train or {}).get("results", []):
        if r["precision"] == "fp32":
            rows.append({"area": f"CPU training, {r['model']} fp32, batch {r['batch_size']} x {r['utterance_seconds']:g} s",
                         "figure": f"{r['audio_seconds_per_second']:,} audio-s/s", "goal": "-", "status": "measured",
                         "date": _when(train), "source": "bench-all/train.json"})
    scaling = _load(figures / "bench-all" / "scaling.json")
    for r in (scaling or {}).get("results", []):
        if r["processes"] > 1:
            rows.append({"area": f"data-parallel {r['model']}, {r['processes']} processes on {r['cpu_cores']} cores",
                         "figure": f"{r['speedup']:.2f}x ({100 * r['efficiency']:.0f} % efficiency)", "goal": "-",
                         "status": "measured", "date": _when(scaling), "source": "bench-all/scaling.json"})
    for name, batch, goal in (("gpu-train", 32, 3500), ("gpu-train-b128", 128, 6000)):
        doc = _load(figures / "gpu" / f"{name}.json")
        r = next((r for r in (doc or {}).get("results", []) if r["model"] == "ds2-large" and r["precision"] == "bf16"),
                 None)
        if r:
            rate = r["audio_seconds_per_second"]
            rows.append({"area": f"GPU training, ds2-large bf16, batch {batch} x 10 s ({r['device']}, eager)",
                         "figure": f"{rate:,.0f} audio-s/s", "goal": f"≥ {goal:,} (issue #40)",
                         "status": _status(rate >= goal, f"gap {goal - rate:,.0f}"), "date": _when(doc),
                         "source": f"gpu/{name}.json"})
    for name, batch, goal in (("gpu-graphs", 32, 3500), ("gpu-graphs-b128", 128, 6000)):
        doc = _load(figures / "gpu" / f"{name}.json")
        modes = {r["precision"]: r for r in (doc or {}).get("results", []) if r["model"] == "ds2-large"}
        if "bf16+graphs" in modes:
            rate = modes["bf16+graphs"]["audio_seconds_per_second_compute"]
            rows.append({"area": f"GPU training, ds2-large bf16, batch {batch} x 10 s, CUDA graphs (data overlapped)",
                         "figure": f"{rate:,.0f} audio-s/s", "goal": f"≥ {goal:,} (issue #40)",
                         "status": _status(rate >= goal, f"gap {goal - rate:,.0f}"), "date": _when(doc),
                         "source": f"gpu/{name}.json"})
        for ref, want in (("fp32+graphs", 3.0), ("tf32+graphs", 1.6)):
            if "bf16+graphs" in modes and ref in modes:
                ratio = (modes["bf16+graphs"]["audio_seconds_per_second_compute"]
                         / modes[ref]["audio_seconds_per_second_compute"])
                rows.append({"area": f"GPU, ds2-large graphed: bf16 against {ref.partition('+')[0]}",
                             "figure": f"{ratio:.2f}x", "goal": f"≥ {want}x (issue #40)",
                             "status": _status(ratio >= want, f"gap {want - ratio:.2f}x"), "date": _when(doc),
                             "source": f"gpu/{name}.json"})
    return rows


def _service_rows(bench: Path) -> list[dict[str, Any]]:
    rows = []
    serve = _load(bench / "serve.json")
    for r in (serve or {}).get("results", []):
        if r["concurrency"] == 8:
            rows.append({"area": f"HTTP service, {r['clip_seconds']:g} s clips, 8 clients",
                         "figure": f"{r['requests_per_s']} requests/s, p95 {r['p95_ms']:,.0f} ms", "goal": "-",
                         "status": "measured", "date": _when(serve), "source": "bench-all/serve.json"})
    stream = _load(bench / "stream.json")
    if stream:
        res, when = stream["results"], _when(stream)
        e = res.get("exactness")
        if e:
            rows.append({"area": f"live streams, exactness over {e['files']} real files x {len(e['chunk_ms'])} chunk sizes",
                         "figure": f"{e['equal']} of {e['pairs']} streamed texts = offline", "goal": "all",
                         "status": _status(e["equal"] == e["pairs"]), "date": when, "source": "bench-all/stream.json"})
        for lv in res["levels"]:
            first = lv is res["levels"][0]
            rows.append({"area": f"live streams, {lv['streams']} in real time, chunk to answer",
                         "figure": f"p95 {lv['p95_ms']:,.0f} ms ({lv['rtf_cpu']} CPU s per audio s)",
                         "goal": "p95 ≤ 150 ms" if first else "-",
                         "status": _status(lv["p95_ms"] <= 150, f"gap {lv['p95_ms'] - 150:,.0f} ms") if first else "measured",
                         "date": when, "source": "bench-all/stream.json"})
        m = res.get("memory")
        if m:
            rows.append({"area": f"live streams, server memory over {m['streams']} ({m['abandoned']} abandoned)",
                         "figure": f"{m['growth_mb']:+.1f} MB", "goal": "< 50 MB",
                         "status": _status(m["growth_mb"] < 50), "date": when, "source": "bench-all/stream.json"})
    return rows


def _straggler_rows(bench: Path) -> list[dict[str, Any]]:
    doc = _load(bench / "straggler.json")
    rows = []
    for s in (doc or {}).get("results", {}).get("summary", []):
        if s["straggler"] is None:
            continue
        t = s.get("seconds_to_target") or {}
        figure = (f"{t['median']:.0f} s ({t['min']:.0f}-{t['max']:.0f}) over the seeds that reached it"
                  if t.get("median") is not None else "never reached")
        rows.append({"area": f"{s['strategy']}, one learner {s['straggler'].split()[-1]} slower: time to WER "
                             f"{_pct(s['target_wer'])}",
                     "figure": figure,
                     "goal": f"every seed reaches WER {_pct(s['target_wer'])}",
                     "status": _status(s["reached"] == s["runs"], f"{s['reached']} of {s['runs']} seeds did"),
                     "date": _when(doc), "source": "bench-all/straggler.json"})
    return rows


def _test_time_rows(folder: Path) -> list[dict[str, Any]]:
    runs = [json.loads(x) for f in sorted(folder.glob("*.jsonl")) for x in f.read_text().splitlines() if x.strip()]
    runs = [r for r in runs if "fresh clone" in r["provenance"].get("where", "")]
    if not runs:
        return []
    r = max(runs, key=lambda r: r["provenance"]["date"])
    s, gflops = r["pytest_seconds"], r["provenance"].get("fp32_matmul_gflops")
    return [{"area": "`make test` on a fresh clone (CI's command)",
             "figure": f"{s / 60:.1f} min, {r['passed']} passed" + (f" ({gflops} GFLOP/s matmul)" if gflops else ""),
             "goal": f"≤ {TEST_GOAL_S // 60} min", "status": _status(s <= TEST_GOAL_S, f"gap {int(s - TEST_GOAL_S)} s"),
             "date": r["provenance"]["date"].split(" ")[0], "source": "test-time/*.jsonl (newest fresh clone)"}]


def render(figures: Path) -> str:
    """The summary block's body."""
    rows = summary_rows(figures)
    return ("Generated from the committed data (`bench/summary.py`); each file under `docs/figures/` carries its "
            "machine, commit and command.\n\n" +
            _md(["area", "figure", "goal", "status", "measured", "data"],
                [[r["area"], r["figure"], r["goal"], r["status"], r["date"], f"`{r['source']}`"] for r in rows]))


def block(text: str) -> str | None:
    """The summary block's body in a BENCHMARKS.md text."""
    return read_block(text, TAG)


def update(path: Path, figures: Path) -> bool:
    """Re-render the summary block of `path`; False when it has none."""
    replaced = _replace(path.read_text(), TAG, render(figures))
    if replaced is not None:
        path.write_text(replaced)
    return replaced is not None
