"""A worker of tests/distributed/warm_torchrun.py: `speechscale ARGS` in the forked interpreter (torchrun's
--run-path runs this file with runpy, its arguments in sys.argv). Guarded: a loader worker started by the
forkserver or spawn imports the main module's file again."""
import os
import signal
import sys
import traceback

from speechscale import cli


def run() -> int:
    """`speechscale ARGS`; a worker the agent stopped with SIGTERM ends as soon as the command returns. A function
    worker of torchrun otherwise waits for the agent to read its return value, which an agent that is stopping
    its workers never does: it waits out its 30 s grace and kills it (a worker torchrun started as a program just
    exits). Whether SIGTERM came is read from a wakeup fd: every signal with a Python handler writes its number
    there, whoever's handler it is (the trainer's, while it trains)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    try:
        code = cli.main()
    except BaseException:  # printed here, as the interpreter prints it for a worker torchrun started as a program:
        traceback.print_exc()  # the agent logs only the failure it picks as the root cause, often another rank's
        sys.stderr.flush()
        raise
    try:
        received = os.read(read, 1024)
    except BlockingIOError:
        received = b""
    if signal.SIGTERM in received:
        cli._exit_without_teardown()  # the CLI's own end of a finished command: logs and streams flushed, os._exit
    return code


if __name__ == "__main__":
    sys.exit(run())
