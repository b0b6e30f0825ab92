"""The loader benchmark: real flac files through the training DataLoader, with and without workers."""
import json

import pytest

from speechscale.bench.loader import bench_loader, flac_corpus
from tests.conftest import shared


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


def test_a_loader_that_ships_waveforms_counts_the_frames_the_step_will_compute(tmp_path):
    """--features step (features.device): the loader's batches hold the audio; the frames the step computes from
    their lengths are the loader path's, and the rows say where the features were made."""
    manifest = flac_corpus(shared("fsdd", "manifest.jsonl"), tmp_path, limit=12)
    rows = bench_loader(manifest, workers=[0], augment=[False], features=("loader", "step"))
    assert [r["features"] for r in rows] == ["loader", "step"]
    assert rows[0]["feature_frames"] == rows[1]["feature_frames"] > 0 and rows[1]["x_realtime"] > 1


def test_bench_loader_cli_times_synthesized_speech_without_a_manifest(tmp_path, cli):
    proc = cli("bench", "loader", "--workers", "0", "--augment", "off", "--limit", "12", "--clip-seconds", "4")
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert len(rows) == 1 and rows[0]["workers"] == 0 and rows[0]["utterances"] == 12
    assert rows[0]["audio_seconds"] >= 12 * 4  # sentences joined into utterances of at least 4 s


def test_bench_loader_refuses_corpus_flags_beside_a_manifest(cli):
    """--limit and --clip-seconds shape the synthesized corpus: beside --manifest they would be ignored."""
    m = str(shared("fsdd", "manifest.jsonl"))
    for flags in (["--limit", "600"], ["--clip-seconds", "12"], ["--limit", "600", "--clip-seconds", "12"]):
        res = cli("bench", "loader", "--manifest", m, *flags, check=False)
        assert res.returncode == 2 and "--manifest is read as it is" in res.stderr, res.stderr
        assert all(f in res.stderr for f in flags[::2]) and len(res.stderr.strip().splitlines()) == 1
    res = cli("bench", "loader", "--manifest", "nowhere.jsonl", check=False)
    assert res.returncode == 2 and "nowhere.jsonl: no such manifest" in res.stderr


def test_shards_feed_the_loader_the_same_features_as_loose_files(tmp_path):
    from speechscale.data.shards import write_shards

    manifest = flac_corpus(shared("fsdd", "manifest.jsonl"), tmp_path, limit=6, clip_seconds=2.0)
    durations = [json.loads(x)["duration"] for x in manifest.read_text().splitlines()]
    assert len(durations) == 6 and min(durations) >= 2.0  # clips joined into longer utterances
    write_shards(str(manifest), tmp_path / "sh", shard_size=4)
    files = bench_loader(manifest, workers=[0], augment=[False])
    shards = bench_loader(tmp_path / "sh" / "index.jsonl", workers=[0, 1], augment=[False])
    assert [r["source"] for r in files + shards] == ["files", "shards", "shards"]
    assert {r["feature_frames"] for r in files + shards} == {files[0]["feature_frames"]}
    assert {r["utterances"] for r in shards} == {6}


@pytest.mark.slow
def test_loader_memory_stays_flat_with_shards_and_grows_with_a_manifest(tmp_path):
    """Measured RSS of fresh loader processes: 20x the utterances cost a shard stream almost nothing more."""
    from speechscale.bench.memory import bench_memory

    rows = bench_memory(tmp_path, [1000, 20000], ["shards", "manifest"], batches=5, per_shard=100,
                        manifest=shared("fsdd", "manifest.jsonl"))
    # the listing (held before the first batch), not the peak: the batches' transient peak varies by ~10 MB
    # from run to run (CI saw 29 and 41 MB for the same shard stream)
    mb = {(r["source"], r["utterances"]): r["listing_mb"] for r in rows}
    assert all(r["utterances_read"] > 0 and r["data_mb"] >= r["listing_mb"] - 1 for r in rows)
    assert mb[("shards", 20000)] - mb[("shards", 1000)] < 2
    assert mb[("manifest", 20000)] - mb[("manifest", 1000)] > 10


def test_bench_loader_reads_a_shard_index_as_it_is_from_a_folder_or_over_http(tmp_path, cli):
    """`--manifest` may be a shard index, local or a URL (a store's own latency): read as it is, the same features
    as from the folder; beside it, --source (which writes shards of a manifest) is an error."""
    import threading

    from speechscale.data.shards import write_shards
    from tests.archives import Archives

    manifest = flac_corpus(shared("fsdd", "manifest.jsonl"), tmp_path, limit=6, clip_seconds=2.0)
    write_shards(str(manifest), tmp_path / "sh", shard_size=4)
    server = Archives({p.name: p.read_bytes() for p in (tmp_path / "sh").iterdir()})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rows = {}
        for where in (str(tmp_path / "sh"), f"{server.url}/index.jsonl"):
            proc = cli("bench", "loader", "--manifest", where, "--workers", "0", "--augment", "off")
            rows[where] = [json.loads(x) for x in proc.stdout.strip().splitlines()]
        (local,), (remote,) = rows.values()
        assert local["source"] == remote["source"] == "shards" and local["utterances"] == remote["utterances"] == 6
        assert remote["feature_frames"] == local["feature_frames"] > 0
        assert sum(1 for name, rng in server.requests if name.endswith(".tar") and rng) == 6  # a ranged read each
    finally:
        server.shutdown()
        server.server_close()
    res = cli("bench", "loader", "--manifest", str(tmp_path / "sh"), "--source", "both", check=False)
    assert res.returncode == 2 and "is a shard index, read as it is" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
