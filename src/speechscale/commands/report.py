"""`speechscale report`: an HTML page and PNG plots of a training run."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from .args import out_folder


def report(args: argparse.Namespace) -> int:
    from ..config import ConfigError
    from ..reporting.report import write_report
    from ..reporting.runs import RunError

    if args.out is None and Path(args.run_dir).is_dir():  # the default folder, checked before any work too
        try:
            out_folder(str(Path(args.run_dir) / "report"))
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"{e}; give --out DIR") from None
    try:
        index = write_report(args.run_dir, args.out)
    except RunError as e:
        raise ConfigError(str(e)) from None
    print(index)
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `report` to the subcommand table."""
    rp = command(sub, "report", "an HTML page and PNG plots of a training run (while it runs, too)")
    rp.add_argument("run_dir", help="the run's trainer.out_dir (or trainer.log_dir): metrics.jsonl, config.json")
    rp.add_argument("--out", type=out_folder, default=None,
                    help="folder for index.html and the PNGs (default RUN_DIR/report)")
    rp.set_defaults(func=report)
