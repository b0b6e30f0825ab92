"""The rules of docs/architecture.md hold: lint and layer contracts pass, the trace is real, docs/layout.md names every
module, the docstring examples run."""
import importlib
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import shared

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "speechscale"
BIN = Path(sys.executable).parent
# Imported by the loader's forkserver to set its signal state (blocked, ignored SIGTERM); imported here it would
# leave the test worker so, and every process it starts after would ignore SIGTERM.
FORKSERVER_ONLY = {"speechscale.data.worker_server"}


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    exe = BIN / tool
    assert exe.exists(), f"{tool} is not installed beside {sys.executable}: pip install -e '.[dev]'"
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_passes():
    res = _run("ruff", "check", "src", "tests", "benchmarks")
    assert res.returncode == 0, res.stdout[-3000:]


def test_the_layer_contracts_are_kept():
    res = _run("lint-imports", "--no-cache")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "2 kept, 0 broken" in res.stdout


def _one_batch(tmp_path):
    """One batch of a real run, traced with a profiler hook from the end of its first step to the end of its second
    (of three):
    the loader reading and augmenting the batch, collating it, the step. Returns ({file: functions called with the
    batch's data or returning it}, every package file that ran code). The batch's data: its utterances, their
    transcripts, samples, features and labels, the Batch, the model's outputs. A model's own layers count as its
    file (models/layers.py, rnn.py ... are what the model is built from)."""
    import collections

    import numpy as np
    import torch

    from speechscale.data.dataset import Batch
    from speechscale.data.manifest import Utterance
    from speechscale.recipe import load_recipe
    from speechscale.training.trainer import Trainer
    from tests.training.tiny import NARROW

    cfg = load_recipe(None, [f"data.train_manifest={shared('fsdd', 'manifest.jsonl')}",
                             f"data.val_manifest={shared('ldc93s1', 'manifest.jsonl')}", f"trainer.out_dir={tmp_path}",
                             "data.filter={speaker: george, split: test}", "data.batch_seconds=4",
                             "features.sample_rate=8000", "augment.speed=[0.9, 1.1]", "trainer.max_steps=3",
                             "trainer.progress=false", "data.num_workers=0", f"model.overrides={NARROW}"])
    trainer = Trainer(cfg)
    model_file = Path(sys.modules[type(trainer.model).__module__].__file__).relative_to(SRC).as_posix()
    texts = {u.text for u in trainer.data.plain.utts}
    kinds = (torch.Tensor, np.ndarray, Batch, Utterance)

    def data(v):
        if isinstance(v, kinds) or (isinstance(v, str) and v in texts):
            return True
        return isinstance(v, (list, tuple)) and any(isinstance(x, kinds) for x in v[:4])

    path, ran = collections.defaultdict(set), set()

    def hook(frame, event, arg):
        code = frame.f_code
        where = Path(code.co_filename)
        if not where.is_relative_to(SRC):
            return
        rel = where.relative_to(SRC).as_posix()
        ran.add(rel)
        if event == "call":
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            hit = any(data(frame.f_locals.get(n)) for n in names if n != "self")
        else:
            hit = event == "return" and data(arg)
        if hit:
            path[model_file if rel.startswith("models/") else rel].add(code.co_qualname)

    real, steps = trainer._step, []

    def traced(*args):
        steps.append(len(steps))
        try:
            return real(*args)
        finally:
            sys.setprofile(hook if len(steps) == 1 else None)

    trainer._step = traced
    try:
        trainer.fit()
    finally:
        sys.setprofile(None)
    assert len(steps) == 3
    return dict(path), ran


