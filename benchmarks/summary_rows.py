"""The rows of BENCHMARKS.md's per-area tables (benchmarks/summary.py renders them), each read from a JSON file under
`docs/figures/` with that file's provenance: what was measured, the figure, its goal, reached or not with the gap.
A missing file leaves its rows out."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from .recipes import RECIPES
from .tables import _goal, changes_note, int8_pairs

# recipes run over seeds by `benchmarks convergence` (one process): convergence/NAME.jsonl, the recipe, its goal WER
SEED_RECIPES = (("fsdd", "fsdd", RECIPES["fsdd"]["goal_wer"]), ("fsdd-conformer", "fsdd_conformer", RECIPES["fsdd"]["goal_wer"]),
                ("yesno-conformer", "yesno-conformer", RECIPES["yesno-conformer"]["goal_wer"]))

SECTIONS = ("accuracy", "cpu", "gpu", "data", "distributed", "planner", "inference", "tests")
LOADER_GOAL = 1500  # x real time per worker, issue #12
STEP_TOLERANCE = 0.05  # shards against manifest: steps within a few % (issue #43 §4)


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _status(ok: bool, why: str = "") -> str:
    return "reached" if ok else f"**not reached**{f' ({why})' if why else ''}"


def _row(section: str, what: str, figure: str, goal: str, status: str, prov: dict[str, Any], source: str,
         command: str | None = None) -> dict[str, Any]:
    return {"section": section, "what": what, "figure": figure, "goal": goal, "status": status,
            "date": prov["date"].split(" ")[0], "machine": prov["machine"],
            "commit": f"`{prov.get('commit', '?')}`{changes_note(prov)}",
            "command": command or prov["command"], "source": source}


def _spread(xs: list[float], fmt: str = "{:.0f}", unit: str = "") -> str:
    """'median UNIT (min-max)', or the one value."""
    med = fmt.format(statistics.median(xs)) + unit
    return med if len(xs) == 1 else f"{med} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def summary_rows(figures: Path) -> list[dict[str, Any]]:
    """Every area's rows, in SECTIONS order, from the JSON under `figures` (docs/figures)."""
    from .serving_tables import serving_rows
    from .step_rows import gpu_step_rows

    return [*_accuracy(figures), *_cpu(figures), *_gpu(figures), *_data(figures), *_distributed(figures),
            *_planner(figures), *_inference(figures), *serving_rows(figures), *_tests(figures / "test-time"), *_startup(figures),
            *gpu_step_rows(figures / "gpu")]


def _recipe(what: str, r: dict[str, Any], doc: dict[str, Any], source: str, section: str = "accuracy") -> dict:
    head, _, status = _goal(r).partition(": ")
    head = head.replace("≤ 0 %", "0 %")  # a goal of zero errors
    return _row(section, what, f"WER {_pct(r['wer'])}, CER {_pct(r['cer'])} ({r['epochs']} epochs, 1 run)", head,
                status, doc["provenance"], source)


def _accuracy(figures: Path) -> list[dict[str, Any]]:
    bench, rows = figures / "bench-all", []
    demo = _load(bench / "demo.json")
    if demo:
        r = demo["results"][0]
        ok = r["cer"] <= r["goal"] and r["wall_seconds"] <= 900
        rows.append(_row("accuracy", "`make demo` (synth + 14 epochs, unseen voice)",
                         f"{r['wall_seconds'] / 60:.1f} min, CER {_pct(r['cer'])}, WER {_pct(r['wer'])} (1 run)",
                         "≤ 15 min and CER ≤ 5 %", _status(ok), demo["provenance"], "bench-all/demo.json"))
    recipes = _load(bench / "recipes.json")
    for r in (recipes or {}).get("results", []):
        rows.append(_recipe(f"recipe `{r['recipe']}`", r, recipes, f"bench-all/recipes.json#{r['recipe']}"))
    rows += _seeds(figures)
    fsdd = _load(bench / "fsdd.json")
    if fsdd:
        rows.append(_recipe("recipe `fsdd` (unseen speaker)", fsdd["results"]["recipe"], fsdd, "bench-all/fsdd.json"))
    from .summary_runs import one_process_seeds

    for name, recipe, goal in SEED_RECIPES:
        rows += one_process_seeds(figures / "convergence" / f"{name}.jsonl", recipe, goal)
    streaming = _load(bench / "demo-streaming.json")
    if streaming:
        r = streaming["results"][0]
        rows.append(_recipe("recipe `demo_streaming` (offline score; goal: the demo's WER + 2 points)",
                            r, streaming, "bench-all/demo-streaming.json"))
        if r.get("copies"):  # the same checkpoint on a live microphone's copies of its test set
            rows.append(_row("accuracy", "recipe `demo_streaming` on copies of its test set as a live microphone gives "
                             "them", ", ".join(f"{label} CER {_pct(c['cer'])}" for label, c in r["copies"].items()) +
                             f" (as recorded {_pct(r['cer'])})", "-", "measured", streaming["provenance"],
                             "bench-all/demo-streaming.json"))
    return (rows + _selftrain(bench) + _longform(bench) + _chunking(bench) + _loso(figures / "loso")
            + _rnn_bias(figures / "rnn-bias" / "fsdd.jsonl"))


