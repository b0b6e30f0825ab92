"""The shared test helpers: a missing browser fails the browser tests in CI and skips them elsewhere."""
import shutil

import pytest

from tests.conftest import headless_chromium


@pytest.mark.parametrize("ci,outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_browser_fails_in_ci_and_skips_elsewhere(monkeypatch, ci, outcome):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="make browser"):
        headless_chromium()
