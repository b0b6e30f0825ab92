"""Helpers for multi-process tests: free loopback ports, torchrun as a real process group, clean-up."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from tests.conftest import ROOT, shared


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ldc_manifest(folder: Path, copies: int = 40) -> Path:
    """`copies` lines of the LDC93S1 recording (one real utterance, many sample ids)."""
    src = shared("ldc93s1")
    row = json.loads((src / "manifest.jsonl").read_text().splitlines()[0])
    row["audio_filepath"] = str(src / row["audio_filepath"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.jsonl"
    path.write_text((json.dumps(row) + "\n") * copies)
    return path


def ldc_shards(folder: Path, copies: int = 12, shard_size: int = 5) -> Path:
    """The same utterances as `ldc_manifest`, written as tar shards (uneven: the last is short); the index."""
    from speechscale.data.shards import write_shards

    write_shards(str(ldc_manifest(folder, copies)), folder / "shards", shard_size=shard_size)
    return folder / "shards" / "index.jsonl"


def train_args(manifest: Path, out: Path, *extra: str) -> list[str]:
    """A tiny, fast training run: 2-layer 32-unit ds2 at 8 kHz, 2 utterances a batch."""
    return ["-q", "train", "--config", "configs/ldc93s1.yaml", f"data.train_manifest={manifest}",
            f"data.val_manifest={manifest}", "data.train_slice=[]", "data.val_slice=[0, 2]", f"trainer.out_dir={out}",
            "trainer.max_minutes=0", "data.cache_audio=false",
            "features.sample_rate=8000", "data.batch_seconds=6", "data.sortagrad=false", "trainer.target_wer=-1",
            "model.overrides={rnn_hidden: 32, rnn_layers: 2}", "trainer.max_epochs=50", "trainer.threads=1",
            "trainer.trace_samples=true", "optim.warmup_steps=2", *extra]


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    # unbuffered as torchrun's `python -u` workers are: a forked worker inherits the agent's streams
    e.update(PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
             PYTHONUNBUFFERED="1")
    return e


# torchrun as users start it, and the same agent with its workers forked warm (tests/distributed/warm_torchrun.py:
# a worker skips its imports); each is (agent, entry before the arguments)
TORCHRUN = ([sys.executable, "-m", "torch.distributed.run"], ["-m", "speechscale.cli"])
WARM_TORCHRUN = ([sys.executable, "-m", "tests.distributed.warm_torchrun"],
                 ["--run-path", "--start-method=fork", str(Path(__file__).with_name("rank_main.py"))])


def torchrun(nproc: int, args: list[str], max_restarts: int = 0, port: int | None = None,
             nnodes: str = "1", warm: bool = True) -> list[str]:
    """The torchrun command line for `speechscale ARGS` on `nproc` local workers, c10d rendezvous (`warm`: its
    workers forked from the agent, WARM_TORCHRUN). With an elastic `nnodes` (MIN:MAX) the rendezvous closes 1 s
    after MIN nodes have joined."""
    agent, entry = WARM_TORCHRUN if warm else TORCHRUN
    return [*agent, f"--nproc-per-node={nproc}", f"--nnodes={nnodes}",
            f"--max-restarts={max_restarts}", "--rdzv-backend=c10d", "--rdzv-conf=last_call_timeout=1",
            f"--rdzv-endpoint=127.0.0.1:{port or free_port()}", f"--rdzv-id=t{time.time_ns()}", *entry, *args]


# test-only rendezvous timings: a lost node's heartbeats are missed after 3 s (default 15 s), a round short of its
# maximum closes 4 s after its minimum joined (agents started together can start seconds apart on a loaded
# machine, and the tests need both in the first round); is_host=false: the store runs in `speechscale rendezvous`,
# never in an agent
NODE_RDZV_CONF = "is_host=false,last_call_timeout=4,keep_alive_interval=1,keep_alive_max_attempt=3"


def node_agent(nproc: int, args: list[str], endpoint: str, rdzv_id: str, nnodes: str = "1:2", max_restarts: int = 3,
               rdzv_conf: str = NODE_RDZV_CONF, warm: bool = True) -> list[str]:
    """torchrun for one node of a multi-node job: the flags of deploy/kubernetes and deploy/slurm (the deploy
    tests keep them equal), each agent a node of its own on loopback (`warm`: as in `torchrun`)."""
    agent, entry = WARM_TORCHRUN if warm else TORCHRUN
    return [*agent, f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={rdzv_id}", f"--rdzv-conf={rdzv_conf}", *entry, *args]


def popen(cmd: list[str], stdout, stderr=subprocess.STDOUT, environ: dict[str, str] | None = None, cwd: Path = ROOT):
    """`cmd` in a session of its own (so the whole tree can be killed), with `environ` (default `env()`): forked from
    a prewarmed server where it runs a module the servers preload (tests/prewarmed.py: the interpreter's imports
    skipped), else started."""
    from tests import prewarmed

    e = env() if environ is None else environ
    if prewarmed.forkable(cmd):
        return prewarmed.Process(cmd, cwd, e, stdout=stdout, stderr=stderr)
    return subprocess.Popen(cmd, cwd=cwd, env=e, stdout=stdout, stderr=stderr, text=True, start_new_session=True)


def start(cmd: list[str], log: Path):
    """Start `cmd` (see `popen`), output to `log`."""
    return popen(cmd, log.open("w"))


def run(cmd: list[str], log: Path, timeout: float = 300) -> subprocess.Popen:
    """Run `cmd` to completion (killing its process group on timeout); assert it succeeded. A run that hangs
    fails with the log's tail and every process's Python stacks (also written beside the log)."""
    proc = start(cmd, log)
    hung = ""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = stacks(proc)
        log.with_suffix(".stacks").write_text(hung)
    finally:
        kill_group(proc)
    assert not hung, f"hung past {timeout:g} s; the log's tail:\n{log.read_text()[-3000:]}\n{hung[-12000:]}"
    assert proc.returncode == 0, log.read_text()[-4000:]
    return proc


def stacks(proc: subprocess.Popen) -> str:
    """The Python stacks of `proc` and every process below it, by py-spy (the dev extra installs it)."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return "(no py-spy beside the interpreter: stacks not taken)"
    out = []
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            dump = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            out.append(f"== pid {pid}: {cmdline}\n{dump.stdout}{dump.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"== pid {pid}: {e}")
    return "\n".join(out)


def descendants(pid: int) -> list[int]:
    """All processes below `pid` (torchrun starts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def signal_tree(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the launched process, its group and every descendant (workers included)."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """`signal_tree(proc, sig)`, then reap the launched process."""
    signal_tree(proc, sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def wait_for(predicate, timeout: float = 240, every: float = 0.05) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(every)
    raise AssertionError("timed out waiting")


def trace(out: Path) -> Iterator[dict]:
    """Every traced step of every rank and attempt, complete lines only (a trainer may be writing). Polled
    while a run starts: its pre-flight check creates `out` and removes it again, which a glob can race."""
    try:
        paths = sorted(out.glob("samples-rank*.jsonl"))
    except FileNotFoundError:  # out was there for the glob's is_dir and gone for its scandir: nothing yet
        return
    for path in paths:
        for line in path.read_text().split("\n")[:-1]:
            row = json.loads(line)
            row["rank"] = int(path.stem.split("rank")[1])
            yield row


def latest_step(out: Path) -> int:
    import torch

    name = (out / "checkpoints" / "latest").read_text().strip()
    return int(torch.load(out / "checkpoints" / name, weights_only=True)["training"]["step"])


def assert_saved_average(ckpt: dict, nproc: int) -> None:
    """An ADPSGD checkpoint holds every learner's weights and, as its model, their average."""
    import torch

    parts = [p["strategy"] for p in ckpt["ranks"]]
    assert [p["name"] for p in parts] == ["adpsgd"] * nproc
    for k, v in ckpt["model"].items():  # floats only: step counters differ per learner
        if v.is_floating_point():
            mean = sum(p["model"][k].double() for p in parts) / nproc
            torch.testing.assert_close(v.double(), mean, rtol=0, atol=1e-6)


def consensus_distance(ckpt: dict) -> float:
    """The learners' mean L2 distance from their average over what they average (parameters and floating-point
    buffers), recomputed from a checkpoint's per-learner weights: what the run logs as `consensus_distance`."""
    import torch

    parts = [p["strategy"]["model"] for p in ckpt["ranks"]]
    keys = [k for k, v in parts[0].items() if v.is_floating_point()]
    mean = {k: sum(p[k].double() for p in parts) / len(parts) for k in keys}
    return float(sum(torch.sqrt(sum(((p[k].float().double() - mean[k]) ** 2).sum() for k in keys))
                     for p in parts)) / len(parts)


def accepted(rows: list[dict]) -> list[dict]:
    """Rows that count: an attempt's steps up to where the next attempt resumed (later ones were redone)."""
    starts = sorted({r["resumed_at"] for r in rows})
    nxt = {s: (starts[i + 1] if i + 1 < len(starts) else float("inf")) for i, s in enumerate(starts)}
    return [r for r in rows if r["step"] <= nxt[r["resumed_at"]]]


def ids_by_epoch(rows: list[dict]) -> dict[int, list[int]]:
    """Sample ids per epoch over `rows`, repeats kept (so that a sample read twice shows)."""
    out: dict[int, list[int]] = {}
    for r in rows:
        out.setdefault(r["epoch"], []).extend(r["ids"])
    return out