def _longform(bench: Path) -> list[dict[str, Any]]:
    """benchmarks/longform.py: long recordings cut by align and label; greedy WER after fine-tuning on label's
    segments against the same sentences' files with the same labeller's text (medians over seeds)."""
    doc = _load(bench / "longform-demo.json")
    res = (doc or {}).get("results", {})
    runs = res.get("arms", [])
    wer = {a: [100 * r["greedy"]["wer"] for r in runs if r["arm"] == a] for a in ("long-label", "lm", "long-align",
                                                                                  "sentences-true")}
    if not all(wer.values()):
        return []
    n = len(wer["lm"])
    cut = res["cuts"]["label"]
    return [_row("accuracy", f"long recordings cut at their pauses into training segments ({res['recordings']} of about "
                 f"{res['recording_minutes']:.1f} min): fine-tuned on `label`'s segments against the same sentences' "
                 f"files labelled alike, and `align`'s against the true sentences ({n} seed{'s' * (n > 1)})",
                 f"cuts between sentences {cut['cuts_in_pauses']} of {cut['cuts']}; WER greedy "
                 f"{_spread(wer['long-label'], '{:.1f}', ' %')} against {_spread(wer['lm'], '{:.1f}', ' %')}, and "
                 f"{_spread(wer['long-align'], '{:.1f}', ' %')} against {_spread(wer['sentences-true'], '{:.1f}', ' %')}",
                 "-", "measured", doc["provenance"], "bench-all/longform-demo.json")]


def _chunking(bench: Path) -> list[dict[str, Any]]:
    """benchmarks/chunking.py: long recordings transcribed whole, `transcribe`'s default cutting against the old 20 s
    chunks and each sentence alone."""
    from .tables import CHUNKING_GOAL_POINTS, pool_gap

    rows = []
    for name in ("chunking-demo", "chunking-demo-connected", "chunking-yesno"):
        doc = _load(bench / f"{name}.json")
        conds = (doc or {}).get("results", {}).get("conditions")
        if not conds:
            continue
        res = doc["results"]
        unit = "file" if "manifest" in res else "sentence"
        if "manifest" in res:
            source = f"files of `{Path(res['manifest']).parent.name}` joined as recorded"
        else:
            source = "the demo's unseen voice" + (", its sentences back to back" if pool_gap(res)[1] == 0 else "")
        gaps = [100 * (c["auto"]["wer"] - c["sentences"]["wer"]) for c in conds.values()]
        figure = "; ".join(f"{'clean' if k == 'clean' else f'SNR {k} dB'}: {_pct(c['auto']['wer'])} against "
                           f"{_pct(c['fixed-20']['wer'])} and {_pct(c['sentences']['wer'])}" for k, c in conds.items())
        rows.append(_row("accuracy", f"long recordings transcribed whole ({res['recordings']} of about "
                         f"{res['recording_minutes']:.1f} min, {source}): WER greedy of `transcribe`'s default (cut at "
                         f"pauses to the model's training length) against 20 s chunks and each {unit} alone", figure,
                         f"within {CHUNKING_GOAL_POINTS:g} points of each {unit} alone",
                         _status(max(gaps) <= CHUNKING_GOAL_POINTS, f"up to {max(gaps):+.1f} points"),
                         doc["provenance"], f"bench-all/{name}.json"))
    return rows


