"""Run under torchrun by test_graph_reduce.py: on each rank, the gradients of its own batch averaged by DDP's hooks,
then the same batch through the bare model (as a CUDA-graphed step runs it) averaged by
AllReduceStrategy.reduce_gradients. Rank 0 writes what it found to the file named on the command line."""
import copy
import json
import sys

import torch

from speechscale.distributed.allreduce import AllReduceStrategy


def main(out: str) -> None:
    strategy = AllReduceStrategy(timeout_s=60)
    torch.manual_seed(0)  # the same weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(strategy.rank + 1))  # each rank its own batch
    twin = copy.deepcopy(model)  # DDP's hooks stay on the twin's parameters (as in training: graphs never wrap)
    ddp_module = strategy.wrap(twin)  # held through backward: DDP's reducer goes with the wrapper
    ddp_module(x).square().sum().backward()
    ddp = [p.grad.clone() for p in twin.parameters()]
    model(x).square().sum().backward()
    local = [p.grad.clone() for p in model.parameters()]
    strategy.reduce_gradients(model)
    reduced = [p.grad for p in model.parameters()]
    if strategy.rank == 0:
        with open(out, "w") as f:
            json.dump({"max_diff_to_ddp": max(float((a - b).abs().max()) for a, b in zip(ddp, reduced)),
                       "max_local_change": max(float((a - b).abs().max()) for a, b in zip(local, reduced)),
                       "world_size": strategy.world_size}, f)
    strategy.close()


if __name__ == "__main__":
    main(sys.argv[1])
