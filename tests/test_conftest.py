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


def test_the_files_that_mostly_wait_are_those_whose_cpu_is_under_a_share_of_their_time():
    from tests.conftest import waiting_files

    wall = {"a.py": 40.0, "b.py": 10.0, "c.py": 2.0, "d.py": 30.0, "e.py": 8.0}
    cpu = {"a.py": 30.0, "b.py": 7.9, "c.py": 0.1, "d.py": 29.0}  # e.py never profiled for CPU
    assert waiting_files(wall, cpu, 0.8, least=3.0) == ["a.py", "b.py"]  # longest first; c.py too short
    assert waiting_files(wall, cpu, 0.5, least=3.0) == []


def test_the_worker_set_aside_takes_the_waiting_files_and_the_others_the_rest_until_a_kind_runs_out():
    from tests.conftest import next_file

    queue, waiting = ["c1.py", "w1.py", "c2.py", "w2.py"], {"w1.py", "w2.py"}
    assert next_file(queue, waiting, aside=True) == "w1.py"
    assert next_file(queue, waiting, aside=False) == "c1.py"
    assert next_file(["c2.py", "c3.py"], waiting, aside=True) == "c2.py"
    assert next_file(["w2.py"], waiting, aside=False) == "w2.py"


@pytest.mark.parametrize("workers", [3, 2])
def test_under_make_tests_options_the_last_of_three_workers_runs_the_waiting_files(tmp_path, workers):
    """A real pytest-xdist session over six files with this conftest's scheduler and a profile in which two of
    them wait: with three workers only the last runs those two, and it runs nothing else; with two, workers take
    the files in order whatever their kind."""
    import json
    import os
    import re
    import subprocess
    import sys

    from tests.conftest import ROOT

    names = ["test_c1.py", "test_w1.py", "test_c2.py", "test_w2.py", "test_c3.py", "test_c4.py"]
    for name in names:
        (tmp_path / name).write_text("def test_it():\n    pass\n")
    (tmp_path / "order.json").write_text(json.dumps({
        "seconds_per_file": {n: (20.0 if "_w" in n else 10.0) for n in names},
        "cpu_seconds_per_file": {n: (2.0 if "_w" in n else 10.0) for n in names}}))
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\nfrom tests import conftest as house\n"
        "house.FILE_ORDER = Path(__file__).with_name('order.json')\n"
        "pytest_xdist_make_scheduler = house.pytest_xdist_make_scheduler\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), "--dist", "loadfile",
                           "--no-loadscope-reorder", "-p", "no:cacheprovider", "-v", *names], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = {name: worker for worker, name in re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED (test_\w+\.py)", done.stdout)}
    assert sorted(ran) == sorted(names), done.stdout
    if workers == 3:
        assert {n for n, w in ran.items() if w == "gw2"} == {"test_w1.py", "test_w2.py"}, ran
    else:
        assert {ran["test_c1.py"], ran["test_w1.py"]} == {"gw0", "gw1"}, ran  # the first two files, one each
