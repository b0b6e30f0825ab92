"""`python -m benchmarks.remote_shards`: training batches read from shards over HTTP by a buffered fsspec file and by
exact ranged reads, and the loader over HTTP against local disk; the store it serves from and the rows it renders."""
import json
import threading

import fsspec

from benchmarks import remote_shards, tables
from benchmarks.summary_rows import _remote_shards


def test_the_store_answers_ranges_after_its_round_trip_and_counts_what_it_sent(tmp_path):
    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 4)
    store = remote_shards.Store(tmp_path, delay=0.05)
    threading.Thread(target=store.serve_forever, daemon=True).start()
    try:
        fs = fsspec.filesystem("http")
        assert fs.cat_file(f"{store.url}/a.bin", 10, 20) == bytes(range(10, 20))
        assert fs.cat_file(f"{store.url}/a.bin") == bytes(range(256)) * 4
        assert (store.sent, store.requests) == (10 + 1024, 2)
        assert not fs.exists(f"{store.url}/b.bin")
    finally:
        store.shutdown()
        store.server_close()


def test_both_readers_read_the_same_batches_and_the_block_renders(tmp_path):
    out = tmp_path / "remote.json"
    argv = ["--utterances", "12", "--clip-seconds", "3", "--shard-size", "4", "--batch-seconds", "20",
            "--delays", "0,0.02", "--loader-delay", "0.02", "--workers", "0,1", "--repeats", "1", "--out", str(out)]
    assert remote_shards.main(argv) == 0
    doc = json.loads(out.read_text())
    res = doc["results"]
    reads = tables.remote_reads(res)
    assert set(reads) == {(d, r) for d in (0.0, 0.02) for r in ("buffered", "exact")}
    for (delay, _), r in reads.items():
        assert r["member_bytes"] == reads[(delay, "exact")]["member_bytes"] and r["utterances"] == 12
    for delay in (0.0, 0.02):
        exact = reads[(delay, "exact")]
        assert exact["sent_bytes"] == exact["member_bytes"] and exact["requests"] == 12  # a request a member
    assert [(r["where"], r["workers"]) for r in res["loader"]] == [("local", 0), ("local", 1), ("http", 0), ("http", 1)]
    assert len({r["feature_frames"] for r in res["loader"]}) == 1  # the same audio from both
    shares = tables.remote_loader_share(res)
    by = {(r["where"], r["workers"]): r["x_realtime"] for r in res["loader"]}
    assert shares == {w: by[("http", w)] / by[("local", w)] for w in (0, 1)}
    block = tables.render("loader-remote", doc)
    assert "| 20 ms | exact |" in block and "| http | 1 |" in block and "remote_shards" in block
    assert doc["settings"]["goals"] == remote_shards.GOALS  # recorded with the run
    batch, loader = _remote_shards(out)  # no row for 0 workers: the goal is a worker's
    exact, buffered = reads[(0.02, "exact")], reads[(0.02, "buffered")]
    assert batch["figure"].startswith(f"1.00x against {buffered['bytes_ratio']:.2f}x; {exact['ms_per_batch']:g} ms")
    fast = buffered["ms_per_batch"] / exact["ms_per_batch"] >= remote_shards.GOALS["exact_speedup"]
    assert batch["status"].startswith("reached" if fast else "**not reached**")
    assert loader["what"].startswith("loader over HTTP at a 20 ms round trip, 1 worker:")
    assert loader["figure"] == f"{100 * shares[1]:.1f} %"
