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

import pytest

from tests.archives import Archives, md5, yesno_archive
from tests.conftest import ROOT, shared

TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")


def _run(cmd: list[str], cwd: Path, timeout: float = 600, check: bool = True, **env: str):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "MAKE"))}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**clean, "PYTHONWARNINGS": "ignore", **env})
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


@pytest.mark.slow
def test_the_wheel_alone_downloads_trains_describes_and_transcribes(tmp_path):
    shared("yesno", "manifest.jsonl")
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
         cwd=tmp_path)
    (wheel,) = dist.glob("speechscale-*.whl")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run([*pip, *shlex.split(TORCH_SPEC)], cwd=tmp_path)
    _run([*pip, str(wheel)], cwd=tmp_path)
    cli = str(venv / "bin" / "speechscale")

    # the wheel's package, not the checkout's
    where = _run([str(venv / "bin" / "python"), "-c", "import speechscale; print(speechscale.__file__)"], cwd=work)
    assert where.stdout.strip().startswith(str(venv))

    listing = _run([cli, "recipes"], cwd=work).stdout
    assert "yesno" in listing and "ldc93s1" in listing and "demo" in listing

    archive = yesno_archive()
    server = Archives({"waves_yesno.tar.gz": archive})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = _run([cli, "-q", "data", "download", "yesno", "--out", "data/yesno", "--mirror", server.url,
                    "--checksum", f"waves_yesno.tar.gz=md5:{md5(archive)}"], cwd=work)
    finally:
        server.shutdown()
        server.server_close()
    assert json.loads(got.stdout.strip().splitlines()[-1])["kept"] == 60

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

    api = _run([str(venv / "bin" / "python"), "-c", (
        "import json, speechscale\n"
        "s = speechscale.train('yesno', data={'root': 'data/yesno'}, trainer={'max_steps': 2, 'out_dir': 'api',"
        " 'progress': False})\n"
        f"m = speechscale.load('api/checkpoints/last.pt', device='cpu')\n"
        f"print(json.dumps({{'step': s['step'], 'text': m.transcribe({str(wav)!r})['text'],"
        " 'rate': m.sample_rate}))")], cwd=work)
    out = json.loads(api.stdout.strip().splitlines()[-1])
    assert out["step"] == 2 and out["rate"] == 8000 and isinstance(out["text"], str)

    # the base install leaves the extras out: each command that needs one says which, in one line
    for cmd, extra in [(["report", "run"], "report"), (["lm", "build", str(wav), "--out", "lm.arpa"], "decode"),
                       (["serve", "--checkpoint", "run/checkpoints/last.pt"], "serve"),
                       (["export", "--checkpoint", "run/checkpoints/last.pt", "--format", "onnx", "--out", "m.onnx"],
                        "export"), *([(["synth", "--out", "synth", "--minutes", "1"], "synth")]
                                     if ctypes.util.find_library("espeak-ng") is None else [])]:
        proc = _run([cli, *cmd], cwd=work, check=False)
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and f"pip install 'speechscale[{extra}]'" in lines[0], \
            (cmd, proc.stderr[-2000:])
