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


def test_waiting_test_files_alternate_with_multi_process_ones_and_files_never_profiled_go_first(
        monkeypatch, tmp_path):
    """The order xdist hands files to its workers (make test: --no-loadscope-reorder): files that mostly wait
    (under half their wall time on the CPU, 5 s or more; longest first) alternate with multi-process files (most
    of their CPU in children; costliest first), then the rest costliest first."""
    import json
    from types import SimpleNamespace

    from tests import conftest

    committed = json.loads(conftest.FILE_ORDER.read_text())
    wall = {"tests/a.py": 1.0, "tests/b.py": 50.0, "tests/c.py": 9.0, "tests/d.py": 20.0, "tests/e.py": 30.0,
            "tests/f.py": 4.0, "tests/g.py": 40.0, "tests/h.py": 12.0}
    cpu = {"tests/a.py": 0.1, "tests/b.py": 60.0, "tests/c.py": 4.0, "tests/d.py": 19.0, "tests/e.py": 3.0,
           "tests/f.py": 0.5, "tests/g.py": 39.0, "tests/h.py": 2.0}  # a, f wait but are short; c, e, h wait
    children = {"tests/b.py": 59.0, "tests/d.py": 15.0, "tests/g.py": 1.0}  # b and d start processes, g does not
    order = tmp_path / "file-order.json"
    order.write_text(json.dumps({"seconds_per_file": wall, "cpu_seconds_per_file": cpu,
                                 "child_cpu_seconds_per_file": children}))
    monkeypatch.setattr(conftest, "FILE_ORDER", order)
    ids = ["tests/a.py::x", "tests/a.py::y", "tests/new.py::z", "tests/b.py::q[2]", "tests/b.py::q[1]", "tests/c.py::w",
           "tests/d.py::v", "tests/e.py::u", "tests/f.py::t", "tests/g.py::s", "tests/h.py::r"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["tests/new.py::z", "tests/b.py::q[2]", "tests/b.py::q[1]", "tests/e.py::u",
                                         "tests/d.py::v", "tests/h.py::r", "tests/c.py::w", "tests/g.py::s",
                                         "tests/f.py::t", "tests/a.py::x", "tests/a.py::y"]
    assert "tests/distributed/test_resume.py" in committed["seconds_per_file"]
    for field in ("cpu_seconds_per_file", "child_cpu_seconds_per_file"):
        assert committed[field].keys() == committed["seconds_per_file"].keys()