def _selftrain(bench: Path) -> list[dict[str, Any]]:
    """benchmarks/selftrain.py: the student fine-tuned on the LM's labels against the control, greedy WER (medians
    over seeds)."""
    doc = _load(bench / "selftrain-demo.json")
    runs = (doc or {}).get("results", {}).get("arms", [])
    wer = {a: [100 * r["greedy"]["wer"] for r in runs if r["arm"] == a] for a in ("lm", "control", "teacher")}
    if not all(wer.values()):
        return []
    n = len(wer["lm"])
    utts = next(r["utterances"] for r in runs if r["arm"] == "lm")
    return [_row("accuracy", "self-training on the demo's unseen voice: fine-tuned on its own LM-decoded labels of "
                 f"{utts} untranscribed sentences, against the same fine-tuning without them ({n} seed{'s' * (n > 1)})",
                 f"WER greedy {_spread(wer['lm'], '{:.1f}', ' %')} against {_spread(wer['control'], '{:.1f}', ' %')} "
                 f"(teacher {wer['teacher'][0]:.1f} %)", "-", "measured", doc["provenance"], "bench-all/selftrain-demo.json")]


def _rnn_bias(path: Path) -> list[dict[str, Any]]:
    """The FSDD recipe's unseen speaker with and without recurrent biases, the same seeds run side by side: the
    bias-free layers (the exact fused GPU scheme's condition) against the preset's."""
    if not path.is_file():
        return []
    runs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    by = {b: [100 * r["wer"] for r in runs if r["rnn_bias"] is b] for b in (False, True)}
    seeds = sorted({r["seed"] for r in runs})
    commits = list(dict.fromkeys(r["provenance"]["commit"] for r in runs))
    prov = {**runs[-1]["provenance"], "commit": ", ".join(commits)}
    command = re.sub(r"trainer\.seed=\d+", "trainer.seed=SEED",
                     re.sub(r"rnn_bias: (true|false)", "rnn_bias: true|false", runs[0]["provenance"]["command"]))
    ok = statistics.median(by[False]) <= statistics.median(by[True])
    return [_row("accuracy", f"recipe `fsdd` (unseen speaker), ds2-tiny without recurrent biases (`rnn_bias: false`), "
                 f"seeds {', '.join(map(str, seeds))}",
                 f"WER {_spread(by[False], '{:.1f}', ' %')} against {_spread(by[True], '{:.1f}', ' %')} with biases",
                 "no worse than with biases (median over seeds)", _status(ok), prov, "rnn-bias/fsdd.jsonl",
                 f"{command} ({len(runs)} runs, each seed's pair side by side)")]


def _seeds(figures: Path) -> list[dict[str, Any]]:
    """yesno from its manifest and from shards over seeds: WER per source against the recipe's goal on every
    seed, and the shards' steps against the manifest's."""
    doc = _load(figures / "bench-all" / "yesno-shards.json")
    if not doc or "rows" not in doc["results"]:
        return []
    res, rows = doc["results"], []
    src = "bench-all/yesno-shards.json"
    for source in ("manifest", "shards"):
        runs = [r for r in res["rows"] if r["source"] == source]
        ok = sum(r["wer"] <= 0 for r in runs)
        what = "recipe `yesno` from its manifest" if source == "manifest" else \
            f"recipe `yesno` from its shards ({res['shard_size']} files each)"
        rows.append(_row("accuracy", f"{what}, seeds {', '.join(str(r['seed']) for r in runs)}",
                         f"WER {_spread([100 * r['wer'] for r in runs], '{:.1f}', ' %')}", "WER 0 % on every seed",
                         _status(ok == len(runs), f"{ok} of {len(runs)} seeds did"), doc["provenance"], src))
    steps = {s: [r["steps"] for r in res["rows"] if r["source"] == s] for s in ("manifest", "shards")}
    ref, got = statistics.median(steps["manifest"]), statistics.median(steps["shards"])
    rows.append(_row("accuracy", "recipe `yesno`: optimizer steps from shards against its manifest (median over seeds)",
                     f"{got:.0f} against {ref:.0f} ({100 * (got / ref - 1):+.1f} %)",
                     f"within ±{100 * STEP_TOLERANCE:.0f} %",
                     _status(abs(got / ref - 1) <= STEP_TOLERANCE), doc["provenance"], src))
    return rows


