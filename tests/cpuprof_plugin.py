"""A pytest plugin that writes each test's CPU time (its worker process and the children it reaped: the
training processes, torchrun agents, servers it started, those tests.prewarmed forked for it), wall time, start
time and xdist worker, one JSON line per test (a timeline of the workers: where one waits), to the file
named by SPEECHSCALE_CPU_PER_TEST. Where the suite's time goes, not a test (issue #20):

    SPEECHSCALE_CPU_PER_TEST=/tmp/cpu.jsonl OMP_NUM_THREADS=1 .venv/bin/python -m pytest -p tests.cpuprof_plugin \\
        -n 3 --dist loadfile --no-loadscope-reorder -q

Processes that the test did not reap itself (SLURM's daemons in deploy-check) are not counted."""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Callable

import pytest


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, those of the children it reaped and of those forked for it by
    tests.prewarmed's servers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = sys.modules.get("tests.prewarmed")
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime + (forked.reaped_cpu if forked else 0.0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = os.environ.get("SPEECHSCALE_CPU_PER_TEST")
    own, children, started = *_cpu(), time.time()
    yield
    if out:
        own2, children2 = _cpu()
        with open(out, "a") as f:
            f.write(json.dumps({"test": item.nodeid, "self": round(own2 - own, 2),
                                "children": round(children2 - children, 2),
                                "wall": round(time.time() - started, 2), "start": round(started, 2),
                                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}) + "\n")


def file_costs(rows: list[dict], value: Callable[[dict], float] = lambda row: row["wall"]) -> dict[str, float]:
    """Seconds each test file held its worker (the sum of its tests' wall times; or of `value`, e.g. their CPU
    seconds), costliest first."""
    cost: dict[str, float] = {}
    for row in rows:
        path = row["test"].split("::")[0]
        cost[path] = cost.get(path, 0.0) + value(row)
    return {p: round(c, 1) for p, c in sorted(cost.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":  # python -m tests.cpuprof_plugin PROFILE.jsonl COMMIT > docs/figures/test-time/file-order.json
    profile, commit = sys.argv[1:3]
    rows = [json.loads(x) for x in open(profile)]
    print(json.dumps({"provenance": {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                     "made_by": f"python -m tests.cpuprof_plugin PROFILE.jsonl {commit}",
                                     "profile": f"SPEECHSCALE_CPU_PER_TEST of make test's pytest "
                                                f"({len({row['worker'] for row in rows})} workers)"},
                      "seconds_per_file": file_costs(rows),
                      "cpu_seconds_per_file": file_costs(rows, lambda row: row["self"] + row["children"]),
                      "child_cpu_seconds_per_file": file_costs(rows, lambda row: row["children"])},
                     indent=1))
