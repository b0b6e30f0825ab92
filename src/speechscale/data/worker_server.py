"""Imported only by the forkserver that starts loader workers (`workers.WORKER_PRELOAD`), never by a trainer:
the server, like the workers it forks, leaves SIGTERM to the trainer. A launcher that signals the whole
process group (SLURM) would otherwise kill the server, and with it the workers a checkpoint-on-SIGTERM
still reads from. The server exits by itself when its trainer does. It also keeps SIGINT and SIGTERM
blocked (its trainer starts it so), and so forks each worker with them blocked until the worker ignores them
(`workers.WorkerStart`): torch's worker installs a SIGTERM handler of its own before that, and a signal in
between would otherwise kill the worker (seen in CI: an ADPSGD learner's only worker, and no checkpoint)."""
import signal

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # workers.LEFT_TO_TRAINER (not imported:
# a restarted server, which Python starts without the trainer's mask, still forks its workers so)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
