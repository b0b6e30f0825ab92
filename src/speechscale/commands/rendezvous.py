"""`speechscale rendezvous`: the c10d rendezvous store of a multi-node job, in a process of its own."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from .args import check_listen, port


def rendezvous(args: argparse.Namespace) -> int:
    from ..distributed.rendezvous import host_store

    def ready(port: int) -> None:
        print(json.dumps({"rendezvous": f"{args.host}:{port}"}), flush=True)

    check_listen(args.host, args.port)
    host_store(args.host, args.port, ready)
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `rendezvous` to the subcommand table."""
    r = command(sub, "rendezvous", "host the c10d rendezvous store of a multi-node torchrun job (until SIGTERM), so "
                                   "that losing any training node does not end the job")
    r.add_argument("--host", default="0.0.0.0", help="address to listen on")
    r.add_argument("--port", type=port, default=29400,
                   help="port (0: a free one); torchrun --rdzv-endpoint=HOST:PORT --rdzv-conf=is_host=false")
    r.set_defaults(func=rendezvous)
