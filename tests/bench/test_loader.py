"""The loader benchmark: real flac files through the training DataLoader, with and without workers."""
import json

from speechscale.bench.loader import bench_loader, flac_corpus
from tests.conftest import run_cli, shared


def test_loader_throughput_by_workers_and_augmentation(tmp_path):
    manifest = flac_corpus(shared("fsdd", "manifest.jsonl"), tmp_path, limit=24)
    rows = bench_loader(manifest, workers=[0, 1], augment=[False, True])
    assert [(r["workers"], r["augment"]) for r in rows] == [(0, False), (1, False), (0, True), (1, True)]
    total = sum(json.loads(x)["duration"] for x in manifest.read_text().splitlines())
    for r in rows:
        assert r["utterances"] == 24 and abs(r["audio_seconds"] - total) < 0.1
        assert r["feature_frames"] > 0 and r["x_realtime"] > 1  # faster than real time on any machine
    plain = {r["workers"]: r["feature_frames"] for r in rows if not r["augment"]}
    assert plain[0] == plain[1]  # the same features, whoever computes them


def test_bench_loader_cli_prints_json_lines(tmp_path):
    shared("fsdd", "manifest.jsonl")
    proc = run_cli("bench", "loader", "--workers", "0", "--augment", "off", "--limit", "12", timeout=300)
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert len(rows) == 1 and rows[0]["workers"] == 0 and rows[0]["utterances"] == 12
