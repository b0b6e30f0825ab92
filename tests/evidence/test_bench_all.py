import json

import pytest

from benchmarks import tables
from benchmarks.suite import SETTINGS
from tests.conftest import shared
from tests.evidence.conftest import run_benchmarks

pytestmark = [pytest.mark.slow, pytest.mark.protocol]  # `benchmarks all`, real multi-process benchmark


def test_bench_scaling_runs_real_processes_and_counts_allreduce_bytes(tmp_path):
    """The scaling bench as `bench all` runs it (its settings, LDC93S1 batches), which also proves the harness:
    JSON with provenance, a plot, the BENCHMARKS.md table. One run for both (issue #20 §4: they were two)."""
    shared("ldc93s1", "manifest.jsonl")
    md = tmp_path / "B.md"
    proc = run_benchmarks("all", "--out", str(tmp_path / "out"), "--only", "scaling", "--benchmarks", str(md))
    assert "bench scaling" in proc.stdout
    doc = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert doc["provenance"]["command"].startswith("python -m benchmarks all") and doc["seconds"] > 0
    assert (tmp_path / "out" / "scaling.png").stat().st_size > 10_000
    assert set(tables.blocks(md.read_text())) == {"scaling"}
    rows = doc["results"]
    assert [(r["model"], r["processes"]) for r in rows] == [
        (m, n) for m in SETTINGS["scaling"]["models"] for n in SETTINGS["scaling"]["procs"]]
    for one, two in zip(rows[::2], rows[1::2]):
        assert one["comm_mb_per_step"] == 0 and one["speedup"] == 1.0
        # every gradient crosses the wire once a step: 4 bytes per fp32 parameter
        assert two["comm_mb_per_step"] == pytest.approx(two["params"] * 4 / 2 ** 20, rel=0.01)
        assert two["comm_ms_per_step"] > 0 and two["allreduce_calls_per_step"] >= 1
        assert two["audio_seconds_per_second"] > 0
        assert two["efficiency"] == pytest.approx(two["speedup"] / 2, abs=0.002)
