"""Shared fixtures: paths to ../shared/data, a tiny trained checkpoint, a CLI runner."""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
# Seconds each test file held its xdist worker, and its CPU seconds, in a profiled run (`python -m tests.cpuprof_plugin`)
FILE_ORDER = ROOT / "docs" / "figures" / "test-time" / "file-order.json"


# A file whose tests mostly wait (a scheduler, a timeout, audio paced in real time): its CPU under this share of
# its wall time
WAITING_SHARE = 0.5


# The files a worker set aside for waiting takes first (make test's third worker): their CPU under this share of
# their wall time, ASIDE_LEAST_S or more
ASIDE_SHARE, ASIDE_LEAST_S = 0.8, 3.0


def profiled() -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Each test file's wall, CPU and child-process CPU seconds in FILE_ORDER's profile (empty where it is absent)."""
    profile = json.loads(FILE_ORDER.read_text()) if FILE_ORDER.is_file() else {}
    return tuple(profile.get(field, {}) for field in ("seconds_per_file", "cpu_seconds_per_file",
                                                      "child_cpu_seconds_per_file"))


def waiting_files(wall: dict[str, float], cpu: dict[str, float], share: float = WAITING_SHARE,
                  least: float = 5.0) -> list[str]:
    """The profiled files that held their worker `least` seconds or more with the CPU busy under `share` of that
    time (their processes', children's included), longest first."""
    return [p for p in sorted(wall, key=lambda p: -wall[p]) if p in cpu and wall[p] >= least and
            cpu[p] < share * wall[p]]


def file_order(wall: dict[str, float], cpu: dict[str, float], children: dict[str, float]) -> list[str]:
    """The profiled files in the order the workers should take them. The files that mostly wait (longest first)
    alternate with the multi-process ones (most of their CPU in child processes; costliest first), so that while
    one worker waits the other's processes get the idle core; then the rest, costliest first (longest job first,
    so the run ends on short files)."""
    by_cost = sorted(wall, key=lambda p: -wall[p])
    waiting = waiting_files(wall, cpu)
    multi = [p for p in by_cost if p not in waiting and children.get(p, 0.0) > cpu.get(p, 0.0) / 2]
    paired = [p for pair in itertools.zip_longest(multi, waiting) for p in pair if p is not None]
    return paired + [p for p in by_cost if p not in paired]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Test files in `file_order`'s order of the last profiled run (files never profiled before them all), each
    file's tests in their own order. With `--dist loadfile --no-loadscope-reorder` (make test) the workers take
    files in this order (xdist's default order is the number of tests in a file, which put the few slowest
    multi-process tests last)."""
    rank = {p: i for i, p in enumerate(file_order(*profiled()))}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)

    def position(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::")[0]
        return rank.get(path, -1), first[path]

    items.sort(key=position)  # stable: a file's tests keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under `--dist loadfile --no-loadscope-reorder` (make test) with three workers or more, the last one is set
    aside for the files that mostly wait (`waiting_files` at ASIDE_SHARE: the soak, node losses, timeouts, audio
    paced in real time): it takes them first, in file order, and the others take the rest, so that two workers
    keep both cores busy while the third sleeps. A worker whose kind of file has run out takes the next file of
    any kind. Anything else: xdist's own scheduler."""
    if config.getoption("dist") != "loadfile" or config.getoption("loadscopereorder"):
        return None
    from xdist.scheduler import LoadFileScheduling

    wall, cpu, _ = profiled()
    waiting = set(waiting_files(wall, cpu, ASIDE_SHARE, ASIDE_LEAST_S))

    class WaitingAside(LoadFileScheduling):
        def _assign_work_unit(self, node) -> None:
            if len(self.nodes) >= 3:
                aside = node.gateway.id == f"gw{len(self.nodes) - 1}"
                self.workqueue.move_to_end(next_file(list(self.workqueue), waiting, aside), last=False)
            super()._assign_work_unit(node)

    return WaitingAside(config, log)


def next_file(queue: list[str], waiting: set[str], aside: bool) -> str:
    """The file a worker takes next from `queue` (file order): the first waiting one for the worker set aside
    for them, the first other one for the rest; the first of any kind where none of its kind is left."""
    return next((p for p in queue if (p in waiting) == aside), queue[0])


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def _signal_state_kept():
    """A test that leaves the process's signals blocked or their handlers changed fails, and the state is
    restored: every process the worker starts afterwards inherits the mask (and an ignored signal), so a later
    test's child would not stop on SIGTERM and fail far from the cause."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    yield
    left_mask = signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    left = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    assert left_mask == mask and left == handlers, (
        f"the test left the signal mask {sorted(left_mask)} (was {sorted(mask)}) and handlers {left} (were {handlers})")


def shared(*parts: str) -> Path:
    """A path inside ../shared/data; skips the test when the shared data is absent (a failure under CI=true)."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared data not found: {p} (CI runs beside ../shared/data)")
        pytest.skip(f"shared data not found: {p}")
    return p


def speech_files() -> list[Path]:
    """Speech a stream test sends: JFK, then the LDC93S1 sentence."""
    return [shared("jfk", "jfk.flac"), shared("ldc93s1", "LDC93S1.wav")]


