"""The shared bench harness: interleaving in rotating order, medians and spread, provenance; and the
generated tables of BENCHMARKS.md, which must be what the committed bench-all JSON files render to."""
import json

import pytest

from speechscale.bench import tables
from speechscale.bench.harness import interleave, provenance, summarize, write_json
from speechscale.bench.suite import BENCHES, EXTERNAL_BENCHES, LONG_BENCHES, load_docs
from tests.conftest import ROOT


def test_interleave_rotates_the_order_and_times_each_variant(monkeypatch):
    """On a clock the variants advance themselves (a by 1, b by 3 units): each call's own time, exactly."""
    from speechscale.bench import harness

    now, calls, syncs = [0.0], [], []
    monkeypatch.setattr(harness, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])}))

    def variant(name, cost):
        def call():
            calls.append(name)
            now[0] += cost
            return cost
        return call

    stats = interleave({"a": variant("a", 1.0), "b": variant("b", 3.0)}, repeats=4, warmup=1,
                       sync=lambda: syncs.append(now[0]))
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]  # round r starts at variant r mod 2
    assert stats["a"].n == stats["b"].n == 4 and stats["a"].extra == [1.0] * 4
    assert stats["a"].median == 1.0 and stats["b"].median == 3.0 and stats["b"].p90 == 3.0
    assert len(syncs) == 2 * len(calls)  # before and after every call, warm-up included


def test_summary_statistics():
    st = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert st.median == 3.0 and st.p10 == pytest.approx(1.4) and st.p90 == pytest.approx(61.6)
    assert st.brief(1.0) == {"median": 3.0, "p10": 1.4, "p90": 61.6, "n": 5}
    assert summarize([3.0, 1.0, 2.0], ["c", "a", "b"]).at_median() == ["b"]
    assert summarize([4.0, 1.0, 3.0, 2.0], "dabc").at_median() == ["b", "c"]  # the two middle calls, in call order


def test_results_carry_machine_date_commit_and_command(tmp_path):
    doc = write_json(tmp_path / "x.json", [{"a": 1}], ["speechscale", "bench", "x"], 1.5, {"k": 2})
    p = doc["provenance"]
    assert p["command"] == "speechscale bench x" and "cores" in p["machine"] and p["commit"] != "unknown"
    assert json.loads((tmp_path / "x.json").read_text())["settings"] == {"k": 2}
    assert provenance()["date"].endswith("UTC")
    # the vector extension is named: runs on CPUs with other kernels (AVX2, AVX-512) do not reproduce bit for bit
    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    assert ("(AVX-512)" in p["machine"]) == ("avx512f" in flags)
    assert ("(AVX2)" in p["machine"]) == ("avx2" in flags and "avx512f" not in flags)


def test_benchmarks_md_tables_are_exactly_what_the_committed_json_renders():
    folder = ROOT / "docs" / "figures" / "bench-all"
    docs = load_docs(folder)
    assert set(docs) == set(BENCHES)
    generated = tables.blocks((ROOT / "BENCHMARKS.md").read_text())
    for name, doc in docs.items():
        assert generated[name] == tables.render(name, doc), f"BENCHMARKS.md's {name} table drifted from {name}.json"
        assert (folder / f"{name}.png").stat().st_size > 10_000
        assert not isinstance(doc["results"], dict) or "error" not in doc["results"]
    external = load_docs(folder, EXTERNAL_BENCHES)  # figures made by benchmarks/*.py, rendered here
    assert set(external) == set(EXTERNAL_BENCHES)
    for name, doc in {**load_docs(folder, LONG_BENCHES), **external}.items():  # the long benches run by name
        assert generated[name] == tables.render(name, doc), f"BENCHMARKS.md's {name} table drifted from {name}.json"


