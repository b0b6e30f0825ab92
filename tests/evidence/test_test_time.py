"""`python -m benchmarks test-time`: the suite's time read from pytest's own output, judged against the goal of the
hour it ran in, and docs/development.md's paragraph equal to what the newest record renders."""
import pytest

from benchmarks import test_time as tt
from tests.conftest import ROOT

OUTPUT = """
============================= slowest 15 durations =============================
102.68s call     tests/e2e/test_wheel.py::test_the_wheel_alone
61.02s setup    tests/training/test_x.py::test_y
0.50s teardown tests/a.py::test_b
= 719 passed, 30 skipped, 2 warnings in 781.23s (0:13:01) =
"""


def test_pytest_output_gives_counts_seconds_and_the_slowest_tests():
    got = tt.parse_pytest(OUTPUT)
    assert (got["passed"], got["skipped"], got["failed"], got["pytest_seconds"]) == (719, 30, 0, 781.23)
    assert got["slowest"][:2] == [{"seconds": 102.68, "phase": "call", "test": "tests/e2e/test_wheel.py::test_the_wheel_alone"},
                                  {"seconds": 61.02, "phase": "setup", "test": "tests/training/test_x.py::test_y"}]
    assert got["failures"] == []
    failed = tt.parse_pytest("FAILED tests/a.py::test_b[1] - AssertionError: x\nERROR tests/c.py::test_d\n"
                             "= 1 failed, 7 passed, 1 error in 3.50s =")
    assert failed["failures"] == ["tests/a.py::test_b[1]", "tests/c.py::test_d"] and failed["failed"] == 1
    with pytest.raises(ValueError, match="no pytest summary"):
        tt.parse_pytest("make: *** [test] Error 2")


def test_the_goal_is_8_minutes_on_a_normal_hour_12_on_a_slow_one_and_the_line_between():
    assert tt.goal_seconds(300) == 480 and tt.goal_seconds(250) == 480
    assert tt.goal_seconds(70) == 720 and tt.goal_seconds(40) == 720
    assert tt.goal_seconds(160) == pytest.approx(720 - 90 / 180 * 240)


def test_development_md_states_the_newest_fresh_clone_run():
    text = (ROOT / "docs" / "development.md").read_text()
    start, end = text.index(tt.BLOCK[0]) + len(tt.BLOCK[0]), text.index(tt.BLOCK[1])
    record = tt.newest()
    assert text[start:end].strip() == tt.render(record), "run python -m benchmarks test-time --render-only"
    verdict = "reached" if record["pytest_seconds"] <= tt.goal_seconds(record["provenance"]["fp32_matmul_gflops"]) \
        else "not reached"
    assert f": **{verdict}" in text[start:end] or f": {verdict}." in text[start:end]


def test_development_md_quotes_the_optimizer_start_up_figure_from_its_json():
    import json

    doc = json.loads((ROOT / "docs/figures/startup/optimizer-import.json").read_text())
    r, text = doc["results"], " ".join((ROOT / "docs" / "development.md").read_text().split())
    assert r["imports_compiler"] == {"torch": True, "speechscale": False}
    assert r["saved_s"] == round(r["median_s"]["torch"] - r["median_s"]["speechscale"], 3) > 1.0
    for figure in (r["median_s"]["torch"], r["median_s"]["speechscale"], r["saved_s"]):
        assert f"{figure} s" in text, figure
    assert doc["provenance"]["command"] in text.replace("`", "") or "benchmarks.optimizer_import" in text
    assert f"`{doc['provenance']['commit']}`" in text
