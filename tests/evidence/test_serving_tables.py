"""The serving benches' BENCHMARKS.md blocks and summary rows, rendered from results."""
import json

from benchmarks import tables
from benchmarks.serving_tables import serving_rows

PROV = {"machine": "m", "date": "2026-11-27 18:00 UTC", "commit": "c", "torch": "t", "command": "x"}


def _level(streams, p95, rtf):
    return {"streams": streams, "p50_ms": p95 / 2, "p95_ms": p95, "max_ms": 2 * p95, "rtf_cpu": rtf,
            "failed_streams": 0, "refused": None}


def test_the_stack_comparison_renders_ratios_of_the_same_run_and_judges_the_goal(tmp_path):
    res = [{"ws": "guarded", "levels": [_level(8, 40.0, 0.02), _level(32, 130.0, 0.021)],
            "memory": {"streams": 200, "growth_mb": 3.0}},
           {"ws": "wsproto", "levels": [_level(8, 50.0, 0.02), _level(32, 100.0, 0.02)],
            "memory": {"streams": 200, "growth_mb": 4.5}}]
    block = tables.render("stream-stacks", {"results": res, "provenance": PROV, "seconds": 1})
    assert "32 streams: p95 130 against 100 ms (1.30x)" in block and "+3.0 against +4.5 MB" in block
    (tmp_path / "bench-all").mkdir()
    (tmp_path / "bench-all" / "stream-stacks.json").write_text(json.dumps({"results": res, "provenance": PROV}))
    (row,) = serving_rows(tmp_path)
    assert row["status"] == "**not reached** (1.30x)" and row["figure"].startswith("p95 130 against 100 ms")
