"""The rank launcher of the multi-process benches: real forked processes, a real gloo allreduce between them."""
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from speechscale.bench.ports import free_port
from speechscale.bench.ranks import PRELOAD, RankLauncher


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not yet reaped by its parent) has ended too
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def allreduce_rank(rank: int, world: int, port: int, out: str) -> None:
    """Record what this rank started with, then allreduce rank + 1 over gloo."""
    warm = {name: name in sys.modules for name in PRELOAD}  # before this function imports anything
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"pid": os.getpid(), "ppid": os.getppid(), "sum": t.item(), "warm": warm,
         "env": os.environ.get("SPEECHSCALE_RANK_TEST")}))


def failing_rank(rank: int, out: str) -> None:
    """Rank 1 raises once rank 0 is running; rank 0 would wait for ten minutes."""
    Path(out, f"rank{rank}.pid").write_text(str(os.getpid()))
    if rank == 1:
        while not Path(out, "rank0.pid").exists():
            time.sleep(0.01)
        raise ValueError("this rank fails on purpose")
    time.sleep(600)


def killed_rank(rank: int) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _rows(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def test_ranks_are_forked_warm_by_one_launcher_that_serves_every_job(tmp_path):
    """Two jobs (2 ranks, then 3) through one launcher: each rank is a child of the same launcher process (not of
    this one), starts with torch and DDP's imports already loaded, gets the environment its job adds, and the
    gloo allreduce between the ranks sums their values; once closed, the launcher is gone."""
    with RankLauncher() as launch:
        launcher_pid = launch.pid
        for world in (2, 3):
            out = tmp_path / str(world)
            out.mkdir()
            launch.run(allreduce_rank, world, (world, free_port(), str(out)), env={"SPEECHSCALE_RANK_TEST": str(world)})
            rows = _rows(out, world)
            assert {r["ppid"] for r in rows} == {launcher_pid} != {os.getpid()}
            assert len({r["pid"] for r in rows}) == world
            assert [r["sum"] for r in rows] == [world * (world + 1) / 2] * world
            assert all(all(r["warm"].values()) for r in rows), rows
            assert {r["env"] for r in rows} == {str(world)}
    assert _gone_within(launcher_pid, 10)
    assert "SPEECHSCALE_RANK_TEST" not in os.environ  # the job's environment is the ranks' only


def test_a_failing_rank_stops_its_job_names_itself_and_leaves_the_launcher_serving(tmp_path, capfd):
    """Rank 1 raises while rank 0 sleeps: `run` raises naming rank 1 at once (not after rank 0's ten minutes),
    rank 0 is stopped, the traceback is on stderr, and the launcher runs the next job; a rank killed by a signal
    is named with its signal."""
    with RankLauncher() as launch:
        started = time.monotonic()
        named = r"rank 1 of 2 \(failing_rank\) exited with code 1 \(its traceback is above\); 1 other rank\(s\) stopped"
        with pytest.raises(RuntimeError, match=named):
            launch.run(failing_rank, 2, (str(tmp_path),))
        assert time.monotonic() - started < 60
        assert _gone_within(int((tmp_path / "rank0.pid").read_text()), 10)
        assert "ValueError: this rank fails on purpose" in capfd.readouterr().err
        with pytest.raises(RuntimeError, match=r"rank 0 of 1 \(killed_rank\) was killed by signal 9"):
            launch.run(killed_rank, 1)
        out = tmp_path / "after"
        out.mkdir()
        launch.run(allreduce_rank, 2, (2, free_port(), str(out)))
        assert [r["sum"] for r in _rows(out, 2)] == [3.0, 3.0]


def test_bench_scaling_runs_every_model_through_one_launcher(cli):
    """`speechscale bench scaling` with two models, one process each: a row per model, each from a real DDP step
    (parameters counted in the rank, a positive step time), in the order given."""
    out = cli("bench", "scaling", "--model", "ds2-tiny,wav2letter+-tiny", "--procs", "1", "--batch-size", "2",
              "--seconds", "0.5", "--steps", "1", "--warmup", "0").stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["model"], r["processes"], r["speedup"]) for r in rows] == [("ds2-tiny", 1, 1.0), ("wav2letter+-tiny", 1, 1.0)]
    assert rows[0]["params"] != rows[1]["params"] and all(r["ms_per_step"] > 0 for r in rows)