def _loso(folder: Path) -> list[dict[str, Any]]:
    """The best leave-one-speaker-out recipe over three or more seeds (mean greedy WER of the four folds)."""
    from .loso_tables import loso_by_recipe

    docs = {f.stem: json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))}
    groups = [(k, v) for k, v in loso_by_recipe(docs).items() if len(v) >= 3]
    if not groups:
        return []
    (config, recipe), seeds = min(groups, key=lambda kv: statistics.median(m["greedy"] for m in kv[1].values()))
    v = [100 * m["greedy"] for m in seeds.values()]
    newest = max((docs[m["name"]] for m in seeds.values()), key=lambda d: d["provenance"]["date"])["provenance"]
    named = ", ".join(str(k) for k in sorted(seeds, key=str))
    return [_row("accuracy", f"FSDD leave-one-speaker-out, best recipe over {len(v)} seeds (`{config}`"
                 + (f" with `{recipe}`" if recipe else "") + ")", f"mean greedy WER {_spread(v, '{:.1f}', ' %')}, seeds {named}",
                 "mean ≤ 5 %", _status(max(v) <= 5, f"gap {min(v) - 5:.1f} points at best"), newest, "loso/*.json",
                 "speechscale bench fsdd-loso (each file's command in its provenance)")]  # the newest file's machine


def _cpu(figures: Path) -> list[dict[str, Any]]:
    rows = []
    train = _load(figures / "bench-all" / "train.json")
    for r in (train or {}).get("results", []):
        if r["precision"] == "fp32":
            rows.append(_row("cpu", f"CPU training, {r['model']} fp32, batch {r['batch_size']} x "
                             f"{r['utterance_seconds']:g} s", f"{r['audio_seconds_per_second']:,} audio-s/s", "-",
                             "measured", train["provenance"], "bench-all/train.json"))
    return rows


def _gpu(figures: Path) -> list[dict[str, Any]]:
    rows = []
    for name, batch, goal in (("gpu-train", 32, 3500), ("gpu-train-b128", 128, 6000)):
        doc = _load(figures / "gpu" / f"{name}.json")
        r = next((r for r in (doc or {}).get("results", []) if r["model"] == "ds2-large" and r["precision"] == "bf16"),
                 None)
        if r:
            rate = r["audio_seconds_per_second"]
            rows.append(_row("gpu", f"ds2-large bf16, batch {batch} x 10 s, eager", f"{rate:,.0f} audio-s/s",
                             f"≥ {goal:,} (issue #40)", _status(rate >= goal, f"gap {goal - rate:,.0f}"),
                             doc["provenance"], f"gpu/{name}.json"))
    for name, batch, goal in (("gpu-graphs", 32, 3500), ("gpu-graphs-b128", 128, 6000)):
        doc = _load(figures / "gpu" / f"{name}.json")
        modes = {r["precision"]: r for r in (doc or {}).get("results", []) if r["model"] == "ds2-large"}
        if "bf16+graphs" in modes:
            rate = modes["bf16+graphs"]["audio_seconds_per_second_compute"]
            rows.append(_row("gpu", f"ds2-large bf16, batch {batch} x 10 s, CUDA graphs (data overlapped)",
                             f"{rate:,.0f} audio-s/s", f"≥ {goal:,} (issue #40)",
                             _status(rate >= goal, f"gap {goal - rate:,.0f}"), doc["provenance"], f"gpu/{name}.json"))
        for ref, want in (("fp32+graphs", 3.0), ("tf32+graphs", 1.6)):
            if "bf16+graphs" in modes and ref in modes:
                ratio = (modes["bf16+graphs"]["audio_seconds_per_second_compute"]
                         / modes[ref]["audio_seconds_per_second_compute"])
                rows.append(_row("gpu", f"ds2-large graphed: bf16 against {ref.partition('+')[0]}", f"{ratio:.2f}x",
                                 f"≥ {want}x (issue #40)", _status(ratio >= want, f"gap {want - ratio:.2f}x"),
                                 doc["provenance"], f"gpu/{name}.json"))
    rows += _graphed_families(figures / "gpu")
    doc = _load(figures / "gpu" / "gpu-recipes.json")
    for r in (doc or {}).get("results", []):
        rows.append(_recipe(f"recipe `{r['recipe']}` on the GPU, `{' '.join(r['overrides'])}`", r, doc,
                            "gpu/gpu-recipes.json", section="gpu"))
    return rows + _gpu_adpsgd(figures / "gpu" / "adpsgd")


