"""Imported only by the forkserver that starts loader workers (`loading.WORKER_PRELOAD`), never by a trainer:
the server, like the workers it forks, leaves SIGTERM to the trainer. A launcher that signals the whole
process group (SLURM) would otherwise kill the server, and with it the workers a checkpoint-on-SIGTERM
still reads from. The server exits by itself when its trainer does."""
import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
