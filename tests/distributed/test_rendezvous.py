"""`speechscale rendezvous`: a real TCPStore in its own process that torchrun agents reach as clients."""
import datetime
import json
import select
import signal
import subprocess
import sys

import pytest
from torch.distributed import TCPStore

from tests.conftest import ROOT
from tests.distributed.launch import env, kill_group


@pytest.mark.parametrize("blocked", [False, True], ids=["sigterm", "sigterm-blocked-at-start"])
def test_the_store_serves_clients_and_stops_on_sigterm(blocked):
    """Also when started with SIGTERM blocked (an exec keeps the launcher's signal mask; this suite's worker has
    been seen so): the store waits for the signal itself instead of for a handler that would never run."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}) if blocked else None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "speechscale.cli", "rendezvous", "--host", "127.0.0.1",
                                 "--port", "0"], cwd=ROOT, env=env(), stdout=subprocess.PIPE, text=True)
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    try:
        assert select.select([proc.stdout], [], [], 60)[0], "no address printed within 60 s"
        host, port = json.loads(proc.stdout.readline())["rendezvous"].split(":")
        timeout = datetime.timedelta(seconds=10)
        a = TCPStore(host, int(port), is_master=False, timeout=timeout)
        b = TCPStore(host, int(port), is_master=False, timeout=timeout)
        a.set("round", "7")
        assert b.get("round") == b"7" and b.add("joined", 1) == 1 and a.add("joined", 1) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        kill_group(proc)


def test_a_bad_port_is_one_line():
    r = subprocess.run([sys.executable, "-m", "speechscale.cli", "rendezvous", "--port", "70000"], cwd=ROOT,
                       env=env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "0-65535" in r.stderr


def test_a_port_in_use_or_an_unknown_host_is_one_line(capsys):
    """A port in use raised torch's DistNetworkError; a host that resolves to nothing retried without end."""
    import socket

    from tests.conftest import main_cli

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        for flags, said in [(["--host", "127.0.0.1", "--port", str(held.getsockname()[1])], "Address already in use"),
                            (["--host", "no-such-host.invalid", "--port", "0"], "--host no-such-host.invalid: ")]:
            code, out, err = main_cli(capsys, "rendezvous", *flags)
            assert code == 2 and said in err and out == "" and err.count("\n") == 1, err