def test_benchmarks_md_gpu_tables_are_what_the_committed_gpu_json_renders():
    from speechscale.bench.suite import GPU_BENCHES

    folder = ROOT / "docs" / "figures" / "gpu"
    docs = load_docs(folder, GPU_BENCHES)
    assert set(docs) == set(GPU_BENCHES)
    generated = tables.blocks((ROOT / "BENCHMARKS.md").read_text())
    for name, doc in docs.items():
        assert any(card in doc["provenance"]["machine"] for card in ("H100", "H200"))  # a lent GPU measured it
        assert generated[name] == tables.render(name, doc), f"BENCHMARKS.md's {name} table drifted from {name}.json"
    rows = docs["gpu-train"]["results"]
    assert {r["precision"] for r in rows} == {"fp32", "bf16", "fp16"} and all("gpu_kernels_per_step" in r for r in rows)


def test_gpu_benches_say_they_need_a_gpu_before_running(cli, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the bench would run")
    proc = cli("bench", "all", "--gpu", "--out", str(tmp_path), check=False)
    assert proc.returncode != 0 and "need a CUDA GPU" in proc.stderr and not list(tmp_path.iterdir())


def test_gpu_tables_render_from_the_committed_json_without_a_gpu(cli, tmp_path):
    md = tmp_path / "B.md"
    md.write_text("# B\n")
    proc = cli("bench", "all", "--gpu", "--tables-only", "--out", str(ROOT / "docs/figures/gpu"), "--benchmarks", str(md))
    want = {"gpu-train", "gpu-train-b128", "gpu-graphs", "gpu-graphs-b128", "gpu-recipes", "gpu-step", "gpu-infer"}
    assert "updated" in proc.stdout and set(tables.blocks(md.read_text())) == want


def test_benchmarks_md_gpu_adpsgd_table_is_what_the_committed_runs_render(cli, tmp_path):
    docs = tables.gpu_adpsgd_docs(ROOT / "docs/figures/gpu/adpsgd")
    assert len(docs) >= 3 and all(r["summary"] for d in docs.values() for r in d["results"])
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert tables.gpu_adpsgd_block(text) == tables.render_gpu_adpsgd(docs), "the gpu-adpsgd table drifted from its JSON"
    md = tmp_path / "B.md"
    md.write_text("# B\n<!-- gpu-adpsgd -->\nold\n<!-- /gpu-adpsgd -->\n")
    proc = cli("bench", "all", "--gpu", "--tables-only", "--out", str(ROOT / "docs/figures/gpu"), "--benchmarks", str(md))
    assert "gpu-adpsgd" in proc.stdout and tables.gpu_adpsgd_block(md.read_text()) == tables.render_gpu_adpsgd(docs)


def test_update_replaces_only_the_generated_blocks(tmp_path):
    doc = json.loads((ROOT / "docs" / "figures" / "bench-all" / "scaling.json").read_text())
    md = tmp_path / "B.md"
    md.write_text("# B\n\nhand-written\n\n<!-- bench-all:scaling -->\nold\n<!-- /bench-all:scaling -->\n\nafter\n")
    tables.update(md, {"scaling": doc})
    text = md.read_text()
    assert "old" not in text and "hand-written" in text and text.rstrip().endswith("after")
    assert tables.blocks(text)["scaling"] == tables.render("scaling", doc)


def test_bench_all_tables_only_rerenders_without_running(tmp_path, cli):
    folder = ROOT / "docs" / "figures" / "bench-all"
    md = tmp_path / "B.md"
    proc = cli("bench", "all", "--out", str(folder), "--tables-only", "--benchmarks", str(md))
    long = {n for n in LONG_BENCHES + EXTERNAL_BENCHES if (folder / f"{n}.json").is_file()}  # when their data exists
    assert "demo-conformer-streaming" in long  # benchmarks/streaming_conformer.py's figure, made outside the package
    assert "updated" in proc.stdout and set(tables.blocks(md.read_text())) == set(BENCHES) | long
    bad = cli("bench", "all", "--out", str(tmp_path), "--only", "nope", check=False)
    assert bad.returncode != 0 and "unknown" in bad.stderr


# `bench all` end to end (a bench run, its JSON, plot and table): tests/bench/test_scaling.py, which runs the
# scaling bench through it.
