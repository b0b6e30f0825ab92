"""BENCHMARKS.md's summary is a rendering of the committed data (issue #43 §1): the block equals what
bench/summary.py renders from docs/figures, each row's figure and status recomputed here from its JSON, and a
changed figure in the data changes the block."""
import json
import shutil

from speechscale.bench import summary
from tests.conftest import ROOT

FIGURES = ROOT / "docs" / "figures"


def test_the_summary_in_benchmarks_md_is_what_the_committed_data_renders():
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert summary.block(text) == summary.render(FIGURES), "run: speechscale bench all --tables-only"
    assert text.index("<!-- summary -->") < text.index("## `make demo`")  # the first thing a reader reads


def test_each_row_is_recomputed_from_its_json():
    rows = {r["area"]: r for r in summary.summary_rows(FIGURES)}
    demo = json.loads((FIGURES / "bench-all" / "demo.json").read_text())["results"][0]
    row = rows["`make demo` (synth + 14 epochs, unseen voice)"]
    assert f"CER {100 * demo['cer']:.1f} %" in row["figure"] and f"WER {100 * demo['wer']:.1f} %" in row["figure"]
    assert (row["status"] == "reached") == (demo["cer"] <= 0.05 and demo["wall_seconds"] <= 900)
    fsdd = json.loads((FIGURES / "bench-all" / "fsdd.json").read_text())["results"]["recipe"]
    row = rows["recipe `fsdd` (unseen speaker)"]
    assert f"{100 * fsdd['wer']:.1f} %" in row["figure"]
    assert row["status"] == f"**not reached** (gap {100 * (fsdd['wer'] - 0.05):.1f} points)"
    for s in json.loads((FIGURES / "bench-all" / "straggler.json").read_text())["results"]["summary"]:
        if s["straggler"]:
            r = next(v for k, v in rows.items() if k.startswith(f"{s['strategy']}, one learner"))
            assert (r["status"] == "reached") == (s["reached"] == s["runs"])
    gpu = json.loads((FIGURES / "gpu" / "gpu-train.json").read_text())["results"]
    rate = next(r["audio_seconds_per_second"] for r in gpu if r["model"] == "ds2-large" and r["precision"] == "bf16")
    row = next(v for k, v in rows.items() if k.startswith("GPU training, ds2-large bf16, batch 32"))
    assert row["figure"] == f"{rate:,.0f} audio-s/s" and (row["status"] == "reached") == (rate >= 3500)


def test_a_changed_figure_in_the_data_changes_the_summary(tmp_path):
    figures = tmp_path / "figures"
    shutil.copytree(FIGURES, figures, ignore=shutil.ignore_patterns("*.png"))
    before = summary.render(figures)
    path = figures / "bench-all" / "demo.json"
    doc = json.loads(path.read_text())
    doc["results"][0]["cer"] = 0.071
    path.write_text(json.dumps(doc))
    after = summary.render(figures)
    assert after != before and "CER 7.1 %" in after
    assert "| `make demo` (synth + 14 epochs, unseen voice) | " in after
    line = next(x for x in after.splitlines() if x.startswith("| `make demo`"))
    assert "**not reached**" in line
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# x\n\n<!-- summary -->\nold\n<!-- /summary -->\n")
    assert summary.update(md, figures) and summary.block(md.read_text()) == after