GRAPHED_GOALS = {"wav2letter+": ("eager", 1.3), "lstm-ctc": ("gpu-train", 2.0)}  # issue #40


def _graphed_families(gpu: Path) -> list[dict[str, Any]]:
    """The other families' graphed bf16 step against their eager step in the same run, and lstm-ctc's against
    the eager figure gpu-train.json shipped (issue #40's goals)."""
    doc, eager = _load(gpu / "gpu-graphs.json"), _load(gpu / "gpu-train.json")
    if not doc:
        return []
    rate = {(r["model"], r["precision"]): r["audio_seconds_per_second_compute"] for r in doc["results"]
            if r["batch_size"] == 32}
    shipped = {r["model"]: r["audio_seconds_per_second"] for r in (eager or {}).get("results", [])
               if r["precision"] == "bf16"}
    rows = []
    for model in ("wav2letter+", "lstm-ctc", "conformer"):
        graphed, base = rate.get((model, "bf16+graphs")), rate.get((model, "bf16"))
        if not graphed or not base:
            continue
        ref, want = GRAPHED_GOALS.get(model, ("eager", None))
        if ref == "gpu-train" and model in shipped:
            ratio, what = graphed / shipped[model], f"{model} bf16 graphed against its eager `gpu-train.json` figure"
        else:
            ratio, what = graphed / base, f"{model} bf16 graphed against eager, same run"
        rows.append(_row("gpu", what, f"{ratio:.2f}x ({graphed:,.0f} audio-s/s)",
                         f"≥ {want}x (issue #40)" if want else "-",
                         _status(ratio >= want, f"gap {want - ratio:.2f}x") if want else "measured",
                         doc["provenance"], "gpu/gpu-graphs.json"))
    return rows


def _gpu_adpsgd(folder: Path) -> list[dict[str, Any]]:
    """The ADPSGD recipe's ring runs on one GPU: how many of them reach the recipe's goal (WER 0 %)."""
    docs = [json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))]
    runs = [(d, r) for d in docs if "cuda" in " ".join(d["settings"]["overrides"]) for r in d["results"]
            if r["variant"].endswith("ring") and r["summary"]]
    if not runs:
        return []
    wers = [100 * r["summary"]["wer"] for _, r in runs]
    ok = sum(w <= 0 for w in wers)
    newest = max((d for d, _ in runs), key=lambda d: d["provenance"]["date"])
    return [_row("gpu", "recipe `yesno_adpsgd` (4 learners on one GPU), ring runs over seeds and precisions",
                 f"WER {_spread(wers, '{:.1f}', ' %')} over {len(wers)} runs", "WER 0 % on every run",
                 _status(ok == len(wers), f"{ok} of {len(wers)} runs did"), newest["provenance"], "gpu/adpsgd/*.json",
                 "bash docs/figures/gpu/adpsgd.sh (each file's overrides in its settings)")]


def _data(figures: Path) -> list[dict[str, Any]]:
    doc = _load(figures / "bench-all" / "loader.json")
    rows = []
    for r in (doc or {}).get("results", []):
        if not r["augment"] and r["workers"] >= 1:
            x = r["x_realtime_per_worker"]
            rows.append(_row("data", f"loader, {r['source']}, {r['workers']} worker{'s' if r['workers'] > 1 else ''}, "
                             f"{r['audio_seconds'] / r['utterances']:.1f} s utterances, no augmentation",
                             f"{x:,.0f}x real time per worker", f"≥ {LOADER_GOAL:,}x per worker (issue #12)",
                             _status(x >= LOADER_GOAL, f"gap {LOADER_GOAL - x:,.0f}x"), doc["provenance"],
                             "bench-all/loader.json"))
    return rows + _remote_shards(figures / "bench-all" / "loader-remote.json")


