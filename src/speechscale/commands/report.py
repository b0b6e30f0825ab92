"""`speechscale report`: an HTML page and PNG plots of a training run."""
from __future__ import annotations

import argparse
from typing import Any, Callable


def report(args: argparse.Namespace) -> int:
    from ..reporting.report import write_report
    from ..reporting.runs import RunError

    try:
        index = write_report(args.run_dir, args.out)
    except RunError as e:
        raise SystemExit(f"speechscale report: error: {e}") from None
    print(index)
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `report` to the subcommand table."""
    rp = command(sub, "report", "an HTML page and PNG plots of a training run (while it runs, too)")
    rp.add_argument("run_dir", help="the run's trainer.out_dir (or trainer.log_dir): metrics.jsonl, config.json")
    rp.add_argument("--out", default=None, help="folder for index.html and the PNGs (default RUN_DIR/report)")
    rp.set_defaults(func=report)
