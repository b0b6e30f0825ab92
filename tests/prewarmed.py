"""`python -m MODULE ARGS` for multi-process tests, forked from an interpreter that has already imported torch and
the trainer: one such server per test process, started on first use.

Every process a multi-process test starts as `python -m ...` (a torchrun agent, a `speechscale` command) would
import torch and the trainer again: about 3 s of CPU each, as much as a short run's training. `Process` instead
asks the server to fork. The child takes a session of its own (as `start_new_session=True` does), the caller's
stdin, stdout and stderr (passed over a Unix socket), working directory and environment, and runs the module as
`python -m` would (`__main__`, `sys.argv`, `sys.exit`, the exit handlers). What an interpreter reads only as it
starts is the same: there is one server for each set of the variables read then (AT_START), started with the
first command's environment. The server has no threads and runs no tensor operation (it checks), so a fork is as
safe as torchrun's own `--start-method=fork`.

A `Process` answers what the tests ask of `subprocess.Popen` (pid, poll, wait, send_signal, kill, terminate,
returncode, stdout): the server is the child's parent and reaps it, writing its exit status and CPU seconds to a
file named by the pid, which `wait` reads once the process has ended (a pidfd says when). Commands that must start
exactly as users start them (plain `torchrun`, the wheel's, the README's) keep `subprocess`.
"""
from __future__ import annotations

import atexit
import gc
import importlib
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

# What the server imports once, the CLI first (its exit handler then runs after torch's and multiprocessing's, as
# in a process that ran `python -m speechscale.cli`)
PRELOAD = ("speechscale.cli", "torch", "torch._dynamo", "torch.distributed.run", "speechscale.training.trainer",
           "speechscale.distributed.allreduce", "speechscale.distributed.adpsgd", "speechscale.service.server",
           "speechscale.inference.transcribe", "speechscale.streaming.opener", "speechscale.streaming.recognizer")