def _remote_shards(path: Path) -> list[dict[str, Any]]:
    """benchmarks/remote_shards.py: a training batch's bytes and wait over HTTP, exact ranged reads against a buffered
    fsspec file; the loader over HTTP against local disk. Goals as the run recorded them before it measured."""
    from .tables import remote_loader_share, remote_reads

    doc = _load(path)
    if not doc:
        return []
    res, goals = doc["results"], doc["settings"]["goals"]
    reads, at = remote_reads(res), goals["speedup_round_trip"]
    exact, buffered = reads[(at, "exact")], reads[(at, "buffered")]
    speedup = buffered["ms_per_batch"] / exact["ms_per_batch"]
    n = exact["utterances"] / exact["batches"]
    rows = [_row("data", f"shards over HTTP at a {1000 * at:g} ms round trip, a training batch ({n:.0f} utterances): "
                 "bytes sent per byte of its members and ms a batch, exact ranged reads (`ShardReader`) against a "
                 "buffered fsspec file per shard",
                 f"{exact['bytes_ratio']:.2f}x against {buffered['bytes_ratio']:.2f}x; {exact['ms_per_batch']:g} ms "
                 f"against {buffered['ms_per_batch']:g} ms ({speedup:.1f}x)",
                 f"{goals['exact_bytes_ratio']:.2f}x, and ≥ {goals['exact_speedup']:g}x faster",
                 _status(exact["bytes_ratio"] <= goals["exact_bytes_ratio"] and speedup >= goals["exact_speedup"],
                         f"{exact['bytes_ratio']:.2f}x, {speedup:.1f}x"), doc["provenance"], "bench-all/loader-remote.json")]
    for workers, share in remote_loader_share(res).items():
        if not workers:  # the goal is a worker's: the main process alone waits out every round trip
            continue
        rows.append(_row("data", f"loader over HTTP at a {1000 * res['loader_round_trip_s']:g} ms round trip, {workers} "
                         f"worker{'s' if workers != 1 else ''}: its rate as a share of the same shards on local disk",
                         _pct(share), f"≥ {100 * goals['loader_share']:.0f} %",
                         _status(share >= goals["loader_share"], f"gap {100 * (goals['loader_share'] - share):.0f} points"),
                         doc["provenance"], "bench-all/loader-remote.json"))
    return rows


def _distributed(figures: Path) -> list[dict[str, Any]]:
    rows = []
    scaling = _load(figures / "bench-all" / "scaling.json")
    for r in (scaling or {}).get("results", []):
        if r["processes"] > 1:
            rows.append(_row("distributed", f"data-parallel {r['model']}, {r['processes']} processes on "
                             f"{r['cpu_cores']} cores", f"{r['speedup']:.2f}x ({100 * r['efficiency']:.0f} % efficiency)",
                             "-", "measured", scaling["provenance"], "bench-all/scaling.json"))
    rows += _nodes(figures / "multinode" / "nodes.jsonl")
    from .summary_runs import convergence

    rows += convergence(figures / "convergence")
    doc = _load(figures / "bench-all" / "straggler.json")
    summary = (doc or {}).get("results", {}).get("summary", [])
    plain = {s["strategy"]: s for s in summary if s["straggler"] is None}
    for s in summary:
        if s["straggler"] is None:
            continue
        rows.append(_row("distributed", f"{s['strategy']}, one learner {s['straggler'].split()[-1]} slower: time to "
                         f"WER {_pct(s['target_wer'])} with it and without, and throughput against without",
                         _straggler_figure(s, plain.get(s["strategy"])), f"every seed reaches WER {_pct(s['target_wer'])}",
                         _status(s["reached"] == s["runs"], f"{s['reached']} of {s['runs']} seeds did"),
                         doc["provenance"], "bench-all/straggler.json"))
    return rows


def _straggler_figure(slow: dict[str, Any], plain: dict[str, Any] | None) -> str:
    """'W s (range) against N s (range) without (the ranges overlap); throughput R x (range)', medians over the
    seeds that reached the target."""
    def t(s: dict[str, Any] | None) -> str:
        x = (s or {}).get("seconds_to_target") or {}
        return f"{x['median']:.0f} s ({x['min']:.0f}-{x['max']:.0f})" if x.get("median") is not None else "never"
    a, b = (slow.get("seconds_to_target") or {}), ((plain or {}).get("seconds_to_target") or {})
    overlap = bool(a and b) and a["min"] <= b["max"] and b["min"] <= a["max"]
    r = slow["throughput_vs_no_straggler"]
    return (f"{t(slow)} against {t(plain)} without{' (the ranges overlap)' if overlap else ''}; throughput "
            f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})")


