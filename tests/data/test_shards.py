"""Tar shards: write -> read round trip on real recordings, other tools read them, and bad shards are named."""
import json
import shutil
import tarfile
import zlib

import fsspec
import numpy as np
import pytest
import torch

from speechscale.components import build_components
from speechscale.config import Config, DataConfig, FeatureConfig
from speechscale.data.audio import load_audio
from speechscale.data.loading import LabelCheck, shard_source
from speechscale.data.manifest import read_manifest
from speechscale.data.shards import ShardError, ShardIndex, is_shard_index, write_shards
from tests.conftest import main_cli, shared

RATE = 8000


def _manifest(tmp_path, n=11):
    """The first `n` FSDD recordings (real speech, 8 kHz wav) with absolute paths."""
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:n]]
    for r in rows:
        r["audio_filepath"] = str(fsdd / r["audio_filepath"])
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _source(index, **data):
    cfg = Config(data=DataConfig(batch_seconds=4, **data), features=FeatureConfig(sample_rate=RATE))
    comps = build_components(cfg)
    return shard_source(str(index), comps, cfg.data, None, 0)


def _items(dataset):
    return {i: dataset[i] for i in range(len(dataset))}


@pytest.mark.parametrize("codec", [None, "flac"])
def test_write_then_read_gives_the_same_samples_and_texts(tmp_path, codec):
    manifest = _manifest(tmp_path)
    head = write_shards(str(manifest), tmp_path / "sh", shard_size=4, codec=codec)
    assert head["shards"] == 3 and head["utterances"] == 11  # uneven: 4 + 4 + 3
    assert is_shard_index(str(tmp_path / "sh")) and is_shard_index(str(tmp_path / "sh" / "index.jsonl"))
    assert not is_shard_index(str(manifest))
    _, dataset, report = _source(tmp_path / "sh")
    utts, _ = read_manifest(manifest)
    assert report.kept == 11 and len(dataset) == 11
    for i, u in enumerate(utts):
        wav, text, _, duration = dataset._load(i)
        want = load_audio(u.audio_path, RATE)
        assert text == u.text and duration == pytest.approx(u.duration, abs=1e-3)
        if codec is None:
            np.testing.assert_array_equal(wav, want)  # the file's own bytes
        else:
            assert wav.shape == want.shape and np.abs(wav - want).max() <= 1 / 32768  # 16-bit FLAC
    items = _items(dataset)
    assert all("feats" in it for it in items.values())


def test_flac_shards_take_the_audio_of_compressed_containers(tmp_path):
    from tests.media import encode

    wav = load_audio(shared("fsdd", "recordings", "0_jackson_0.wav"), RATE)
    encode(wav, RATE, tmp_path / "a.m4a")
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio_filepath": "a.m4a", "duration": len(wav) / RATE,
                                                  "text": "zero"}) + "\n")
    head = write_shards(str(tmp_path / "m.jsonl"), tmp_path / "sh", codec="flac")
    assert head["utterances"] == 1 and not head["skipped"]
    _, dataset, _ = _source(tmp_path / "sh")
    got, text, _, _ = dataset._load(0)
    want = load_audio(tmp_path / "a.m4a", RATE)  # the container's audio, 16-bit
    assert text == "zero" and got.shape == want.shape and np.abs(got - want).max() <= 1 / 32768


def test_webdataset_reads_the_shards(tmp_path):
    import webdataset  # a dev dependency: another tool reads our shards
    write_shards(str(_manifest(tmp_path, 6)), tmp_path / "sh", shard_size=4)
    urls = [str(p) for p in sorted((tmp_path / "sh").glob("shard-*.tar"))]
    samples = list(webdataset.WebDataset(urls, shardshuffle=False))
    utts, _ = read_manifest(_manifest(tmp_path, 6))
    assert [json.loads(s["json"])["text"] for s in samples] == [u.raw_text for u in utts]
    assert all("wav" in s for s in samples)


