"""BENCHMARKS.md is the current state, generated from the committed data (issue #43 §1): each area's table equals
what bench/summary.py renders from docs/figures, each row's figure and status is recomputed here from its JSON,
a changed figure in the data changes the table, and the prose outside the generated blocks quotes no figure."""
import json
import re
import shutil
import statistics

from benchmarks import summary
from benchmarks.summary_rows import SEED_RECIPES
from benchmarks.tables import pages
from tests.conftest import ROOT

FIGURES = ROOT / "docs" / "figures"
BENCH = (ROOT / "BENCHMARKS.md").read_text()  # the page for users: each area's table, a link to its details
PAGES = {p: p.read_text() for p in pages(ROOT / "BENCHMARKS.md")}  # it and the area pages (docs/benchmarks/)


def test_every_area_table_in_benchmarks_md_is_what_the_committed_data_renders():
    for section in summary.SECTIONS:
        assert summary.block(BENCH, section) == summary.render(FIGURES, section), \
            f"{section}: run speechscale bench all --tables-only --out docs/figures/bench-all"
    # each area's table comes first in its area, before its detail blocks
    heads = [m.start() for m in re.finditer(r"^## ", BENCH, re.M)]
    for section in summary.SECTIONS:
        at = BENCH.index(f"<!-- summary:{section} -->")
        start = max(h for h in heads if h < at)
        assert "<!-- bench-all:" not in BENCH[start:at] and "<!-- loso -->" not in BENCH[start:at], section