# The modules a forked child may run
MODULES = ("speechscale.cli", "tests.distributed.warm_torchrun")
# Read by the interpreter, or by torch as it is imported, only as a process starts
AT_START = ("PYTHONUNBUFFERED", "PYTHONWARNINGS", "PYTHONHASHSEED", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
            "PYTHONFAULTHANDLER", "PYTHONMALLOC", "PYTHONDEVMODE", "PYTHONIOENCODING", "PYTHONSAFEPATH",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")


def _serve(folder: Path) -> None:
    """The server: import PRELOAD, then fork a child for each request on `folder/sock` until the socket closes;
    reap each child and write its exit status and CPU seconds to `folder/PID`."""
    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    if threading.active_count() != 1 or torch.cuda.is_initialized():
        raise RuntimeError("the prewarmed server has threads or CUDA after its imports: it cannot fork")
    gc.freeze()  # the imports' objects stay shared with the children (the collector would copy their pages)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "sock"))
    listener.listen(1)
    print("ready", flush=True)
    conn, _ = listener.accept()
    listener.close()
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([conn, *children], [], [])
        for fd in ready:
            if fd in children:
                pid = children.pop(fd)
                os.close(fd)
                _, status, usage = os.wait4(pid, 0)  # its CPU with that of the children it reaped
                cpu = usage.ru_utime + usage.ru_stime
                (folder / f"{pid}.tmp").write_text(f"{os.waitstatus_to_exitcode(status)} {cpu:.3f}")
                os.replace(folder / f"{pid}.tmp", folder / str(pid))
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            except OSError:
                msg, fds = b"", []
            if not msg:  # the test process is gone: its children are its to stop
                return
            pid = os.fork()
            if pid == 0:
                for own in (conn.fileno(), *children):
                    os.close(own)
                _child(json.loads(msg), fds)
            for f in fds:
                os.close(f)
            children[os.pidfd_open(pid)] = pid
            conn.sendall(f"{pid}\n".encode())


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: a session of its own, the given streams, directory and environment; then the module,
    as `python -m` runs it. Never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if "numpy" in sys.modules:  # Python's `random` reseeds itself in a forked child; numpy's global one does not
            sys.modules["numpy"].random.seed()
        module = request["module"]
        try:
            if module == "speechscale.cli":  # the imported module, whose exit handler was registered first
                cli = sys.modules["speechscale.cli"]
                sys.argv = [cli.__file__, *request["args"]]
                sys.modules["__main__"] = cli
                code = cli.main()
            else:
                sys.argv = [module, *request["args"]]
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what the interpreter runs as it exits (the CLI's handler may end the process)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    finally:
        os._exit(code)


class Server:
    """The server process: started on first use (one per test process and AT_START values), it ends when the test
    process does."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="prewarmed-"))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.prewarmed", str(self.folder)], cwd=cwd,
                                     env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 180)
        if not ready or self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("the prewarmed server did not start within 180 s")
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.connect(str(self.folder / "sock"))
        self.replies = self.conn.makefile("r")
        atexit.register(self.close)

    def fork(self, module: str, args: list[str], cwd: Path, env: dict[str, str], fds: list[int]) -> int:
        """Fork `python -m module args` with stdin, stdout, stderr `fds`; its pid."""
        request = json.dumps({"module": module, "args": args, "cwd": str(cwd), "env": env}).encode()
        socket.send_fds(self.conn, [request], fds)
        return int(self.replies.readline())

    def close(self) -> None:
        self.replies.close()  # (the socket stays open while a file made from it is)
        self.conn.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: dict[tuple[str | None, ...], Server] = {}  # by the AT_START values they started with


def server(env: dict[str, str], cwd: Path) -> Server:
    """The running server whose interpreter started as one with environment `env` would; started if none is."""
    key = tuple(env.get(k) for k in AT_START)
    if key not in _servers or _servers[key].proc.poll() is not None:
        _servers[key] = Server(env, cwd)
    return _servers[key]


# CPU seconds of the children this process's servers forked for it and reaped, as far as they have been waited for
# here (tests.cpuprof_plugin counts them as the test's children, as if the test had reaped them itself)
reaped_cpu = 0.0


def forkable(cmd: list[str]) -> bool:
    """Whether `cmd` is `python -m MODULE ...` for a module the servers may run."""
    return len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m" and cmd[2] in MODULES


class Process:
    """A forked `python -m MODULE ARGS` (see `forkable`): what the tests use of `subprocess.Popen`. `stdout` may be
    `subprocess.PIPE` (then read from `.stdout`, text), `stderr` `subprocess.STDOUT`."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict[str, str], stdout: IO | int | None = None,
                 stderr: IO | int | None = None) -> None:
        self.server = server(env, cwd)
        self.args, self.returncode, self.stdout, self.stderr = cmd, None, None, None
        mine: list[int] = []
        out = _fd(stdout, 1)
        if stdout == subprocess.PIPE:
            read, out = os.pipe()
            mine.append(out)
            self.stdout = io.open(read, "r", encoding="utf-8")
        err = out if stderr == subprocess.STDOUT else _fd(stderr, 2)
        if stderr == subprocess.PIPE:
            read, err = os.pipe()
            mine.append(err)
            self.stderr = io.open(read, "r", encoding="utf-8")
        try:
            self.pid = self.server.fork(cmd[2], cmd[3:], cwd, env, [0, out, err])
        finally:
            for fd in mine:
                os.close(fd)
        self._status = self.server.folder / str(self.pid)
        self._pidfd = os.pidfd_open(self.pid)

    def poll(self) -> int | None:
        global reaped_cpu
        if self.returncode is None and self._status.is_file():
            code, cpu = self._status.read_text().split()
            self.returncode, reaped_cpu = int(code), reaped_cpu + float(cpu)
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            ended, _, _ = select.select([self._pidfd], [], [], 0.05 if left is None else min(0.05, left))
            if ended:  # the server writes the status a moment after the exit
                time.sleep(0.005)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Everything the piped stdout and stderr say until both close, then the exit: (stdout, stderr)."""
        end = None if timeout is None else time.monotonic() + timeout
        fds = [f.fileno() if f is not None else -1 for f in (self.stdout, self.stderr)]
        streams = {fd: f for fd, f in zip(fds, (self.stdout, self.stderr)) if f is not None}
        said: dict[int, list[bytes]] = {fd: [] for fd in fds}
        while streams:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for fd in select.select(list(streams), [], [], left)[0]:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    said[fd].append(chunk)
                else:
                    streams.pop(fd).close()
        self.wait(None if end is None else max(0.0, end - time.monotonic()))
        return b"".join(said[fds[0]]).decode(), b"".join(said[fds[1]]).decode()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _fd(stream: IO | int | None, default: int) -> int:
    if stream is None:
        return default
    return stream if isinstance(stream, int) else stream.fileno()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