def test_cli_shards_a_manifest(tmp_path, capsys):
    code, out, err = main_cli(capsys, "data", "shard", str(_manifest(tmp_path, 5)), "--out", str(tmp_path / "o"),
                              "--shard-size", "2", "--codec", "flac")
    assert code == 0, err
    head = json.loads(out)
    assert head["shards"] == 3 and head["utterances"] == 5 and head["codec"] == "flac"
    with tarfile.open(tmp_path / "o" / "shard-000002.tar") as tar:
        assert [m.name.split(".")[1] for m in tar.getmembers()] == ["json", "flac"]


def test_a_missing_or_resized_shard_is_one_clear_error_before_work(tmp_path):
    write_shards(str(_manifest(tmp_path, 6)), tmp_path / "sh", shard_size=2)
    shutil.copy(tmp_path / "sh" / "shard-000001.tar", tmp_path / "keep.tar")
    (tmp_path / "sh" / "shard-000001.tar").unlink()
    with pytest.raises(ShardError, match="shard-000001.tar is missing"):
        _source(tmp_path / "sh")
    data = (tmp_path / "keep.tar").read_bytes()
    (tmp_path / "sh" / "shard-000001.tar").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(ShardError, match="shard-000001.tar has .* bytes, the index says"):
        _source(tmp_path / "sh")
    with pytest.raises(ShardError, match="not a shard index"):
        ShardIndex(str(_manifest(tmp_path, 2)))
    (tmp_path / "notes.txt").write_text("not a manifest\n")
    with pytest.raises(ShardError, match="notes.txt: no utterance to shard .*1 malformed JSON"):  # before any file
        write_shards(str(tmp_path / "notes.txt"), tmp_path / "never")
    assert not (tmp_path / "never").exists()
    with pytest.raises(ShardError, match="not found"):
        ShardIndex(str(tmp_path / "nowhere" / "index.jsonl"))
    with pytest.raises(ShardError, match="cannot be read"):
        ShardIndex("memory://no/such/index.jsonl")


def test_corrupt_truncated_and_misplaced_members_are_skipped_and_named(tmp_path, caplog):
    write_shards(str(_manifest(tmp_path, 6)), tmp_path / "sh", shard_size=3)
    index = ShardIndex(str(tmp_path / "sh"))
    key = index.members(0)[1][0]
    path = tmp_path / "sh" / "shard-000000.tar"
    raw = bytearray(path.read_bytes())
    audio_at = raw.index(f"{key}.wav".encode()) + 512  # the audio member's data
    raw[audio_at:audio_at + 64] = b"\x00" * 64  # the RIFF header gone: not audio any more
    path.write_bytes(bytes(raw))
    _, dataset, _ = _source(tmp_path / "sh")
    items = _items(dataset)
    assert items[1] == {"skip": "bad_audio"} and all("feats" in items[i] for i in (0, 2, 3, 4, 5))
    assert f"shard-000000.tar member {key}: its bytes are not those written" in caplog.text
    # shards swapped after the check (same sizes): the members are not where the index says
    a, b = tmp_path / "sh" / "shard-000000.tar", tmp_path / "sh" / "shard-000001.tar"
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    assert _items(dataset)[4] == {"skip": "bad_audio"}
    assert "not in the shard where the index says" in caplog.text
    b.write_bytes(db[:2000])  # truncated while a run reads it: skipped, not a crash
    assert _items(dataset)[5] == {"skip": "bad_audio"}


