"""`speechscale bench soak` for 30 s against a real server process: HTTP, real-time streams and every hostile act at
once, each interval recorded; the stack comparison's and the soak's BENCHMARKS.md blocks and summary rows."""
import json
import subprocess
import sys

import pytest

from benchmarks import tables
from benchmarks.serving_tables import serving_rows
from tests.conftest import ROOT

PROV = {"machine": "m", "date": "2026-11-27 18:00 UTC", "commit": "c", "torch": "t", "command": "x"}


@pytest.mark.slow  # a real server for 30 s with clients of every kind
def test_a_30_second_soak_answers_every_well_formed_request_and_refuses_every_hostile_act(tmp_path):
    out = tmp_path / "soak"
    done = subprocess.run([sys.executable, "-m", "speechscale.cli", "bench", "soak", "--minutes", "0.5", "--interval",
                           "5", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads((out / "soak.json").read_text())
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows, s = res["intervals"], res["summary"]
    assert [r["minute"] for r in rows] == [0.08, 0.17, 0.25, 0.33, 0.42, 0.5]
    assert all(r["rss_mb"] > 50 and r["stream_p95_ms"] is not None and r["http_p95_ms"] is not None for r in rows)
    assert s["http_ok"] == sum(r["http_ok"] for r in rows) >= 30  # one every 0.5 s, each under a second
    assert s["stream_ok"] >= 4 * 3  # 4 clients, 8 s streams
    assert s["http_failed"] == s["stream_failed"] == 0
    assert s["hostile"] >= 12 and s["unexpected_n"] == 0, [r["unexpected"] for r in rows]  # each act at least once
    assert s["goals"]["every_well_formed_request_answered"] and s["goals"]["no_slot_held_past_idle"]
    assert s["goals"]["every_hostile_act_refused_as_documented"]
    assert s["rss_drift_mb"] == round(rows[-1]["rss_mb"] - [r for r in rows if r["minute"] >= 0.5 / 6][0]["rss_mb"], 1)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == s
    block = tables.render("soak", {"results": res, "provenance": PROV, "seconds": 30})
    assert "| every hostile act answered as docs/usage.md's limits table says | reached |" in block
    assert f"| 0.08 | {rows[0]['rss_mb']} |" in block


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
