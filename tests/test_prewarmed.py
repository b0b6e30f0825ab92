"""The prewarmed server (tests/prewarmed.py) runs a command as a started interpreter does: the same output and exit
status; a session of its own, in the given directory; signals reach it."""
import datetime
import json
import os
import select
import signal
import subprocess
import sys

from torch.distributed import TCPStore

from tests import prewarmed
from tests.conftest import ROOT
from tests.distributed.launch import env, kill_group, popen


def test_a_forked_command_says_and_exits_as_a_started_one():
    cmd = [sys.executable, "-m", "speechscale.cli", "train", "--print-config", "optim.name=adam"]
    started = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    forked = prewarmed.Process(cmd, ROOT, env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = forked.communicate(timeout=120)
    assert (forked.returncode, out, err) == (started.returncode, started.stdout, started.stderr)
    assert forked.returncode == 2 and "optim.name='adam'" in err


def test_a_forked_store_serves_in_its_own_session_and_stops_on_sigterm():
    """`speechscale rendezvous` (a TCPStore that serves until stopped), forked: the server's child, leading a session
    of its own, in the tests' directory; a client reaches it, and SIGTERM ends it with status 0."""
    proc = popen([sys.executable, "-m", "speechscale.cli", "rendezvous", "--host", "127.0.0.1", "--port", "0"],
                 subprocess.PIPE, stderr=None)
    try:
        assert isinstance(proc, prewarmed.Process)
        assert select.select([proc.stdout], [], [], 60)[0], "no address printed within 60 s"
        host, port = json.loads(proc.stdout.readline())["rendezvous"].split(":")
        fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        assert [int(f) for f in fields[1:4]] == [proc.server.proc.pid, proc.pid, proc.pid]  # ppid, pgid, sid
        assert os.readlink(f"/proc/{proc.pid}/cwd") == str(ROOT)
        store = TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(seconds=10))
        assert store.add("joined", 1) == 1 and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        kill_group(proc)