def _prose(text: str) -> str:
    """BENCHMARKS.md without its generated blocks, code, links' targets, issue numbers and dates."""
    text = re.sub(r"<!-- ([\w:-]+) -->\n.*?<!-- /\1 -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"[#§]\d+", "", text)
    return re.sub(r"\d{4}-\d\d-\d\d", "", text)


def test_the_prose_outside_the_generated_blocks_quotes_no_figure():
    """A number a reader could take for a result lives only in a block rendered from committed data; the prose
    explains. Digits inside a name (ds2, bf16, H100) are names."""
    for page, text in PAGES.items():
        numbers = re.findall(r"(?<![\w.])\d[\d,.]*(?:\s*(?:%|x\b|s\b|ms\b|min\b|MB\b|GB\b))?", _prose(text))
        assert not numbers, f"figures outside the generated blocks of {page.name}: {numbers[:10]}"
    kept = _prose("a 2.5 % gain <!-- x:y -->\n7 %\n<!-- /x:y --> in `8 s`, issue #43 (2026-11-27, [a](b/9.md))")
    assert "2.5 %" in kept and not re.search(r"[7-9]|43|2026", kept)


def test_each_row_is_recomputed_from_its_json():
    rows = {r["what"]: r for r in summary.summary_rows(FIGURES)}
    demo = json.loads((FIGURES / "bench-all" / "demo.json").read_text())
    row = rows["`make demo` (synth + 14 epochs, unseen voice)"]
    r = demo["results"][0]
    assert f"CER {100 * r['cer']:.1f} %" in row["figure"] and f"WER {100 * r['wer']:.1f} %" in row["figure"]
    assert (row["status"] == "reached") == (r["cer"] <= 0.05 and r["wall_seconds"] <= 900)
    assert row["machine"] == demo["provenance"]["machine"] and row["command"] == demo["provenance"]["command"]
    fsdd = json.loads((FIGURES / "bench-all" / "fsdd.json").read_text())["results"]["recipe"]
    row = rows["recipe `fsdd` (unseen speaker)"]
    assert f"{100 * fsdd['wer']:.1f} %" in row["figure"]
    assert row["status"] == f"**not reached** (gap {100 * (fsdd['wer'] - 0.05):.1f} points)"
    straggler = json.loads((FIGURES / "bench-all" / "straggler.json").read_text())["results"]["summary"]
    for s in straggler:
        if s["straggler"]:
            r = next(v for k, v in rows.items() if k.startswith(f"{s['strategy']}, one learner"))
            assert (r["status"] == "reached") == (s["reached"] == s["runs"])
            base = next(p for p in straggler if p["strategy"] == s["strategy"] and not p["straggler"])
            a, b = s["seconds_to_target"], base["seconds_to_target"]
            assert r["figure"].startswith(f"{a['median']:.0f} s ({a['min']:.0f}-{a['max']:.0f}) against "
                                          f"{b['median']:.0f} s ({b['min']:.0f}-{b['max']:.0f}) without")
            assert ("overlap" in r["figure"]) == (a["min"] <= b["max"] and b["min"] <= a["max"])
            assert r["figure"].endswith(f"throughput {s['throughput_vs_no_straggler']['median']:.2f}x "
                                        f"({s['throughput_vs_no_straggler']['min']:.2f}-"
                                        f"{s['throughput_vs_no_straggler']['max']:.2f})")
    gpu = json.loads((FIGURES / "gpu" / "gpu-train.json").read_text())["results"]
    rate = next(r["audio_seconds_per_second"] for r in gpu if r["model"] == "ds2-large" and r["precision"] == "bf16")
    row = next(v for k, v in rows.items() if k.startswith("ds2-large bf16, batch 32 x 10 s, eager"))
    assert row["figure"] == f"{rate:,.0f} audio-s/s" and (row["status"] == "reached") == (rate >= 3500)
    planner = json.loads((FIGURES / "bench-all" / "planner.json").read_text())["results"]["calibration"]
    preds = [r for r in planner if r["role"] == "prediction"]
    within = sum(abs(r["published"] - r["predicted"]) / r["published"] <= 0.10 for r in preds)
    row = next(v for v in rows.values() if v["section"] == "planner")
    assert row["figure"].startswith(f"{within} of {len(preds)} within") and (row["status"] == "reached") == (within == len(preds))
    loader = json.loads((FIGURES / "bench-all" / "loader.json").read_text())["results"]
    for r in loader:
        if not r["augment"] and r["workers"]:
            row = next(v for k, v in rows.items() if k.startswith(f"loader, {r['source']}, {r['workers']} worker"))
            assert (row["status"] == "reached") == (r["x_realtime"] / r["workers"] >= 1500)


def test_the_seed_rows_are_recomputed_from_their_runs():
    path = FIGURES / "bench-all" / "yesno-shards.json"
    rows = [r for r in summary.summary_rows(FIGURES) if r["source"] == "bench-all/yesno-shards.json"]
    if not path.is_file():
        assert not rows
        return
    runs = json.loads(path.read_text())["results"]["rows"]
    for source in ("manifest", "shards"):
        wer = [100 * r["wer"] for r in runs if r["source"] == source]
        row = next(r for r in rows if f"from its {source}" in r["what"])
        assert row["figure"].startswith(f"WER {statistics.median(wer):.1f} %")
        assert (row["status"] == "reached") == all(w == 0 for w in wer)
    steps = {s: statistics.median(r["steps"] for r in runs if r["source"] == s) for s in ("manifest", "shards")}
    row = next(r for r in rows if "optimizer steps" in r["what"])
    assert (row["status"] == "reached") == (abs(steps["shards"] / steps["manifest"] - 1) <= 0.05)


def test_a_changed_figure_in_the_data_changes_the_summary(tmp_path):
    figures = tmp_path / "figures"
    shutil.copytree(FIGURES, figures, ignore=shutil.ignore_patterns("*.png"))
    before = summary.render(figures, "accuracy")
    path = figures / "bench-all" / "demo.json"
    doc = json.loads(path.read_text())
    doc["results"][0]["cer"] = 0.071
    path.write_text(json.dumps(doc))
    after = summary.render(figures, "accuracy")
    assert after != before and "CER 7.1 %" in after
    line = next(x for x in after.splitlines() if x.startswith("| `make demo`"))
    assert "**not reached**" in line
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# x\n\n<!-- summary:accuracy -->\nold\n<!-- /summary:accuracy -->\n\n<!-- summary:gpu -->\nold\n"
                  "<!-- /summary:gpu -->\n")
    assert summary.update(md, figures) == ["accuracy", "gpu"]
    assert summary.block(md.read_text(), "accuracy") == after
    assert summary.block(md.read_text(), "gpu") == summary.render(figures, "gpu")


def _slugs(text: str) -> set[str]:
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_link_of_benchmarks_md_resolves():
    """Its index links to its areas by GitHub's heading anchors, every file it and its area pages link exists, and
    every anchor they name is a heading of the page it names; BENCHMARKS.md stays a page for users."""
    for page, text in PAGES.items():
        for target in re.findall(r"\]\(([^)]+)\)", text):
            if target.startswith("http"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), (page.name, target)
            if anchor:
                assert anchor in _slugs(linked.read_text()), (page.name, target)
    assert BENCH.count("\n") < 400  # each area's table and a link to its details, not a ledger


def test_the_convergence_rows_are_recomputed_from_their_runs():
    """Each strategy's row of a `bench convergence` file: its final WER's median against one process's, and
    reached only where no seed ends above one process of the same seed."""
    rows = [r for r in summary.summary_rows(FIGURES) if r["source"].startswith("convergence/")]
    files = sorted((FIGURES / "convergence").glob("*.jsonl"))
    assert files and {r["source"] for r in rows} == {f"convergence/{f.name}" for f in files}
    for path in files:
        runs = [json.loads(x) for x in path.read_text().splitlines()]
        # a file of another schedule (fsdd-48ep.jsonl) has no one-process runs: its recipe's file (fsdd.jsonl) has
        base = runs if any(r["strategy"] == "single" for r in runs) else \
            [json.loads(x) for x in (path.parent / f"{path.stem.split('-')[0]}.jsonl").read_text().splitlines()]
        one = {r["seed"]: r["final_wer"] for r in base if r["strategy"] == "single"}
        for strategy in {r["strategy"] for r in runs} - {"single"}:
            mine = [r for r in runs if r["strategy"] == strategy]
            row = next(r for r in rows if r["source"] == f"convergence/{path.name}" and r["what"].startswith(strategy))
            assert row["figure"].startswith(f"{100 * statistics.median(r['final_wer'] for r in mine):.1f} % ")
            assert f"against {100 * statistics.median(one[r['seed']] for r in mine):.1f} %" in row["figure"]
            seeds = ", ".join(str(x) for x in sorted(r["seed"] for r in mine))
            assert f" on seed{'s' if len(mine) > 1 else ''} {seeds};" in row["figure"]
            assert (row["status"] == "reached") == all(r["final_wer"] <= one[r["seed"]] for r in mine)
    for name, recipe, goal in SEED_RECIPES:  # recipes over seeds, one process
        one = [r for r in (json.loads(x) for x in (FIGURES / "convergence" / f"{name}.jsonl").read_text().splitlines())
               if r["strategy"] == "single"]
        row = next(r for r in rows if r["what"].startswith(f"recipe `{recipe}`, one process, seeds"))
        assert row["figure"].startswith(f"WER {100 * statistics.median(r['final_wer'] for r in one):.1f} % ")
        assert (row["status"] == "reached") == all(r["final_wer"] <= goal for r in one)