def _nodes(path: Path) -> list[dict[str, Any]]:
    """Many-node events (tests/distributed/test_nodes.py's figure lines, repeated by multinode/run.sh)."""
    if not path.is_file():
        return []
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = []
    for test, key, what in (("lost and joined node, fixed_ring", "seconds_to_train_again_on_2",
                             "a whole node SIGKILLed (fixed ring, 4 -> 2 ranks): training again after"),
                            ("lost and joined node, fixed_ring", "seconds_to_train_on_4_after_join",
                             "a node joins (fixed ring, 2 -> 4 ranks): training on 4 after"),
                            ("stuck node, allreduce", "seconds_to_train_again_on_2",
                             "a node SIGSTOPped (allreduce, 4 -> 2 ranks, 8 s timeout): training again after")):
        got = [x for x in lines if x["figures"].get("test") == test and key in x["figures"]]
        if got:
            rows.append(_row("distributed", what, f"{_spread([x['figures'][key] for x in got], '{:.1f}', ' s')} over "
                             f"{len(got)} repeats", "-", "measured", got[-1]["provenance"], "multinode/nodes.jsonl",
                             "docs/figures/multinode/run.sh 3"))
    return rows


def _planner(figures: Path) -> list[dict[str, Any]]:
    doc = _load(figures / "bench-all" / "planner.json")
    if not doc:
        return []
    res = doc["results"]
    goal = res.get("goal", 0.10)
    preds = [r for r in res["calibration"] if r["role"] == "prediction"]
    ok = [r for r in preds if r.get("ok")]
    worst = max(preds, key=lambda r: abs(r["error"]))
    return [_row("planner", "held-out predictions of published multi-GPU runs (`plan --calibrate`)",
                 f"{len(ok)} of {len(preds)} within; worst {100 * worst['error']:+.1f} % ({worst['case']})",
                 f"each within ±{100 * goal:.0f} %", _status(len(ok) == len(preds), f"{len(preds) - len(ok)} missed"),
                 doc["provenance"], "bench-all/planner.json")]


