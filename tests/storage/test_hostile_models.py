"""Model files from strangers (docs/untrusted-files.md): files built from a genuine trained run that would run code,
exhaust memory, hang or crash a reader are refused in one line, through the API and every command that reads them,
with nothing run, no process past 1.5 GB and no wait past its bound."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT
from tests.storage.hostile_models import MARKER, build_cases

PEAK_BYTES = 1.5 * (1 << 30)


@pytest.fixture(scope="module")
def cases(ldc_checkpoint, tmp_path_factory):
    from speechscale.export.exporter import export_model

    root = tmp_path_factory.mktemp("hostile")
    export_model(str(ldc_checkpoint), "onnx", root / "genuine.onnx")
    return root, build_cases(root / "cases", ldc_checkpoint, root / "genuine.onnx")


def test_the_api_refuses_every_case_with_its_exception_within_memory_and_time(cases):
    """Each case through `speechscale.load` in a child: every one is speechscale.ModelFileError naming the file and
    what is wrong, within 10 s; no case's code ran (the marker neither printed nor touched); the child's peak
    resident memory stays under 1.5 GB (the zip bomb inflates to 256 MB, the strided view claims 1.2 TB, the
    shared references expand to 10^10 values)."""
    root, hostile = cases
    listing = root / "cases.json"
    listing.write_text(json.dumps(hostile))
    out = root / "child.out"
    with out.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "tests.storage.hostile_models", str(listing)], cwd=ROOT,
                                stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.kill()
    text = out.read_text()
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    assert MARKER not in text and not (root / "cases" / MARKER).exists()
    results = {r["name"]: r for r in map(json.loads, (line for line in text.splitlines() if line.startswith("{")))}
    assert set(results) == {c["name"] for c in hostile}
    for c in hostile:
        r = results[c["name"]]
        assert r["ended"] == "refused", (c["name"], r)
        assert c["expect"] in r["message"] and "\n" not in r["message"], (c["name"], r["message"])
        assert r["seconds"] < 10, (c["name"], r["seconds"])
    assert usage.ru_maxrss * 1024 < PEAK_BYTES, f"peak {usage.ru_maxrss / 1024:.0f} MB"


COMMANDS = {"info": lambda p, tmp: ["info", p],
            "transcribe": lambda p, tmp: ["transcribe", "--checkpoint", p, str(ROOT / "../shared/data/ldc93s1/LDC93S1.wav")],
            "export": lambda p, tmp: ["export", "--checkpoint", p, "--format", "onnx", "--out", str(tmp / "x.onnx")],
            "average": lambda p, tmp: ["average", p, p, "--out", str(tmp / "avg.pt")]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_every_case_in_one_line_and_writes_nothing(cases, cli, command, tmp_path):
    """info, transcribe, export and average on each case: exit 2, one line naming the file and holding the case's
    words; export and average write nothing (average built its result and failed after writing --out before)."""
    _, hostile = cases
    for c in hostile:
        if command in ("export", "average") and c["name"].endswith((".onnx", ".ts")):
            continue  # these read checkpoints only: an export is refused as not a checkpoint (below)
        result = cli(*COMMANDS[command](c["path"], tmp_path), check=False)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (command, c["name"], result.stderr[-600:])
        assert c["expect"] in lines[0] and Path(c["path"]).name in lines[0], (command, c["name"], lines[0])
        assert MARKER not in result.stdout + result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_run_folders_pointer_and_links_never_lead_out_of_it(ldc_checkpoint, tmp_path, cli):
    """A stranger's run folder whose `latest` points outside it, and whose last.pt links outside it: resume and eval
    take only the files inside (the pointer and link are passed over, or refused in one line), never the outside
    checkpoint (its step marks it)."""
    from speechscale.storage.checkpoints import model_path, newest_checkpoint

    state = torch.load(ldc_checkpoint, weights_only=True)
    outside = tmp_path / "outside.pt"
    torch.save({**state, "training": {**state["training"], "step": 999}}, outside)
    run = tmp_path / "run" / "checkpoints"
    run.mkdir(parents=True)
    torch.save(state, run / "step-000000019.pt")
    (run / "latest").write_text("../../outside.pt\n")
    (run / "last.pt").symlink_to(outside)
    path, found = newest_checkpoint(run)
    assert Path(path).name == "step-000000019.pt" and found["training"]["step"] == state["training"]["step"]
    (run / "latest").write_text(str(outside))  # an absolute path
    assert Path(newest_checkpoint(run)[0]).name == "step-000000019.pt"
    (run / "best.pt").symlink_to(outside)
    with pytest.raises(ValueError, match="a link out of its run folder"):
        model_path(tmp_path / "run")
    result = cli("info", str(tmp_path / "run"), check=False)
    assert result.returncode == 2 and "a link out of its run folder" in result.stderr


def test_resume_refuses_an_optimizer_state_of_another_shape_before_training(ldc_checkpoint, tmp_path, cli):
    """A checkpoint whose optimizer moments have another shape than their parameters (torch.optim loads them without
    a word, and the next step fails mid-run) and one whose training state lacks its positions (it resumed from step
    0 without a word): `train trainer.resume=FILE` stops in one line before any step."""
    state = torch.load(ldc_checkpoint, weights_only=True)
    moments = {k: {n: (v[:1] if isinstance(v, torch.Tensor) and v.dim() else v) for n, v in s.items()}
               for k, s in state["optimizer"]["state"].items()}
    bad_moments = tmp_path / "moments.pt"
    torch.save({**state, "optimizer": {**state["optimizer"], "state": moments}}, bad_moments)
    no_step = tmp_path / "no-step.pt"
    torch.save({**state, "training": {"best_wer": 0.0}}, no_step)
    data = ROOT / "../shared/data/ldc93s1"
    for path, words in ((bad_moments, "its optimizer's exp_avg for parameter"), (no_step, "has no epoch, step")):
        result = cli("-q", "train", "--config", str(ROOT / "configs/ldc93s1.yaml"), f"data.root={data}",
                     f"trainer.out_dir={tmp_path / path.stem}", f"trainer.resume={path}", check=False)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr[-800:]
        assert not (tmp_path / path.stem / "checkpoints" / "last.pt").exists()


class _Server:
    """An HTTP server on loopback that answers every request by `behaviour`: stall (headers, then nothing) or endless
    (a body without end, no Content-Length)."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour, self.sock = behaviour, socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/model.pt"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
                block = b"\0" * (1 << 16)
                while not self.stop.is_set():
                    if self.behaviour == "stall":
                        time.sleep(0.1)
                    else:
                        conn.sendall(block)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(timeout=5)


