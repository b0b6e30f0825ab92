"""ADPSGD with real gloo processes: pairings agree, gossip keeps the mean and shrinks the spread, the end
of training leaves identical weights, and training through torchrun learns and stops cleanly."""
import json
import os

import pytest
import torch
import torch.multiprocessing as mp

from speechscale.distributed.adpsgd import partner, random_pairs, ring_pairs
from tests.distributed.launch import free_port, ldc_manifest, run, torchrun, trace, train_args

pytestmark = pytest.mark.slow  # real process groups


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_every_round_is_a_matching_and_the_ring_covers_every_edge(world):
    edges = set()
    for r in range(2 * world):
        for pairs in (ring_pairs(world, r), random_pairs(world, r, seed=7)):
            ranks = [x for p in pairs for x in p]
            assert len(ranks) == len(set(ranks)) == 2 * (world // 2)  # disjoint pairs, all but one rank
            assert all(partner(pairs, partner(pairs, k)) == k for k in ranks)
        edges |= {frozenset(p) for p in ring_pairs(world, r)}
    assert edges == {frozenset((k, (k + 1) % world)) for k in range(world)}  # left and right neighbours
    assert random_pairs(world, 3, seed=7) == random_pairs(world, 3, seed=7)  # every rank draws the same
    if world > 3:
        assert len({tuple(map(tuple, random_pairs(world, r, seed=7))) for r in range(8)}) > 1  # and it varies


def _gossip_worker(rank, world, port, out):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      LOCAL_RANK=str(rank))
    from speechscale.distributed.adpsgd import ADPSGDStrategy, _flat

    torch.set_num_threads(1)
    strategy = ADPSGDStrategy("delay_by_one")
    torch.manual_seed(rank)  # every learner starts elsewhere
    model = torch.nn.Linear(6, 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # no gradients: pure gossip
    distances, means = [], []
    partners = []
    for step in range(4 * world):
        partners.append(partner(strategy.pairs(strategy.round), rank))
        strategy.before_step(model, opt)
        opt.step()
        strategy.after_step(model, opt)
        with strategy.consensus(model) as m:
            means.append(_flat(m).tolist())
        distances.append(strategy.stats()["consensus_distance"])
    strategy.finish(model, opt)
    final = _flat(model).tolist()
    with open(os.path.join(out, f"{rank}.json"), "w") as f:
        json.dump({"distances": distances, "means": means, "partners": partners, "final": final}, f)
    strategy.close()


@pytest.mark.parametrize("world", [2, 3, 4])
def test_gossip_keeps_the_mean_shrinks_the_spread_and_ends_identical(tmp_path, world):
    mp.spawn(_gossip_worker, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True)
    rows = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(world)]
    for step in range(len(rows[0]["partners"])):  # partners agree: if a names b, b names a
        for r, row in enumerate(rows):
            p = row["partners"][step]
            assert p is None or rows[p]["partners"][step] == r
    first_mean = torch.tensor(rows[0]["means"][0])
    for row in rows:
        for mean in row["means"]:  # pairwise averaging is doubly stochastic: the mean never moves
            torch.testing.assert_close(torch.tensor(mean), first_mean, rtol=0, atol=1e-6)
    d = rows[0]["distances"]
    assert d[-1] < 0.1 * d[0] and all(b <= a + 1e-9 for a, b in zip(d, d[1:]))  # bounded, shrinking
    for row in rows:  # after the final averaging every learner holds the same weights
        assert row["final"] == rows[0]["final"]
    torch.testing.assert_close(torch.tensor(rows[0]["final"]), first_mean, rtol=0, atol=1e-6)


@pytest.mark.parametrize("nproc", [2, 3])
def test_training_with_adpsgd_learns_logs_consensus_and_stops_cleanly(tmp_path, nproc):
    m = ldc_manifest(tmp_path / "data", copies=12)
    out = tmp_path / "run"
    run(torchrun(nproc, train_args(m, out, "distributed.strategy=adpsgd", "trainer.max_epochs=4",
                                   "trainer.log_every=2")), tmp_path / "log", timeout=400)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if r["kind"] == "val"]
    assert len(val) == 4 and val[-1]["train_loss"] < val[0]["train_loss"]
    assert all(r["consensus_distance"] >= 0 for r in val)
    for epoch in range(4):  # lockstep data: every sample once per epoch, over the learners
        ids = sorted(i for r in trace(out) if r["epoch"] == epoch for i in r["ids"])
        assert ids == list(range(12 - 12 % nproc)) or ids == list(range(12))
    ckpt = torch.load(out / "checkpoints" / "last.pt", weights_only=True)
    parts = [p["strategy"] for p in ckpt["ranks"]]
    assert [p["name"] for p in parts] == ["adpsgd"] * nproc
    mean = {k: sum(p["model"][k].double() for p in parts) / nproc for k in ckpt["model"]}
    for k, v in ckpt["model"].items():  # the saved weights are the learners' average
        torch.testing.assert_close(v.double(), mean[k], rtol=0, atol=1e-6)
