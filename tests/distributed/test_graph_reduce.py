"""CUDA-graphed steps run the bare model, outside DDP's hooks: AllReduceStrategy.reduce_gradients must leave the
gradients DDP would (2 real gloo processes under torchrun)."""
import json
import sys
import time

from tests.distributed.launch import free_port, run


def test_reduce_gradients_averages_as_ddp_does(tmp_path):
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=1", "--max-restarts=0",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id=g{time.time_ns()}",
           "-m", "tests.distributed.graph_reduce_worker", str(out)]
    run(cmd, tmp_path / "log", timeout=180)
    res = json.loads(out.read_text())
    assert res["world_size"] == 2
    assert res["max_diff_to_ddp"] < 1e-6  # DDP's average, from the bare model's own gradients
    assert res["max_local_change"] > 1e-3  # the ranks' batches differ: the average is not a rank's own gradient
