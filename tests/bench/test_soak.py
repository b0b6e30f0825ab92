"""`speechscale bench soak` for 30 s against a real server process: HTTP, real-time streams and every hostile act at
once, each interval recorded (its BENCHMARKS.md blocks: tests/evidence/test_serving_tables.py)."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


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
