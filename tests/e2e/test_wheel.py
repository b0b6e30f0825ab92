"""A new user's first hour, from the built wheel alone: a fresh venv with torch (TORCH_SPEC, as the Makefile
installs it) and the wheel, run in a folder with no checkout in sight. `speechscale recipes`, `data download
yesno` (from a real loopback HTTP server), `train --config yesno data.root=...`, `info`, `transcribe`, the
Python API, and one-line errors for extras the base install leaves out."""
import ctypes.util
import json
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.archives import Archives, md5, yesno_archive
from tests.conftest import ROOT, shared

TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")


# What the wheel may hold: the package's folders, and in bench/ the benches a user runs on their own hardware
# (train, scaling, loader, features, memory, export, infer, align, serve, stream, soak, straggler) with their harness and
# the planner's check. This repository's evidence tooling (benchmarks/) never ships.
PACKAGE_FOLDERS = {"bench", "commands", "data", "decoding", "distributed", "export", "models", "planning", "recipes",
                   "reporting", "inference", "streaming", "service", "storage", "training"}
BENCH_MODULES = {"__init__", "align", "audio", "export", "features", "harness", "infer", "loader", "memory", "planner",
                 "ports", "ranks", "rawws", "scaling", "serve", "soak", "straggler", "stream", "throughput"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a clean copy of the project's tracked sources (an in-tree build would reuse build/,
    which keeps the modules a move left behind)."""
    import shutil

    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
         cwd=dist)
    (built,) = dist.glob("speechscale-*.whl")
    return built


def test_the_wheel_holds_the_package_and_none_of_the_evidence_tooling(wheel):
    """`unzip -l` of the wheel against the allow-list: the package's folders, the user benches, the recipes."""
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"speechscale", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    folders = {n.split("/")[1] for n in names if n.startswith("speechscale/") and n.count("/") >= 2}
    assert folders == PACKAGE_FOLDERS, folders ^ PACKAGE_FOLDERS
    bench = {Path(n).stem for n in names if n.startswith("speechscale/bench/")}
    assert bench == BENCH_MODULES, bench ^ BENCH_MODULES
    text = "".join(zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith((".py", ".yaml")))
    for word in ("../shared", "LESSONS", "docs/figures"):
        assert word not in text, word


def _run(cmd: list[str], cwd: Path, timeout: float = 600, check: bool = True, **env: str):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "MAKE"))}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**clean, "PYTHONWARNINGS": "ignore", **env})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> SimpleNamespace:
    """A fresh venv with torch (TORCH_SPEC, as the Makefile installs it) and the wheel, and yesno downloaded by the
    wheel's CLI from a real loopback HTTP server into a folder with no checkout in sight."""
    shared("yesno", "manifest.jsonl")
    root = tmp_path_factory.mktemp("wheel-user")
    venv, data = root / "venv", root / "data"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]  # each module compiles once,
    _run([*pip, *shlex.split(TORCH_SPEC)], cwd=root)                                   # when first imported
    _run([*pip, str(wheel)], cwd=root)
    cli = str(venv / "bin" / "speechscale")
    archive = yesno_archive()
    server = Archives({"waves_yesno.tar.gz": archive})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = _run([cli, "-q", "data", "download", "yesno", "--out", str(data / "yesno"), "--mirror", server.url,
                    "--checksum", f"waves_yesno.tar.gz=md5:{md5(archive)}"], cwd=root)
    finally:
        server.shutdown()
        server.server_close()
    assert json.loads(got.stdout.strip().splitlines()[-1])["kept"] == 60
    return SimpleNamespace(python=str(venv / "bin" / "python"), cli=cli, venv=venv, data=data)


def _work(tmp_path: Path, installed: SimpleNamespace) -> Path:
    """A user's folder: the downloaded corpus under data/, nothing of the checkout."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").symlink_to(installed.data, target_is_directory=True)
    return work


@pytest.mark.slow
def test_the_wheel_alone_lists_trains_describes_and_transcribes(tmp_path, installed):
    cli, work = installed.cli, _work(tmp_path, installed)
    # the wheel's package, not the checkout's
    where = _run([installed.python, "-c", "import speechscale; print(speechscale.__file__)"], cwd=work)
    assert where.stdout.strip().startswith(str(installed.venv))

    listing = _run([cli, "recipes"], cwd=work).stdout
    assert "yesno" in listing and "ldc93s1" in listing and "demo" in listing

    summary = _run([cli, "-q", "train", "--config", "yesno", "data.root=data/yesno", "trainer.max_steps=3",
                    "trainer.out_dir=run"], cwd=work).stdout
    summary = json.loads(summary.strip().splitlines()[-1])
    assert summary["step"] == 3 and summary["utterances"] == 29  # scored on Kaldi's 29 test files

    card = json.loads(_run([cli, "info", "run/checkpoints/last.pt", "--json"], cwd=work).stdout)
    assert card["training_data"]["utterances"] == 31 and card["model"]["name"] == "ds2-tiny"
    assert (work / "run" / "checkpoints" / "MODEL.md").is_file()

    wav = sorted((work / "data" / "yesno" / "waves_yesno").glob("*.wav"))[40]
    row = json.loads(_run([cli, "transcribe", "--checkpoint", "run/checkpoints/last.pt", "--json", str(wav)],
                          cwd=work).stdout)
    assert row["file"] == str(wav) and isinstance(row["text"], str) and row["duration"] > 5


@pytest.mark.slow
def test_the_wheels_python_api_trains_and_transcribes_and_missing_extras_are_one_line(tmp_path, installed):
    cli, work = installed.cli, _work(tmp_path, installed)
    wav = sorted((work / "data" / "yesno" / "waves_yesno").glob("*.wav"))[40]
    api = _run([installed.python, "-c", (
        "import json, speechscale\n"
        "s = speechscale.train('yesno', data={'root': 'data/yesno'}, trainer={'max_steps': 2, 'out_dir': 'api',"
        " 'progress': False})\n"
        f"m = speechscale.load('api/checkpoints/last.pt', device='cpu')\n"
        f"print(json.dumps({{'step': s['step'], 'text': m.transcribe({str(wav)!r}).text,"
        " 'rate': m.sample_rate}))")], cwd=work)
    out = json.loads(api.stdout.strip().splitlines()[-1])
    assert out["step"] == 2 and out["rate"] == 8000 and isinstance(out["text"], str)

    # the base install leaves the extras out: each command that needs one says which, in one line
    for cmd, extra in [(["report", "api"], "report"), (["lm", "build", str(wav), "--out", "lm.arpa"], "decode"),
                       (["serve", "--checkpoint", "api/checkpoints/last.pt"], "serve"),
                       (["export", "--checkpoint", "api/checkpoints/last.pt", "--format", "onnx", "--out", "m.onnx"],
                        "export"), *([(["synth", "--out", "synth", "--minutes", "1"], "synth")]
                                     if ctypes.util.find_library("espeak-ng") is None else [])]:
        proc = _run([cli, *cmd], cwd=work, check=False)
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and f"pip install 'speechscale[{extra}]'" in lines[0], \
            (cmd, proc.stderr[-2000:])
