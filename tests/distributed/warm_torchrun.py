"""torchrun whose workers start warm: `python -m tests.distributed.warm_torchrun FLAGS --run-path
--start-method=fork tests/distributed/rank_main.py ARGS`.

This is torchrun's own agent (torch.distributed.run's `main` parses every flag and runs rendezvous, restarts,
health checks and signal forwarding as `torchrun` does); only the interpreter it runs in has already imported
torch, DDP's dynamo (its constructor imports it) and the trainer. With torchrun's `--run-path` and
`--start-method=fork` each worker is forked from the agent and runs the script in the same interpreter, instead of
starting a new one and importing them again. The tests that must see torchrun exactly as users start it
(SIGTERM to the agent, a worker found by its environment, the graphed reduction, the SLURM check) use the plain
command.
"""
import gc
import sys

import torch._dynamo  # noqa: F401
import torch.distributed.run

import speechscale.cli  # noqa: F401
import speechscale.distributed.adpsgd  # noqa: F401
import speechscale.distributed.allreduce  # noqa: F401
import speechscale.training.trainer  # noqa: F401

if __name__ == "__main__":
    gc.freeze()  # the imports' objects: the workers' collector never scans them (nor copies their pages)
    sys.stdout.flush()
    sys.stderr.flush()
    torch.distributed.run.main()
