"""The workshop's own lines in the docs: `python -m benchmarks ...` commands parse, and every quoted test-suite time
is a committed run."""
import json
import shlex

from benchmarks.test_time import _min_s
from tests.conftest import ROOT
from tests.e2e.test_readme import _commands


def test_every_workshop_command_in_the_docs_parses():
    """docs/evidence.md's `python -m benchmarks ...` lines (run from a checkout) parse as the workshop reads them."""
    from benchmarks.__main__ import build_parser as workshop

    cmds = _commands("python -m benchmarks ")
    assert {shlex.split(c)[3] for c in cmds} == {"all", "fsdd-loso", "convergence"}
    for c in cmds:
        try:
            workshop().parse_args(shlex.split(c)[3:])
        except SystemExit as e:
            assert e.code == 0, c


def test_the_quoted_test_suite_times_are_the_committed_runs():
    """BENCHMARKS.md and docs/history/test-time.md quote `make test` / `make test-fast` times: each is a run recorded,
    with its commit and command, in docs/figures/test-time (no figure without its data). docs/development.md states
    the newest fresh-clone run as it renders (tests/evidence/test_test_time.py)."""
    rows = [json.loads(x) for f in sorted((ROOT / "docs/figures/test-time").glob("*.jsonl"))
            for x in f.read_text().splitlines()]
    bench = (ROOT / "BENCHMARKS.md").read_text() + (ROOT / "docs" / "history" / "test-time.md").read_text()
    for r in rows:
        assert _min_s(r["pytest_seconds"]) in bench, (_min_s(r["pytest_seconds"]), r["provenance"])
    fast = [r for r in rows if r["provenance"]["command"].startswith("make test-fast")]
    assert fast and all(r["pytest_seconds"] <= 120 for r in fast)
