"""The generated tables of BENCHMARKS.md, which must be what the committed JSON files render to, and
`python -m benchmarks all` (the workshop's runner) refusing what it cannot do before any work."""
import json

import pytest

from benchmarks import tables
from benchmarks.suite import BENCHES, EXTERNAL_BENCHES, LONG_BENCHES, load_docs
from tests.conftest import ROOT


def test_benchmarks_md_tables_are_exactly_what_the_committed_json_renders():
    folder = ROOT / "docs" / "figures" / "bench-all"
    docs = load_docs(folder)
    assert set(docs) == set(BENCHES)
    generated = tables.blocks(tables.pages_text(ROOT / "BENCHMARKS.md"))
    for name, doc in docs.items():
        assert generated[name] == tables.render(name, doc), f"BENCHMARKS.md's {name} table drifted from {name}.json"
        assert (folder / f"{name}.png").stat().st_size > 10_000
        assert not isinstance(doc["results"], dict) or "error" not in doc["results"]
    external = load_docs(folder, EXTERNAL_BENCHES)  # figures made by benchmarks/*.py, rendered here
    assert set(external) == set(EXTERNAL_BENCHES)
    for name, doc in {**load_docs(folder, LONG_BENCHES), **external}.items():  # the long benches run by name
        assert generated[name] == tables.render(name, doc), f"BENCHMARKS.md's {name} table drifted from {name}.json"


def test_benchmarks_md_gpu_tables_are_what_the_committed_gpu_json_renders():
    from benchmarks.suite import GPU_BENCHES

    folder = ROOT / "docs" / "figures" / "gpu"
    docs = load_docs(folder, GPU_BENCHES)
    assert set(docs) == set(GPU_BENCHES)
    generated = tables.blocks(tables.pages_text(ROOT / "BENCHMARKS.md"))
    for name, doc in docs.items():
        assert any(card in doc["provenance"]["machine"] for card in ("H100", "H200"))  # a lent GPU measured it
        assert generated[name] == tables.render(name, doc), f"BENCHMARKS.md's {name} table drifted from {name}.json"
    rows = docs["gpu-train"]["results"]
    assert {r["precision"] for r in rows} == {"fp32", "bf16", "fp16"} and all("gpu_kernels_per_step" in r for r in rows)


def test_gpu_benches_say_they_need_a_gpu_before_running(workshop, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the bench would run")
    proc = workshop("all", "--gpu", "--out", str(tmp_path), check=False)
    assert proc.returncode != 0 and "need a CUDA GPU" in proc.stderr and not list(tmp_path.iterdir())


def test_gpu_tables_render_from_the_committed_json_without_a_gpu(workshop, tmp_path):
    md = tmp_path / "B.md"
    md.write_text("# B\n")
    proc = workshop("all", "--gpu", "--tables-only", "--out", str(ROOT / "docs/figures/gpu"), "--benchmarks", str(md))
    want = {"gpu-train", "gpu-train-b128", "gpu-graphs", "gpu-graphs-b128", "gpu-recipes", "gpu-step", "gpu-infer"}
    assert "updated" in proc.stdout and set(tables.blocks(md.read_text())) == want


def test_benchmarks_md_gpu_adpsgd_table_is_what_the_committed_runs_render(workshop, tmp_path):
    docs = tables.gpu_adpsgd_docs(ROOT / "docs/figures/gpu/adpsgd")
    assert len(docs) >= 3 and all(r["summary"] for d in docs.values() for r in d["results"])
    text = tables.pages_text(ROOT / "BENCHMARKS.md")
    assert tables.gpu_adpsgd_block(text) == tables.render_gpu_adpsgd(docs), "the gpu-adpsgd table drifted from its JSON"
    md = tmp_path / "B.md"
    md.write_text("# B\n<!-- gpu-adpsgd -->\nold\n<!-- /gpu-adpsgd -->\n")
    proc = workshop("all", "--gpu", "--tables-only", "--out", str(ROOT / "docs/figures/gpu"), "--benchmarks", str(md))
    assert "gpu-adpsgd" in proc.stdout and tables.gpu_adpsgd_block(md.read_text()) == tables.render_gpu_adpsgd(docs)


def test_update_replaces_only_the_generated_blocks(tmp_path):
    doc = json.loads((ROOT / "docs" / "figures" / "bench-all" / "scaling.json").read_text())
    md = tmp_path / "B.md"
    md.write_text("# B\n\nhand-written\n\n<!-- bench-all:scaling -->\nold\n<!-- /bench-all:scaling -->\n\nafter\n")
    tables.update(md, {"scaling": doc})
    text = md.read_text()
    assert "old" not in text and "hand-written" in text and text.rstrip().endswith("after")
    assert tables.blocks(text)["scaling"] == tables.render("scaling", doc)


def test_bench_all_tables_only_rerenders_without_running(tmp_path, workshop):
    folder = ROOT / "docs" / "figures" / "bench-all"
    md = tmp_path / "B.md"
    proc = workshop("all", "--out", str(folder), "--tables-only", "--benchmarks", str(md))
    long = {n for n in LONG_BENCHES + EXTERNAL_BENCHES if (folder / f"{n}.json").is_file()}  # when their data exists
    assert "demo-conformer-streaming" in long  # benchmarks/streaming_conformer.py's figure, made outside the package
    assert "updated" in proc.stdout and set(tables.blocks(md.read_text())) == set(BENCHES) | long
    bad = workshop("all", "--out", str(tmp_path), "--only", "nope", check=False)
    assert bad.returncode != 0 and "unknown" in bad.stderr


# `bench all` end to end (a bench run, its JSON, plot and table): tests/bench/test_scaling.py, which runs the
# scaling bench through it.


def test_make_figures_regenerates_benchmarks_md_byte_for_byte(tmp_path):
    """`make figures` (benchmarks/, from the committed JSON) on a copy of BENCHMARKS.md and its area pages leaves them as
    they are."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    md = tmp_path / "B.md"
    md.write_bytes((ROOT / "BENCHMARKS.md").read_bytes())
    (tmp_path / tables.DETAIL_PAGES).mkdir(parents=True)
    for page in tables.pages(ROOT / "BENCHMARKS.md")[1:]:  # the area pages beside it
        (tmp_path / tables.DETAIL_PAGES / page.name).write_bytes(page.read_bytes())
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    proc = subprocess.run(["make", "figures", f"VENV={venv}", "-o", f"{venv}/.installed", f"BENCHMARKS_MD={md}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("updated") >= 4
    assert md.read_bytes() == (ROOT / "BENCHMARKS.md").read_bytes(), "BENCHMARKS.md drifted from its JSON"
    for page in tables.pages(ROOT / "BENCHMARKS.md")[1:]:
        assert (tmp_path / tables.DETAIL_PAGES / page.name).read_bytes() == page.read_bytes(), f"{page} drifted"
