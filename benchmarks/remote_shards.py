"""Shards read over HTTP from a store with a round trip: what a training batch costs in bytes and waiting, and the
training loader's rate against the same shards on local disk.

    python -m benchmarks.remote_shards [--utterances 600] [--clip-seconds 12.3] [--shard-size 100]
        [--batch-seconds 400] [--delays 0,0.02,0.05] [--loader-delay 0.02] [--repeats 3]
        [--out docs/figures/bench-all/loader-remote.json]

The corpus is `bench loader`'s (espeak-ng speech as 16 kHz flac, sentences joined into utterances of at least
--clip-seconds), written as tar shards and served by a threaded HTTP server on loopback that answers each request
after waiting the round trip named (an object store's first byte takes tens of milliseconds). Two readers take the
same training batches (the stream's own plan of an epoch): `buffered`, an fsspec file per shard kept open and read
member by member (what `fsspec.open(url)` gives: its default read-ahead cache), and `exact`, ShardReader.fetch (one
ranged request per member, a batch's all at once). The two alternate batch by batch, at each round trip in turn.
Then the training loader (`bench loader`'s, augmentation off) over the local index and over HTTP at --loader-delay,
passes interleaved. Outside the package: how this repository makes its own figure.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.checkout import pin_commit

GOALS = {"exact_bytes_ratio": 1.0,  # the exact reader moves the members' bytes and nothing more
         "exact_speedup": 5.0,      # ... and waits at most a fifth of the buffered reader's time a batch
         "speedup_round_trip": 0.02,  # s: the round trip that speed-up is judged at
         "loader_share": 0.8}       # the loader's workers over HTTP at --loader-delay: this share of local disk's rate


class Store(ThreadingHTTPServer):
    """The files of `root` over HTTP/1.1 with ranged GETs, each answer after `delay` s; counts requests and body
    bytes."""

    daemon_threads = True
    request_queue_size = 256  # a batch's connections arrive together

    def __init__(self, root: Path, delay: float = 0.0) -> None:
        self.root, self.delay, self.sent, self.requests, self.lock = root, delay, 0, 0, threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept alive, as a store's client keeps them

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        store: Store = self.server  # type: ignore[assignment]
        time.sleep(store.delay)
        path = store.root / self.path.lstrip("/")
        if not path.is_file() or store.root not in path.resolve().parents:
            self.send_error(404)
            return
        size = path.stat().st_size
        first, _, last = self.headers.get("Range", "").removeprefix("bytes=").partition("-")
        start, end = (int(first), min(size, int(last) + 1) if last else size) if first else (0, size)
        self.send_response(206 if first else 200)
        self.send_header("Content-Length", str(end - start))
        if first:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if not body:
            return
        with path.open("rb") as f:
            f.seek(start)
            data = f.read(end - start)
        with store.lock:  # counted before the client can have it
            store.sent += len(data)
            store.requests += 1
        self.wfile.write(data)


class BufferedReader:
    """Members read through an fsspec file per shard, kept open across batches, one member after another."""

    def __init__(self) -> None:
        self.files: dict[str, Any] = {}

    def fetch(self, spans: list[tuple[str, int, int]]) -> list[bytes]:
        import fsspec

        out = []
        for url, start, end in spans:
            if url not in self.files:
                self.files[url] = fsspec.open(url, "rb").open()
            f = self.files[url]
            f.seek(start)
            out.append(f.read(end - start))
        return out

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def read_batches(store: Store, index_url: str, batch_seconds: float, delays: list[float]) -> list[dict[str, Any]]:
    """Each round trip in `delays`: the epoch's training batches read by the buffered and the exact reader in turn
    (their order alternating batch by batch); a row per (round trip, reader) with bytes, requests and time."""
    from speechscale.data.shard_stream import ShardUnits
    from speechscale.data.shards import ShardIndex, ShardReader

    index = ShardIndex(index_url)
    units = ShardUnits(index, batch_seconds=batch_seconds, max_batch_size=64, seed=0)
    batches = [units.unit(1, k) for k in range(units.num_units(1))]

    def spans(ids: list[int]) -> list[tuple[str, int, int]]:
        out = []
        for i in ids:
            s, m = index.locate(i)
            _, _, start, end = index.members(s)[m]
            out.append((index.shards[s].url, start, end))
        return out

    rows = []
    for delay in delays:
        store.delay = delay
        buffered = BufferedReader()
        readers = {"buffered": buffered.fetch, "exact": ShardReader().fetch}
        seen: dict[str, dict[str, Any]] = {name: {"seconds": [], "sent": 0, "requests": 0, "member_bytes": 0}
                                           for name in readers}
        for k, ids in enumerate(batches):
            batch = spans(ids)
            order = list(readers) if k % 2 == 0 else list(readers)[::-1]
            for name in order:
                sent, requests = store.sent, store.requests
                t0 = time.perf_counter()
                got = readers[name](batch)
                took = time.perf_counter() - t0
                assert [len(g) for g in got] == [end - start for _, start, end in batch], name  # whole members
                s = seen[name]
                s["seconds"].append(took)
                s["sent"] += store.sent - sent
                s["requests"] += store.requests - requests
                s["member_bytes"] += sum(end - start for _, start, end in batch)
        buffered.close()
        for name, s in seen.items():
            rows.append({"round_trip_s": delay, "reader": name, "batches": len(batches),
                         "utterances": sum(len(b) for b in batches), "member_bytes": s["member_bytes"],
                         "sent_bytes": s["sent"], "requests": s["requests"],
                         "bytes_ratio": round(s["sent"] / s["member_bytes"], 3),
                         "ms_per_batch": round(1000 * statistics.median(s["seconds"]), 1),
                         "ms_min_max": [round(1000 * min(s["seconds"]), 1), round(1000 * max(s["seconds"]), 1)]})
            print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    from speechscale.bench.audio import bench_manifest
    from speechscale.bench.harness import write_json
    from speechscale.bench.loader import bench_loader_interleaved, flac_corpus
    from speechscale.data.shards import write_shards

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--utterances", type=int, default=600)
    p.add_argument("--clip-seconds", type=float, default=12.3, help="LibriSpeech's mean utterance")
    p.add_argument("--shard-size", type=int, default=100, help="utterances per shard")
    p.add_argument("--batch-seconds", type=float, default=400.0, help="padded audio seconds per training batch")
    p.add_argument("--delays", default="0,0.02,0.05", help="round trips (s) the batches are read at")
    p.add_argument("--loader-delay", type=float, default=0.02, help="the round trip the loader is timed at")
    p.add_argument("--workers", default="0,2", help="loader workers")
    p.add_argument("--repeats", type=int, default=3, help="loader passes per variant (interleaved)")
    p.add_argument("--out", default="docs/figures/bench-all/loader-remote.json")
    args = p.parse_args(argv)
    pin_commit()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        manifest = flac_corpus(bench_manifest(None, tmp, minutes=2.0), tmp / "flac", 16000, args.utterances,
                               args.clip_seconds)
        write_shards(str(manifest), tmp / "shards", shard_size=args.shard_size)
        store = Store((tmp / "shards").resolve())
        threading.Thread(target=store.serve_forever, daemon=True).start()
        try:
            remote = f"{store.url}/index.jsonl"
            reads = read_batches(store, remote, args.batch_seconds, [float(x) for x in args.delays.split(",")])
            store.delay = args.loader_delay
            local = str(tmp / "shards" / "index.jsonl")
            rows = bench_loader_interleaved([local, remote], [int(w) for w in args.workers.split(",")], [False],
                                            batch_seconds=args.batch_seconds, repeats=args.repeats)
        finally:
            store.shutdown()
            store.server_close()
    for row, where in zip(rows, ["local"] * (len(rows) // 2) + ["http"] * (len(rows) // 2)):
        row["where"] = where
        print(row, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {"reads": reads, "loader": rows, "loader_round_trip_s": args.loader_delay}
    write_json(out, results, ["python", "-m", "benchmarks.remote_shards", *sys.argv[1:]],
               round(time.monotonic() - started, 1), {**vars(args), "goals": GOALS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
