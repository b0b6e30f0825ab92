"""`speechscale <command>`: the table of subcommands and `main`; each command lives in commands/.

    speechscale synth --out runs/demo/data --minutes 30
    speechscale train --config configs/demo.yaml trainer.max_steps=100
    speechscale eval --checkpoint runs/demo/checkpoints/best.pt --manifest runs/demo/data/test.jsonl --json
    speechscale transcribe --checkpoint runs/demo/checkpoints/best.pt speech.flac --json
    speechscale bench train --model ds2-tiny --batch-size 8 --seconds 2
"""
from __future__ import annotations

import argparse
import atexit
import gc
import logging
import os
import sys
from typing import Any

# Allocations between two collections of the youngest objects in a process the CLI owns (Python's default is
# 700). A command's start imports torch, whose modules' objects all live as long as the process: at the default
# the collector scans them over and over, a good part of the import's CPU time.
GC_YOUNG_THRESHOLD = 20_000

# The exit status of the command this process ran (`main` with the process's own argv), set when it returned.
_FINISHED: list[int] = []


def _exit_without_teardown() -> None:
    """The last exit handler (registered when this module is imported, before torch or multiprocessing are, and
    handlers run newest first): after a command returned, and after the interpreter joined its threads and
    every other handler ran (torch's, multiprocessing's: loader workers and their server are gone), flush the
    logs and the standard streams and end the process without tearing the interpreter down. With torch loaded
    that teardown costs about 1-2 s of CPU (measured: a training process of `tests/distributed/launch.train_args`),
    paid by every command and every torchrun rank. A command that raised gets the ordinary exit."""
    if _FINISHED:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing left to write to
                pass
        os._exit(_FINISHED[0])


atexit.register(_exit_without_teardown)

from .commands import (  # noqa: E402,E501
    average,
    bench,
    data,
    decode,
    export,
    info,
    label,
    migrate,
    plan,
    recipes,
    rendezvous,
    report,
    serve,
    train,
)
from .commands.args import Parser  # noqa: E402

# the subcommands, in the order `speechscale --help` lists them
COMMANDS = (recipes, data, train, rendezvous, decode, label, info, serve, export, average, migrate, report, plan, bench)

log = logging.getLogger("speechscale")


def _setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose >= 0 else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("speechscale")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from . import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: -v/-q, --version, and each command module's parsers."""
    # -v/-q work before and after the subcommand: every parser knows them, and SUPPRESS keeps a value
    # given before the subcommand from being reset by the subparser's default.
    common = Parser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more logging (-vv for debug)")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="warnings only, no progress bars")
    p = Parser(prog="speechscale", parents=[common], description="Train and use end-to-end speech recognition models.")
    p.add_argument("--version", action="version", version=f"speechscale {_version()}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    def command(parent: Any, name: str, help: str) -> argparse.ArgumentParser:
        return parent.add_parser(name, help=help, description=help, parents=[common])

    for module in COMMANDS:
        module.register(sub, command)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command in `argv` (default: the process's own command line) and return its exit status. For the
    process's own command line the collector runs less often (GC_YOUNG_THRESHOLD) and the process ends without
    the interpreter's teardown (see `_exit_without_teardown`); a call with `argv` (tests, other programs)
    changes neither."""
    if argv is None:
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    code = _run(argv)
    if argv is None:
        _FINISHED[:] = [code]
    return code


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and hasattr(args, "overrides") and not any(a.startswith("-") for a in rest):
        args.overrides = list(args.overrides) + rest  # KEY=VALUE after a flag: argparse leaves those over
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.verbose = getattr(args, "verbose", 0)
    args.quiet = getattr(args, "quiet", False)
    _setup_logging(-1 if args.quiet else args.verbose)
    if args.quiet and hasattr(args, "overrides") and "trainer.progress=false" not in args.overrides:
        args.overrides = list(args.overrides) + ["trainer.progress=false"]
    try:
        return args.func(args)
    except KeyboardInterrupt:  # a second Ctrl-C during training, or one outside the training loop
        print(f"speechscale {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output left (`| head`): stop quietly, as a pipeline expects
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 141  # 128 + SIGPIPE, what a shell reports for a writer the pipe ended
    except Exception as e:
        return report(f"speechscale {args.command}", e)


def report(prog: str, error: Exception) -> int:
    """An error a command reports in one line, printed as `PROG: error: ...` (bad input, status 2) or `PROG: stopped:
    ...` (a run that stopped for a reason it explains, status 3); any other error is raised again."""
    if _raised_one_of(error, _BAD_INPUT):
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if _raised_one_of(error, _STOPPED):
        print(f"{prog}: stopped: {error}", file=sys.stderr)
        return 3
    raise error


# Errors a command reports in one line, by the module that defines each: only a module that was imported can have
# raised one, so a command that never needed torch does not import it to check (training's errors import it).
_BAD_INPUT = (("speechscale.config", "ConfigError"), ("speechscale.data.manifest", "ManifestError"),
              ("speechscale.storage.checkpoints", "CheckpointError"), ("speechscale.data.espeak", "EspeakNotFound"),
              ("speechscale.planning.model", "PlanError"))
_STOPPED = (("speechscale.training.prescan", "PrescanError"), ("speechscale.training.precision", "LossScaleCollapsed"),
            ("speechscale.training.recovery", "LoaderFailed"), ("speechscale.training.recovery", "DataUnreadable"),
            ("speechscale.training.recovery", "Diverged"))


def _raised_one_of(error: BaseException, classes: tuple[tuple[str, str], ...]) -> bool:
    """Whether `error` is an instance of one of `classes` (module, name) among the modules imported so far."""
    return any(isinstance(error, getattr(sys.modules[module], name)) for module, name in classes
               if module in sys.modules)


if __name__ == "__main__":
    sys.exit(main())