@pytest.mark.parametrize("codec", [None, "flac"])
def test_bytes_that_rot_after_writing_are_caught_by_the_index_checksums(tmp_path, caplog, codec):
    """Zeroed pages inside an audio member still decode (as silence) and a flipped letter in a transcript still
    reads: only the CRC-32 the index holds for each utterance's bytes tells them from what was written. An index
    without checksums (another tool's tars) reads them as before; a malformed one is refused when it loads."""
    write_shards(str(_manifest(tmp_path, 6)), tmp_path / "sh", shard_size=3, codec=codec)
    index = ShardIndex(str(tmp_path / "sh"))
    fs = fsspec.filesystem("memory")
    try:
        write_shards(str(_manifest(tmp_path, 6)), "memory://rot/corpus", shard_size=3, codec=codec)
        for s in range(2):  # each span's bytes as written, recomputed from the files (a local one, an upload)
            members, crcs = index.entries(s)
            for tar in (tmp_path / "sh" / f"shard-00000{s}.tar").read_bytes(), fs.cat(f"/rot/corpus/shard-00000{s}.tar"):
                assert crcs == [zlib.crc32(tar[start:end]) for _, _, start, end in members]
        assert ShardIndex("memory://rot/corpus/index.jsonl").entries(1)[1] == index.entries(1)[1]
    finally:
        fs.rm("/rot", recursive=True)
    before = _items(_source(tmp_path / "sh")[1])
    path = tmp_path / "sh" / "shard-000000.tar"
    raw = bytearray(path.read_bytes())
    (key, *_, end), (key2, *_) = index.members(0)[1], index.members(0)[2]
    raw[end - 2048:end - 1024] = bytes(1024)  # inside the audio: a wav still decodes
    letter = raw.index(b'"text": "', raw.index(f"{key2}.json".encode())) + 9
    raw[letter] = ord("q") if raw[letter] != ord("q") else ord("z")  # one letter of the transcript
    path.write_bytes(bytes(raw))
    items = _items(_source(tmp_path / "sh")[1])
    assert items[1] == items[2] == {"skip": "bad_audio"}
    assert all(torch.equal(items[i]["feats"], before[i]["feats"]) for i in (0, 3, 4, 5))
    assert f"member {key}: its bytes are not those written" in caplog.text and f"member {key2}: its" in caplog.text
    lines = (tmp_path / "sh" / "index.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines[1:]]
    for r in rows:
        del r["crc32"]
    (tmp_path / "sh" / "index.jsonl").write_text("\n".join([lines[0], *map(json.dumps, rows)]) + "\n")
    unchecked = _items(_source(tmp_path / "sh")[1])
    assert all("feats" in unchecked[i] for i in range(6) if codec is None or i != 1)  # a FLAC frame checks itself
    assert unchecked[2]["text"] != before[2]["text"]  # what a reader without the checksums trains on
    rows[0]["crc32"] = ["0"] * 3
    (tmp_path / "sh" / "index.jsonl").write_text("\n".join([lines[0], *map(json.dumps, rows)]) + "\n")
    with pytest.raises(ShardError, match="checksums not one integer each"):
        ShardIndex(str(tmp_path / "sh"))


def test_data_verify_names_the_damaged_utterances_before_a_run(tmp_path, capsys):
    """`data verify` reads every shard (in order, or N at a time) and names each utterance whose bytes are not those
    written; exit status 1 then, 0 on a sound corpus; an index without checksums counts its utterances unchecked;
    a shard missing is one line (status 2) before any is read."""
    write_shards(str(_manifest(tmp_path, 7)), tmp_path / "sh", shard_size=3)
    for jobs in ("1", "2"):
        code, out, err = main_cli(capsys, "-q", "data", "verify", str(tmp_path / "sh"), "--jobs", jobs)
        assert code == 0, err
        assert {k: v for k, v in json.loads(out).items() if k != "index"} == {
            "shards": 3, "utterances": 7, "checked": 7, "unchecked": 0, "damaged": 0, "first_damaged": []}
    index = ShardIndex(str(tmp_path / "sh"))
    for shard, member in ((0, 2), (2, 0)):
        path = tmp_path / "sh" / f"shard-00000{shard}.tar"
        raw = bytearray(path.read_bytes())
        raw[index.members(shard)[member][3] - 600] ^= 1  # one bit of the audio's last block
        path.write_bytes(bytes(raw))
    for jobs in ("1", "2"):
        code, out, _ = main_cli(capsys, "-q", "data", "verify", str(tmp_path / "sh" / "index.jsonl"), "--jobs", jobs)
        got = json.loads(out)
        assert code == 1 and got["damaged"] == 2 and got["checked"] == 7
        assert [x.rsplit("/", 1)[1] for x in got["first_damaged"]] == [
            f"shard-000000.tar member {index.members(0)[2][0]}", f"shard-000002.tar member {index.members(2)[0][0]}"]
    lines = (tmp_path / "sh" / "index.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines[1:]]
    del rows[1]["crc32"]
    (tmp_path / "sh" / "index.jsonl").write_text("\n".join([lines[0], *map(json.dumps, rows)]) + "\n")
    code, out, err = main_cli(capsys, "-q", "data", "verify", str(tmp_path / "sh"))
    assert code == 1 and {k: json.loads(out)[k] for k in ("checked", "unchecked", "damaged")} == {
        "checked": 4, "unchecked": 3, "damaged": 2}
    assert "note: 3 utterances have no checksum in the index" in err and "data index --checksums" in err
    (tmp_path / "sh" / "shard-000001.tar").unlink()
    code, out, err = main_cli(capsys, "-q", "data", "verify", str(tmp_path / "sh"))
    assert code == 2 and not out and err.count("\n") == 1 and "shard-000001.tar" in err, err


def test_shards_stream_from_an_fsspec_url(tmp_path):
    write_shards(str(_manifest(tmp_path, 5)), tmp_path / "sh", shard_size=2)
    fs = fsspec.filesystem("memory")
    for p in (tmp_path / "sh").iterdir():
        fs.pipe(f"/corpus/{p.name}", p.read_bytes())
    try:
        units, dataset, report = _source("memory://corpus/index.jsonl")
        assert report.kept == 5 and units.epoch_samples(0) == 5
        local = _items(_source(tmp_path / "sh")[1])
        remote = _items(dataset)
        for i in range(5):
            assert remote[i]["text"] == local[i]["text"]
            assert (remote[i]["feats"] == local[i]["feats"]).all()
    finally:
        fs.rm("/corpus", recursive=True)


def test_a_batch_streams_over_http_in_exact_ranges_all_at_once(tmp_path):
    """Shards behind a real HTTP server whose every answer takes 0.3 s: a batch's members come in one ranged
    request each, all in flight at once, and only their bytes cross the wire (no read-ahead into the shard), in the
    main process and in a loader worker alike; the items equal the local index's. A request that fails for a while
    (503) is asked again; a member the server cannot give is skipped and counted, the rest of its batch kept."""
    import threading

    import torch

    from tests.archives import Archives

    write_shards(str(_manifest(tmp_path, 8)), tmp_path / "sh", shard_size=3)
    server = Archives({p.name: p.read_bytes() for p in (tmp_path / "sh").iterdir()}, delay=0.3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, dataset, report = _source(f"{server.url}/index.jsonl")
        assert report.kept == 8
        spans = [dataset._span(i) for i in range(8)]
        local = _items(_source(tmp_path / "sh")[1])
        keys = [(0, i) for i in range(8)]
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=[keys], num_workers=1, collate_fn=list)
        for name, read in [("main process", lambda: dataset.__getitems__(keys)), ("worker", lambda: next(iter(loader)))]:
            server.requests.clear()
            server.sent = server.most_at_once = 0
            items = read()
            assert server.sent == sum(sp.end - sp.start for sp in spans), name
            assert sorted(r for _, r in server.requests) == sorted(f"bytes={sp.start}-{sp.end - 1}" for sp in spans), name
            assert server.most_at_once == 8, name
            for i, it in enumerate(items):
                assert it["text"] == local[i]["text"] and torch.equal(it["feats"], local[i]["feats"]), (name, i)
        server.requests.clear()
        server.failing = 3  # a store's passing trouble: asked again, nothing lost
        items = dataset.__getitems__(keys)
        assert all(torch.equal(it["feats"], local[i]["feats"]) for i, it in enumerate(items))
        assert len(server.requests) == 8 + 3
        server.requests.clear()
        del server.files["shard-000001.tar"]  # members 3, 4, 5: missing is not asked again
        items = dataset.__getitems__(keys)
        assert [it.get("skip") for it in items] == [None] * 3 + ["bad_audio"] * 3 + [None] * 2
        assert sum(1 for name, _ in server.requests if name == "shard-000001.tar") == 3
        assert all(torch.equal(items[i]["feats"], local[i]["feats"]) for i in (0, 1, 2, 6, 7))
        assert dataset[0]["text"] == local[0]["text"]  # one item alone: its own request
    finally:
        server.shutdown()
        server.server_close()


def test_a_store_that_answers_nothing_for_a_while_costs_the_batch_time_not_its_members(tmp_path, monkeypatch):
    """Every request of a batch failing past the short retries (a store that is down) is asked again after the
    outage waits (shortened here), and the batch comes whole once the store answers."""
    import threading

    from speechscale.data import shards
    from tests.archives import Archives

    monkeypatch.setattr(shards, "OUTAGE_S", (0.2, 0.2))
    write_shards(str(_manifest(tmp_path, 4)), tmp_path / "sh", shard_size=2)
    server = Archives({p.name: p.read_bytes() for p in (tmp_path / "sh").iterdir()})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, dataset, _ = _source(f"{server.url}/index.jsonl")
        local = _items(_source(tmp_path / "sh")[1])
        server.requests.clear()
        server.failing = 4 * (1 + len(shards.RETRY_S) + 1)  # every round up to the first outage wait fails
        items = dataset.__getitems__([(0, i) for i in range(4)])
        assert all(it.get("skip") is None and it["text"] == local[i]["text"] for i, it in enumerate(items))
        assert len(server.requests) == 4 * (1 + len(shards.RETRY_S) + 2)
        server.requests.clear()
        server.failing = 4 * (1 + len(shards.RETRY_S) + 2)  # down past the last wait: skipped and counted
        assert [it.get("skip") for it in dataset.__getitems__([(0, i) for i in range(4)])] == ["bad_audio"] * 4
    finally:
        server.shutdown()
        server.server_close()


def test_a_store_down_past_its_retries_stops_training_where_it_was_and_a_resume_goes_on(tmp_path, monkeypatch):
    """Training from shards over HTTP: the store stops answering after step 2, for longer than the read's retries
    and outage waits (shortened here). The run stops after data.max_unreadable_batches batches with nothing read,
    its checkpoint at step 2; resumed once the store is back, it trains the same steps as a run that never lost it."""
    import threading

    import torch

    from speechscale.data import shards
    from speechscale.recipe import load_recipe
    from speechscale.training.recovery import DataUnreadable
    from speechscale.training.trainer import Trainer
    from tests.archives import Archives

    monkeypatch.setattr(shards, "RETRY_S", (0.01,))
    monkeypatch.setattr(shards, "OUTAGE_S", (0.05,))
    manifest = _manifest(tmp_path, 8)
    write_shards(str(manifest), tmp_path / "sh", shard_size=3)
    server = Archives({p.name: p.read_bytes() for p in (tmp_path / "sh").iterdir()})
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def trainer(out, *more):
        return Trainer(load_recipe(None, [f"data.train_manifest={server.url}/index.jsonl", f"data.val_manifest={manifest}",
                                          f"trainer.out_dir={out}", "trainer.progress=false", "trainer.max_epochs=2",
                                          "data.batch_seconds=2", "data.max_unreadable_batches=2",
                                          "features.sample_rate=8000", "model.overrides={rnn_hidden: 32, rnn_layers: 1}",
                                          *more]))

    try:
        straight = trainer(tmp_path / "straight")
        steps = straight.fit()["step"]
        failing = trainer(tmp_path / "failing")
        step = failing.train_step

        def step_then_store_down(micro):
            loss = step(micro)
            if failing.state.step == 2:
                server.failing = 10**6
            return loss

        failing.train_step = step_then_store_down
        with pytest.raises(DataUnreadable, match="2 batches in a row had no utterance that could be read"):
            failing.fit()
        assert (failing.state.step, failing.state.counters["bad_audio"]) == (2, 0)
        server.failing = 0
        resumed = trainer(tmp_path / "failing", "trainer.resume=auto")
        assert resumed.state.step == 2
        assert resumed.fit()["step"] == steps > 4 and resumed.state.counters["bad_audio"] == 0
        for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    finally:
        server.shutdown()
        server.server_close()


def test_an_index_over_http_checks_its_shards_sizes_at_once_and_names_a_missing_one(tmp_path):
    """Before work starts every shard's size is asked, all at once from a store (one round trip, not one a shard);
    a missing shard or a wrong size is one error naming that shard."""
    import threading

    from tests.archives import Archives

    write_shards(str(_manifest(tmp_path, 8)), tmp_path / "sh", shard_size=1)
    server = Archives({p.name: p.read_bytes() for p in (tmp_path / "sh").iterdir()}, delay=0.3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = ShardIndex(f"{server.url}/index.jsonl")
        assert len(index.shards) == 8
        server.most_at_once = 0
        index.check()
        assert server.most_at_once == 8
        server.files["shard-000005.tar"] += b"\0" * 512
        with pytest.raises(ShardError, match="shard-000005.tar has .* bytes, the index says"):
            index.check()
        del server.files["shard-000006.tar"]
        with pytest.raises(ShardError, match="shard .*shard-000006.tar is missing"):
            index.check()
    finally:
        server.shutdown()
        server.server_close()


def test_shards_are_written_to_a_url_as_they_are_to_a_folder(tmp_path):
    """`data shard --out memory://...` (any fsspec URL): each shard is uploaded as it is written, byte for byte the
    tar a local folder gets, with the same index."""
    manifest = _manifest(tmp_path, 5)
    write_shards(str(manifest), tmp_path / "sh", shard_size=2, codec="flac")
    fs = fsspec.filesystem("memory")
    try:
        head = write_shards(str(manifest), "memory://remote/corpus", shard_size=2, codec="flac")
        assert head["utterances"] == 5 and head["shards"] == 3
        for p in sorted((tmp_path / "sh").iterdir()):
            assert fs.cat(f"/remote/corpus/{p.name}") == p.read_bytes(), p.name
        remote = _items(_source("memory://remote/corpus/index.jsonl")[1])
        local = _items(_source(tmp_path / "sh")[1])
        assert all((remote[i]["feats"] == local[i]["feats"]).all() for i in range(5))
    finally:
        fs.rm("/remote", recursive=True)


def test_transcripts_are_checked_as_they_are_read(tmp_path):
    manifest = _manifest(tmp_path, 3)
    rows = [json.loads(x) for x in manifest.read_text().splitlines()]
    rows[0]["text"] = "zero ж"  # outside the alphabet
    rows[1]["text"] = "one " * 40  # far longer than 0.5 s of output frames allow
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_shards(str(manifest), tmp_path / "sh")
    _, dataset, _ = _source(tmp_path / "sh")
    items = _items(dataset)
    assert items[0] == items[1] == {"skip": "bad_text"} and "feats" in items[2]
    assert isinstance(dataset.check, LabelCheck)


def test_training_streams_shards_from_s3(s3, tmp_path):
    """A real S3-compatible server (moto) on loopback: ranged reads through s3fs, in a loader worker."""
    from speechscale.recipe import load_recipe
    from speechscale.training.trainer import Trainer

    manifest = _manifest(tmp_path, 8)
    write_shards(str(manifest), tmp_path / "sh", shard_size=3)
    fs = fsspec.filesystem("s3")
    for p in (tmp_path / "sh").iterdir():
        fs.pipe(f"ckpts/corpus/{p.name}", p.read_bytes())
    remote = _items(_source("s3://ckpts/corpus/index.jsonl")[1])
    local = _items(_source(tmp_path / "sh")[1])
    assert [remote[i]["text"] for i in range(8)] == [local[i]["text"] for i in range(8)]
    cfg = load_recipe(None, ["data.train_manifest=s3://ckpts/corpus/index.jsonl", f"data.val_manifest={manifest}",
                             f"trainer.out_dir={tmp_path}/run", "trainer.progress=false", "trainer.max_steps=3",
                             "data.num_workers=1", "data.batch_seconds=4", "features.sample_rate=8000",
                             "model.overrides={rnn_hidden: 32, rnn_layers: 1}"])
    summary = Trainer(cfg).fit()
    assert summary["step"] == 3 and summary["bad_audio"] == 0 and summary["train_utterances"] == 8
    from speechscale.storage.checkpoints import load_checkpoint

    said = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["card"]["training_data"]["seconds"]
    durations = [json.loads(x)["duration"] for x in manifest.read_text().splitlines()]  # what the card's lengths read
    for key, want in (("median", np.quantile(durations, 0.5, method="inverted_cdf")),
                      ("p90", np.quantile(durations, 0.9, method="inverted_cdf")), ("max", max(durations))):
        assert said[key] == pytest.approx(want, abs=0.011), key
    with pytest.raises(ShardError, match="cannot be read"):
        ShardIndex("s3://no-such-bucket/index.jsonl")


def test_an_index_names_shards_under_its_own_folder_unless_external_ones_are_allowed(tmp_path):
    write_shards(str(_manifest(tmp_path, 4)), tmp_path / "sh", shard_size=2)
    lines = (tmp_path / "sh" / "index.jsonl").read_text().splitlines()
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    for name, target in [("abs", str(tmp_path / "sh" / "shard-000000.tar")), ("up", "../sh/shard-000000.tar"),
                         ("url", "http://169.254.169.254/latest/meta-data")]:
        head = json.loads(lines[1])
        head["shard"] = target
        (elsewhere / f"{name}.jsonl").write_text("\n".join([lines[0], json.dumps(head)]) + "\n")
        with pytest.raises(ShardError, match="outside the index's folder.*allow_external_shards"):
            ShardIndex(str(elsewhere / f"{name}.jsonl"))
    trusted = ShardIndex(str(elsewhere / "abs.jsonl"), allow_external=True)
    assert trusted.shards[0].url == str(tmp_path / "sh" / "shard-000000.tar")
    cfg = Config(data=DataConfig(train_manifest=str(elsewhere / "up.jsonl")))
    with pytest.raises(ShardError, match="outside"):  # the recipe's key is the switch
        shard_source(str(elsewhere / "up.jsonl"), build_components(cfg), cfg.data, None, 0)


def test_an_index_whose_counts_disagree_with_its_members_is_refused_when_it_loads(tmp_path):
    write_shards(str(_manifest(tmp_path, 4)), tmp_path / "sh", shard_size=2)
    path = tmp_path / "sh" / "index.jsonl"
    lines = path.read_text().splitlines()
    head = json.loads(lines[1])
    head["utterances"] = 50  # the run used to die with an IndexError hours in
    path.write_text("\n".join([lines[0], json.dumps(head), *lines[2:]]) + "\n")
    with pytest.raises(ShardError, match="says 50 utterances but lists 2 members"):
        ShardIndex(str(path))


def test_sharding_holds_one_shard_in_memory_however_long_the_manifest(tmp_path):
    """A corpus of tens of millions of lines must not become as many Python objects: the manifest is read a shard
    at a time and the index's lines wait on disk. Four times the lines, the same peak (Python's own allocations,
    tracemalloc); holding the utterances took about 0.8 KB each here."""
    import tracemalloc

    import soundfile as sf

    sf.write(tmp_path / "a.wav", np.zeros(80, dtype=np.int16), 8000)  # 10 ms
    row = {"audio_filepath": "a.wav", "duration": 0.01, "speaker": "s1"}
    peaks = []
    for n in (1000, 4000):
        manifest = tmp_path / f"m{n}.jsonl"
        manifest.write_text("".join(json.dumps({**row, "text": f"utterance number {i} of the corpus"}) + "\n"
                                    for i in range(n)))
        tracemalloc.start()
        try:
            head = write_shards(str(manifest), tmp_path / f"out{n}", shard_size=100)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert head["utterances"] == n and ShardIndex(str(tmp_path / f"out{n}")).utterances == n
    assert peaks[1] < peaks[0] + 500_000, peaks  # 3,000 more utterances held would be ~2.4 MB


def test_a_server_that_ignores_ranged_requests_is_named_and_not_asked_again(tmp_path):
    """A whole file where a span was asked (a server without ranges): the span fails at once with that reason (a
    batch would otherwise wait out every retry for the same answer)."""
    from speechscale.data.shards import ShardReader
    from tests.data.mirror import start

    body = bytes(range(256)) * 8
    server = start({"s.tar": [("wrong_range", body)], "cut.tar": [("cut", body), ("body", body)]})
    try:
        reader = ShardReader()
        (got,) = reader.fetch([(f"{server.url}/s.tar", 10, 20)])
        assert isinstance(got, ValueError) and "ignores ranged requests" in str(got) and server.count("s.tar") == 1
        (got,) = reader.fetch([(f"{server.url}/cut.tar", 0, len(body))])  # cut short once, then whole
        assert got == body and server.count("cut.tar") == 2
    finally:
        server.shutdown()
        server.server_close()
