"""Calibration against published runs: the fitted constant is the one shipped, and every prediction
stays within the error it is held to (docs/planner.md)."""
import pytest

from speechscale.planning.calibration import JASPER_ROWS, cases, fit_jitter, jasper_speedup
from speechscale.planning.hardware import JITTER


def test_the_shipped_jitter_is_the_fit_on_the_rows_not_predicted():
    assert fit_jitter() == pytest.approx(JITTER, abs=0.0015)


def test_jasper_headline_speedups_are_predicted_within_8_percent():
    rows = {(r[0], r[1], r[2], r[3]): r for r in JASPER_ROWS}
    assert jasper_speedup(rows[("dgx1-32g", 8, 32, "amp")]) == pytest.approx(7.45, rel=0.08)
    assert jasper_speedup(rows[("dgx2", 16, 64, "amp")]) == pytest.approx(14.19, rel=0.08)


def test_every_case_is_within_its_stated_error():
    rows = cases()
    bad = [r for r in rows if r.get("ok") is False]
    assert not bad, bad
    predictions = [r for r in rows if r["role"] == "prediction"]
    assert len(predictions) >= 8
    ds2 = next(r for r in rows if r["case"].startswith("DeepSpeech2"))
    assert ds2["predicted"] >= 0.85
    preempt = next(r for r in rows if "preemptible" in r["case"])
    assert preempt["predicted"] == pytest.approx(153, rel=0.05)
