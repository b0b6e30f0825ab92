"""The service benchmark against a real server process."""
import pytest

from speechscale.bench.serve import bench_serve
from tests.conftest import shared


@pytest.mark.slow  # real processes end to end (make test runs it; make test-fast does not)
def test_bench_serve_reports_throughput_and_latency_by_concurrency(ldc_checkpoint):
    rows = bench_serve(str(ldc_checkpoint), seconds=2.0, levels=[1, 4], requests=8,
                       files=[shared("jfk", "jfk.flac")])
    assert [r["concurrency"] for r in rows] == [1, 4]
    for r in rows:
        assert r["requests"] == 8 and r["requests_per_s"] > 0 and 0 < r["p50_ms"] <= r["p95_ms"]
