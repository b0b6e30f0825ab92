"""`speechscale average`: checkpoints averaged into one, or a run's EMA weights written out."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from .args import check_not_an_input, out_file_or_url


def average(args: argparse.Namespace) -> int:
    from ..storage.averaging import average_checkpoints, ema_checkpoint, newest_steps
    from ..storage.checkpoints import CheckpointError, checkpoints_folder, save_checkpoint

    given = sum(bool(x) for x in (args.checkpoints, args.last, args.ema))
    if given != 1:
        raise CheckpointError("speechscale average: give checkpoints, or --last N --dir FOLDER, or --ema CHECKPOINT "
                              "(one of them)")
    folders = [p for p in args.checkpoints if Path(p).is_dir()]
    if folders:
        raise CheckpointError(f"{folders[0]}: a folder, not a checkpoint; a run's newest step files are averaged with "
                              f"--last N --dir {folders[0]}")
    if args.ema:
        run = Path(args.ema) / "checkpoints" / "last.pt"  # a run folder: its newest EMA
        source = str(run) if run.is_file() else args.ema
        ckpt = ema_checkpoint(source)
    else:
        if args.last and not args.dir:
            raise CheckpointError("speechscale average: --last N needs --dir (a run's checkpoints folder)")
        paths = newest_steps(str(checkpoints_folder(args.dir)), args.last) if args.last else args.checkpoints
        check_not_an_input(args.out, paths, "--out")
        ckpt = average_checkpoints(paths)
        source = str(paths[-1])  # whose config the result keeps
    from ..components import components_from_checkpoint

    comps = components_from_checkpoint(ckpt, source)  # a model that loads, before it is written
    save_checkpoint(args.out, ckpt)
    print(json.dumps({"out": str(args.out), "averaged_from": ckpt["averaged_from"], "model": comps.model_name}))
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `average` to the subcommand table."""
    from .args import positive

    a = command(sub, "average", "average checkpoints' weights (or write out a run's EMA) into one checkpoint for "
                "eval, transcribe, serve and export")
    a.add_argument("checkpoints", nargs="*", help="checkpoints of one model to average")
    a.add_argument("--last", type=positive(int), default=0, help="average the newest N step-N.pt of --dir")
    a.add_argument("--dir", default=None, help="a run folder, or its checkpoints folder (with --last)")
    a.add_argument("--ema", default=None, help="a checkpoint of a run trained with trainer.ema_decay (or the run's "
                   "folder: its last.pt): its EMA weights")
    a.add_argument("--out", required=True, type=out_file_or_url, help="the checkpoint to write (local path or URL)")
    a.set_defaults(func=average)