def _inference(figures: Path) -> list[dict[str, Any]]:
    bench, rows = figures / "bench-all", []
    export = _load(bench / "export.json")
    for r in (export or {}).get("results", []):
        rows.append(_row("inference", f"ONNX Runtime against PyTorch, {r['model']}, one {r['seconds']:g} s clip",
                         f"{r['onnx_vs_torch']}x ({r['onnx_ms']} against {r['torch_ms']} ms)", "-", "measured",
                         export["provenance"], "bench-all/export.json"))
    serve = _load(bench / "serve.json")
    for r in (serve or {}).get("results", []):
        if r["concurrency"] == 8:
            rows.append(_row("inference", f"HTTP service, {r['clip_seconds']:g} s clips, 8 clients",
                             f"{r['requests_per_s']} requests/s, p95 {r['p95_ms']:,.0f} ms", "-", "measured",
                             serve["provenance"], "bench-all/serve.json"))
    stream = _load(bench / "stream.json")
    if stream:
        res, p, src = stream["results"], stream["provenance"], "bench-all/stream.json"
        e = res.get("exactness")
        if e:
            rows.append(_row("inference", f"live streams, exactness over {e['files']} real files x "
                             f"{len(e['chunk_ms'])} chunk sizes", f"{e['equal']} of {e['pairs']} streamed texts = offline",
                             "all", _status(e["equal"] == e["pairs"]), p, src))
        if e and "onnx" in e:
            rows.append(_row("inference", "live streams through the exported ONNX step, the same pairs",
                             f"{e['onnx']['equal']} of {e['onnx']['pairs']} streamed texts = offline", "all",
                             _status(e["onnx"]["equal"] == e["onnx"]["pairs"]), p, src))
        for lv in res["levels"]:
            top = lv is res["levels"][-1]  # the goal: the most streams the server takes
            rows.append(_row("inference", f"live streams, {lv['streams']} in real time, chunk to answer",
                             f"p95 {lv['p95_ms']:,.0f} ms ({lv['rtf_cpu']} CPU s per audio s)",
                             "p95 ≤ 150 ms" if top else "-",
                             _status(lv["p95_ms"] <= 150, f"gap {lv['p95_ms'] - 150:,.0f} ms") if top else "measured",
                             p, src))
        m = res.get("memory")
        if m:
            rows.append(_row("inference", f"live streams, server memory over {m['streams']} ({m['abandoned']} abandoned)",
                             f"{m['growth_mb']:+.1f} MB", "< 50 MB", _status(m["growth_mb"] < 50), p, src))
    align = _load(bench / "align.json")
    for r in (align or {}).get("results", []):
        a, letters = r["align"], r.get("align_letters")
        model = r["model"] + (f" ({r['word_pieces']} word pieces)" if r.get("word_pieces") else "")
        rows.append(_row("inference", f"word starts by `align`, {model}, against espeak-ng's ({r['sentences']} "
                         "sentences, an unseen voice)", f"median abs. error {a['median_abs_ms']:g} ms (mean "
                         f"{a['mean_ms']:+g}), {100 * a['within_50_ms']:.0f} % within 50 ms"
                         + (f"; {letters['median_abs_ms']:g} ms from first letters" if letters else ""), "-", "measured",
                         align["provenance"], "bench-all/align.json"))
    int8 = _load(bench / "int8.json")
    for r, f in int8_pairs((int8 or {}).get("results", {}).get("speed", [])):
        rows.append(_row("inference", f"int8 weights (`export --int8`) against float ONNX, {r['model']}, batch "
                         f"{r['batch_size']} x {r['utterance_seconds']:g} s", f"{f['ms_per_batch'] / r['ms_per_batch']:.2f}x "
                         f"({r['ms_per_batch']:g} against {f['ms_per_batch']:g} ms)", "-", "measured",
                         int8["provenance"], "bench-all/int8.json"))
    for r in (int8 or {}).get("results", {}).get("accuracy", []):
        rows.append(_row("inference", f"int8 weights against float, trained {r['model']}, WER on the demo's test voice",
                         f"{100 * r['int8']['wer']:.2f} against {100 * r['float']['wer']:.2f} %", "-", "measured",
                         int8["provenance"], "bench-all/int8.json"))
    long = _load(bench / "align-long.json")
    for r in (long or {}).get("results", []):
        a, b = r["long"], r["align"]
        rows.append(_row("inference", f"word starts by `align` over one {a['minutes']:.0f}-minute recording, {r['model']} "
                         "(in segments)", f"median abs. error {a['median_abs_ms']:g} ms against {b['median_abs_ms']:g} "
                         f"ms sentence by sentence; {a['seconds']:g} s", "-", "measured", long["provenance"],
                         "bench-all/align-long.json"))
    return rows


def _tests(folder: Path) -> list[dict[str, Any]]:
    runs = [json.loads(x) for f in sorted(folder.glob("*.jsonl")) for x in f.read_text().splitlines() if x.strip()]
    runs = [r for r in runs if "fresh clone" in r["provenance"].get("where", "")]
    if not runs:
        return []
    r = max(runs, key=lambda r: r["provenance"]["date"])
    from .test_time import goal_seconds

    s, gflops = r["pytest_seconds"], r["provenance"].get("fp32_matmul_gflops")
    goal = goal_seconds(gflops or 250)  # the goal of an hour that fast (docs/development.md)
    return [_row("tests", "`make test` on a fresh clone (CI's command)",
                 f"{s / 60:.1f} min, {r['passed']} passed" + (f", {r['failed']} failed" if r.get("failed") else "")
                 + (f", {r['skipped']} skipped" if "skipped" in r else "")
                 + (f" ({gflops} GFLOP/s matmul)" if gflops else ""),
                 f"≤ {goal / 60:.1f} min at that rate", _status(s <= goal, f"gap {s - goal:.0f} s"),
                 r["provenance"], "test-time/*.jsonl (newest fresh clone)")]


def _startup(figures: Path) -> list[dict[str, Any]]:
    """What the optimizers beneath torch's compiler guards save a training process (benchmarks/optimizer_import.py):
    kept while it is over a second."""
    doc = _load(figures / "startup" / "optimizer-import.json")
    if doc is None:
        return []
    r = doc["results"]
    return [_row("tests", "training process start-up: speechscale's AdamW against torch's (no compiler import)",
                 f"{r['saved_s']:.2f} s saved ({r['median_s']['torch']:.2f} → {r['median_s']['speechscale']:.2f} s)",
                 "> 1 s to keep the workaround", _status(r["saved_s"] > 1.0), doc["provenance"],
                 "startup/optimizer-import.json")]

