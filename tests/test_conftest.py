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


def test_test_files_run_costliest_first_and_files_never_profiled_before_them(monkeypatch, tmp_path):
    """The order xdist hands files to its workers (make test: --no-loadscope-reorder): longest job first."""
    import json
    from types import SimpleNamespace

    from tests import conftest

    committed = json.loads(conftest.FILE_ORDER.read_text())["seconds_per_file"]
    order = tmp_path / "file-order.json"
    order.write_text(json.dumps({"seconds_per_file": {"tests/a.py": 1.0, "tests/b.py": 50.0, "tests/c.py": 9.0}}))
    monkeypatch.setattr(conftest, "FILE_ORDER", order)
    ids = ["tests/a.py::x", "tests/a.py::y", "tests/new.py::z", "tests/b.py::q[2]", "tests/b.py::q[1]", "tests/c.py::w"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["tests/new.py::z", "tests/b.py::q[2]", "tests/b.py::q[1]", "tests/c.py::w",
                                         "tests/a.py::x", "tests/a.py::y"]
    assert "tests/distributed/test_resume.py" in committed and all(v >= 0 for v in committed.values())