@pytest.mark.parametrize("behaviour, words", [("stall", "no data for 1 s"), ("endless", "more than the")])
def test_a_url_that_stalls_or_never_ends_is_refused_in_bounded_time_and_bytes(behaviour, words, cli, monkeypatch):
    """A checkpoint URL whose server sends headers and then nothing, or a body without end: refused in one line
    within the read timeout's tries (here 1 s each) or the size bound (here 8 MB), not waited on or read forever."""
    monkeypatch.setenv("SPEECHSCALE_MODEL_URL_TIMEOUT", "1")
    monkeypatch.setenv("SPEECHSCALE_MAX_MODEL_MB", "8")
    server = _Server(behaviour)
    try:
        start = time.monotonic()
        result = cli("info", server.url, check=False)
        took = time.monotonic() - start
    finally:
        server.close()
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr[-600:]
    assert took < 20, took


def test_a_genuine_run_still_loads_everywhere(ldc_checkpoint, cases, cli, tmp_path):
    """The same checks pass the genuine files they were built from: its checkpoint, run folder, ONNX and TorchScript
    exports transcribe LDC93S1 exactly (a refusal of genuine files would make the suite pass for nothing)."""
    import speechscale

    root, _ = cases
    ts = tmp_path / "genuine.ts"
    assert cli("export", "--checkpoint", str(ldc_checkpoint), "--format", "torchscript", "--out", str(ts)).returncode == 0
    wav = ROOT / "../shared/data/ldc93s1/LDC93S1.wav"
    for path in (ldc_checkpoint, ldc_checkpoint.parent.parent, root / "genuine.onnx", ts):
        assert speechscale.load(path, device="cpu").transcribe(wav).text == \
            "she had your dark suit in greasy wash water all year", path