def test_the_batch_trace_is_the_calls_of_one_real_batch_in_at_most_12_files(tmp_path):
    """docs/architecture.md's trace of one batch is what one batch of a real run calls: its table names exactly the
    files whose functions handle the batch's data (each hop a function that was called with it), at most 12, and its
    list of the files that also run during the step (choosing the batch, pacing, the schedule, the strategy's hooks)
    is the rest of what ran."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    hops = re.findall(r"^\| \d+ \| `([\w/]+\.py) : ([\w.]+)`", doc, flags=re.M)
    path, ran = _one_batch(tmp_path)
    assert len(path) <= 12, sorted(path)
    assert {f for f, _ in hops} == set(path), (sorted(path), sorted({f for f, _ in hops}))
    for file, name in hops:
        assert name in path[file], f"{file} : {name} was not called with the batch's data (it called {sorted(path[file])})"
    around = re.search(r"Around the batch, the step also runs: (.*?)\.\n\n", doc, flags=re.S)
    assert around, "docs/architecture.md lists what else runs during the step"
    listed = set(re.findall(r"`([\w/]+\.py)`", around.group(1)))
    others = {f for f in ran if f not in path and not f.startswith("models/")}
    assert listed == others, (sorted(others - listed), sorted(listed - others))


def test_the_layout_names_every_module_and_folder():
    """docs/layout.md names each module of the package and of benchmarks/ (a name ending in * covers a prefix), and
    each folder, so a module added without its line fails here."""
    doc = (ROOT / "docs" / "layout.md").read_text()
    words = set(re.findall(r"\w+", doc))
    prefixes = tuple(re.findall(r"([A-Za-z_]\w*)\*", doc))
    names = {p: p.stem for root in (SRC, ROOT / "benchmarks") for p in root.rglob("*.py")
             if p.stem not in ("__init__", "__main__")}
    names.update({p: p.name for p in SRC.rglob("*") if p.is_dir() and p.name != "__pycache__"})
    missing = sorted(str(p.relative_to(ROOT)) for p, name in names.items()
                     if name not in words and not name.startswith(prefixes))
    assert not missing, f"docs/layout.md does not name: {', '.join(missing)}"


def test_the_docstring_examples_run(tmp_path):
    """Examples in docstrings (`>>>`) are run, so the ones that document a module cannot go stale. They run where a
    user would: a folder whose data/ holds the recordings (here the shared ones) and configs/ the recipes."""
    import doctest
    import os
    import pkgutil

    import speechscale

    failed = {}
    cwd = os.getcwd()
    (tmp_path / "data").symlink_to(shared("ldc93s1").parent, target_is_directory=True)
    (tmp_path / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    os.chdir(tmp_path)
    try:
        for info in pkgutil.walk_packages(speechscale.__path__, "speechscale."):
            if info.name in FORKSERVER_ONLY:
                continue
            module = importlib.import_module(info.name)
            res = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=False)
            if res.failed:
                failed[info.name] = res.failed
    finally:
        os.chdir(cwd)
    assert not failed, failed


def test_no_product_test_imports_the_workshop():
    """benchmarks/ is this repository's own figures: only tests/evidence (its tests) imports it, so the product's
    tests stand without it."""
    tests = ROOT / "tests"
    found = [str(p.relative_to(ROOT)) for p in tests.rglob("*.py") if "evidence" not in p.relative_to(tests).parts
             and re.search(r"^\s*(from|import)\s+benchmarks\b", p.read_text(), re.M)]
    assert not found, f"product tests importing benchmarks/: {found}"


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """The package modules `module` (at `path`) imports, at its top or inside functions (TYPE_CHECKING aside)."""
    import ast

    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            target = ".".join(base + [node.module] if node.module else base)
            subs = {f"{target}.{a.name}" for a in node.names} & modules
            found.update(subs or ({target} & modules))
        elif isinstance(node, ast.Import):
            found.update({a.name for a in node.names} & modules)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(ast.parse(path.read_text()))
    return found - {module}


def test_no_import_circle_in_the_package():
    """No module of src/ reaches itself through its imports (those inside functions included)."""
    paths = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in SRC.rglob("*.py")}
    graph = {m: _imports(p, m, set(paths)) for m, p in paths.items()}
    circles = []
    for start in graph:  # a path from each module's imports back to it
        seen, todo = set(), [(n, [start, n]) for n in graph[start]]
        while todo:
            node, trail = todo.pop()
            if node == start:
                circles.append(" -> ".join(trail))
                break
            if node not in seen:
                seen.add(node)
                todo.extend((n, trail + [n]) for n in graph[node])
    assert not circles, "import circles:\n" + "\n".join(sorted(circles))