def exactness_files() -> list[Path]:
    """20 real files at 8, 16 and 44.1 kHz, 0.3-11 s, on which a stream must give the offline output."""
    fsdd = sorted(shared("fsdd", "recordings").glob("*_jackson_4*.wav"))[:12]
    yesno = sorted(shared("yesno").glob("*.wav"))[::15]
    return [*fsdd, *yesno, *sorted(shared("ldc93s1").glob("*.wav")), shared("jfk", "jfk.flac")]


def data_root(name: str) -> str:
    """The override that points a built-in recipe at corpus `name` in ../shared/data (data.root=...)."""
    return f"data.root={shared(name)}"


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600, check: bool = True,
            module: str = "speechscale.cli") -> subprocess.CompletedProcess:
    """Run `python -m speechscale.cli ARGS` (or `python -m MODULE ARGS`) as a process of its own (forked where it can
    be: tests.distributed.launch.popen); returns the completed process."""
    from tests.distributed.launch import kill_group, popen

    cmd = [sys.executable, "-m", module, *args]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}
    started = popen(cmd, subprocess.PIPE, subprocess.PIPE, environ=env, cwd=cwd)
    try:
        out, err = started.communicate(timeout=timeout)
    finally:
        kill_group(started)
    proc = subprocess.CompletedProcess(cmd, started.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def main_cli(capsys, *args: str, main: Callable[[list[str]], int] | None = None) -> tuple[int, str, str]:
    """Run `speechscale ARGS` (or another command line's `main`) in this process (no interpreter start-up: for
    argument and config errors); returns (exit code, stdout, stderr)."""
    if main is None:
        from speechscale.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse: --version, --help, usage errors; a message exits 1 as Python does
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cli(capsys):
    """`speechscale ARGS` in this process (`main_cli`), answered as `run_cli` answers: returncode, stdout,
    stderr; `check` asserts a zero exit. It spares the 2 s torch import of a process per command."""
    def call(*args: str, check: bool = True) -> SimpleNamespace:
        code, out, err = main_cli(capsys, *args)
        assert not check or code == 0, err
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return call


def _trained_once(tmp_path_factory, worker_id, name: str, *overrides: str) -> Path:
    """OUT/checkpoints/best.pt of `speechscale train --config ldc93s1 OVERRIDES`, trained by the real CLI once per
    test run: under pytest-xdist the first worker that needs it trains it, holding a lock in the run's shared
    temporary folder, and the others read it (pytest-xdist's documented pattern). Tests never write beside it."""
    from filelock import FileLock

    shared("ldc93s1", "manifest.jsonl")
    root = tmp_path_factory.getbasetemp()
    root = root if worker_id == "master" else root.parent
    out = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (out / "checkpoints" / "best.pt").is_file():
            proc = run_cli("-q", "train", "--config", "configs/ldc93s1.yaml", f"trainer.out_dir={out}",
                           data_root("ldc93s1"), *overrides)
            assert (out / "checkpoints" / "best.pt").is_file(), proc.stderr
    return out / "checkpoints" / "best.pt"


@pytest.fixture(scope="session")
def ldc_checkpoint(tmp_path_factory, worker_id) -> Path:
    """A ds2-tiny model overfit on LDC93S1 (`configs/ldc93s1.yaml`), trained once per test run."""
    return _trained_once(tmp_path_factory, worker_id, "ldc-checkpoint")


@pytest.fixture(scope="session")
def pieces_checkpoint(tmp_path_factory, worker_id) -> Path:
    """A ds2-tiny overfit on LDC93S1 with word pieces for output units (text.pieces=40), trained once per test run."""
    return _trained_once(tmp_path_factory, worker_id, "pieces-checkpoint", "text.pieces=40")


NUMBERS_SENTENCE = "In 1990 it cost $5.50 on the 21st"  # a manifest's text; the model learns it as the normalizer says it


@pytest.fixture(scope="session")
def numbers_checkpoint(tmp_path_factory, worker_id) -> Path:
    """A folder holding s.wav (espeak-ng saying NUMBERS_SENTENCE), its manifest.jsonl, and run/: a narrow
    ds2-streaming-tiny (it streams, and transcribes whole files) overfit on it (`configs/ldc93s1.yaml`), trained once
    per test run."""
    import numpy as np
    import soundfile as sf
    from filelock import FileLock

    from speechscale.data.audio import resample
    from speechscale.data.espeak import Espeak
    from speechscale.data.text import TextNormalizer

    root = tmp_path_factory.getbasetemp()
    root = (root if worker_id == "master" else root.parent) / "numbers"
    with FileLock(str(root) + ".lock"):
        if not (root / "run" / "checkpoints" / "best.pt").is_file():
            root.mkdir(exist_ok=True)
            tts = Espeak()
            tts.seed(0)
            wav = resample(tts.synthesize(TextNormalizer()(NUMBERS_SENTENCE), voice="en-us", rate=150),
                           tts.sample_rate, 16000)  # the rate a page's live capture runs at
            silence = np.zeros(2000, np.float32)
            sf.write(root / "s.wav", np.concatenate([silence, wav, silence]), 16000)
            row = {"audio_filepath": "s.wav", "duration": sf.info(root / "s.wav").duration, "text": NUMBERS_SENTENCE}
            (root / "manifest.jsonl").write_text(json.dumps(row) + "\n")
            run_cli("-q", "train", "--config", "configs/ldc93s1.yaml", f"data.root={root}",
                    f"trainer.out_dir={root / 'run'}", "trainer.max_epochs=300", "model.name=ds2-streaming-tiny",
                    "model.overrides={rnn_hidden: 128, rnn_layers: 2}", "features.normalize=none")
    return root


@pytest.fixture(scope="session")
def streaming_checkpoint(tmp_path_factory, worker_id) -> Path:
    """A narrow ds2-streaming-tiny (unidirectional, lookahead; features not normalized) overfit on LDC93S1, trained
    once per test run."""
    return _trained_once(tmp_path_factory, worker_id, "streaming-checkpoint", "model.name=ds2-streaming-tiny",
                         "model.overrides={rnn_hidden: 128, rnn_layers: 2}", "features.normalize=none",
                         "trainer.max_epochs=120")


@pytest.fixture(scope="session")
def streaming_pieces_checkpoint(tmp_path_factory, worker_id) -> Path:
    """streaming_checkpoint's model with word pieces for output units (text.pieces=40), trained once per test run."""
    return _trained_once(tmp_path_factory, worker_id, "streaming-pieces-checkpoint", "model.name=ds2-streaming-tiny",
                         "model.overrides={rnn_hidden: 128, rnn_layers: 2}", "features.normalize=none",
                         "trainer.max_epochs=120", "text.pieces=40")


@pytest.fixture(scope="session")
def conformer_streaming_checkpoint(tmp_path_factory, worker_id) -> Path:
    """A narrow conformer-streaming-tiny (2 blocks of 96, 16 frames of left context, trained on chunks of 1-8 and
    the full context, convolutions that read to their chunk's end as the recipe's; 40 log-mel bins, normalized by
    the training set's statistics) overfit on LDC93S1 until its full-context transcript is exact, trained once per
    test run."""
    return _trained_once(tmp_path_factory, worker_id, "conformer-streaming-checkpoint",
                         "model.name=conformer-streaming-tiny", "features.kind=logmel", "features.n_mels=40",
                         "model.overrides={d_model: 96, layers: 2, heads: 4, left_context: 16, max_chunk: 8, "
                         "dropout: 0.0, conv_context: chunk}")


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 server on a free loopback port with one bucket; s3fs pointed at it."""
    import boto3
    import fsspec
    from moto.server import ThreadedMotoServer

    from tests.distributed.launch import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": endpoint}.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ckpts")
    fsspec.config.conf.setdefault("s3", {})["endpoint_url"] = endpoint
    try:
        yield endpoint
    finally:
        fsspec.config.conf.pop("s3", None)
        server.stop()


def headless_chromium(*extra_args: str, size: str = "1000,700"):
    """A selenium driver for Debian's headless chromium (the caller quits it). When chromium or
    chromium-driver is missing the test fails in CI (CI=true: `make browser` must have installed them) and
    is skipped elsewhere, saying how to install them."""
    import shutil

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        message = ("Debian's chromium and chromium-driver are not installed: run `make browser` "
                   "(apt-get install chromium chromium-driver, as root or with passwordless sudo)")
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the browser tests cannot run: {message}")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={size}", *extra_args):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)


def fake_microphone_chromium(folder: Path, recording: Path | None = None):
    """headless_chromium whose fake capture device plays `recording` (LDC93S1 unless given) once into getUserMedia
    (the caller quits it)."""
    import soundfile as sf

    wav, rate = sf.read(recording or shared("ldc93s1", "LDC93S1.wav"), dtype="int16")
    sf.write(folder / "mic.wav", wav, rate, subtype="PCM_16")  # the fake device wants plain 16-bit WAV
    return headless_chromium("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                             f"--use-file-for-fake-audio-capture={folder / 'mic.wav'}%noloop",
                             "--autoplay-policy=no-user-gesture-required")


def start_server(checkpoint, log: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """`speechscale serve --checkpoint CHECKPOINT ARGS` on a free loopback port, in its own session, once its
    /healthz says ok; returns (process, base URL). The caller ends it with tests.distributed.launch.kill_group."""
    import json
    import time
    import urllib.request

    from tests.distributed.launch import free_port, kill_group, popen

    port = free_port()
    proc = popen([sys.executable, "-m", "speechscale.cli", "serve", "--checkpoint", str(checkpoint), "--port", str(port),
                  *args], log.open("w"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                if json.load(r)["status"] == "ok":
                    return proc, url
        except OSError:
            time.sleep(0.1)
    kill_group(proc)
    raise AssertionError(log.read_text())


@pytest.fixture
def serve():
    """Start an archive server (tests/archives.py) on loopback: serve(files, cut) -> Archives; all stop after."""
    from tests.archives import Archives

    servers = []

    def start(files: dict[str, bytes], cut: set[str] = frozenset()) -> Archives:
        server = Archives(files, cut)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()
