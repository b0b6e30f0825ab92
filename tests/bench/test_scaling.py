import json

import pytest

from tests.conftest import run_cli, shared

pytestmark = pytest.mark.slow  # real multi-process benchmark


def test_bench_scaling_runs_real_processes_and_counts_allreduce_bytes():
    m = str(shared("ldc93s1", "manifest.jsonl"))
    proc = run_cli("bench", "scaling", "--procs", "1,2", "--batch-size", "2", "--seconds", "1", "--steps", "2",
                   "--warmup", "1", "--manifest", m)
    one, two = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert one["comm_mb_per_step"] == 0 and one["speedup"] == 1.0
    # every gradient crosses the wire once a step: 4 bytes per fp32 parameter
    assert two["comm_mb_per_step"] == pytest.approx(two["params"] * 4 / 2 ** 20, rel=0.01)
    assert two["comm_ms_per_step"] > 0 and two["allreduce_calls_per_step"] >= 1
    assert two["audio_seconds_per_second"] > 0 and two["efficiency"] == pytest.approx(two["speedup"] / 2, abs=0.002)
