"""A c10d rendezvous store that lives outside the training nodes.

torchrun's c10d rendezvous keeps its state in a TCPStore hosted by whichever agent owns the endpoint's
address: when that node is lost, every other agent loses the rendezvous and the job ends. Hosting the store
in a process of its own (`speechscale rendezvous`, started by the SLURM batch script or a Kubernetes
Deployment) lets any training node come and go; the agents then join as clients
(`--rdzv-conf=is_host=false`).

    speechscale rendezvous --host 0.0.0.0 --port 29400
"""
from __future__ import annotations

import datetime
import signal
import threading
from typing import Callable

from torch.distributed import TCPStore

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def host_store(host: str, port: int, on_ready: Callable[[int], None] | None = None,
               stop: threading.Event | None = None) -> None:
    """Host a multi-tenant TCPStore on host:port (0: a free port) until SIGTERM/SIGINT or `stop` is set;
    `on_ready(port)` is called once it accepts clients.

    On the main thread the two signals are taken with `sigtimedwait`, blocked from the start (the store's own
    threads inherit that): a process started with them blocked (an exec keeps its launcher's mask) still stops."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if main else None
    try:
        store = TCPStore(host, port, is_master=True, multi_tenant=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=60))
        stop = stop or threading.Event()
        if on_ready:
            on_ready(store.port)
        while not stop.is_set():
            if not main:
                stop.wait(1.0)
            elif signal.sigtimedwait(STOP_SIGNALS, 1.0) is not None:
                break
        del store  # closes the listening socket
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
