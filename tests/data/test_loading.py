"""The training loader: the audio cache works in worker processes, and workers that outlive an epoch
still augment with the right epoch."""
import json
import shutil

import pytest
import torch

from speechscale.components import build_components
from speechscale.data.loading import load_utterances, make_loader
from speechscale.recipe import load_recipe
from tests.conftest import shared


def _corpus(tmp_path, n=6):
    fsdd = shared("fsdd")
    rows = [json.loads(x) for x in (fsdd / "manifest.jsonl").read_text().splitlines()[:n]]
    (tmp_path / "audio").mkdir()
    for r in rows:
        name = r["audio_filepath"].split("/")[-1]
        shutil.copy(fsdd / r["audio_filepath"], tmp_path / "audio" / name)
        r["audio_filepath"] = f"audio/{name}"
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "m.jsonl"


def _loader(manifest, workers, cache, *extra):
    cfg = load_recipe(None, [f"data.train_manifest={manifest}", f"data.num_workers={workers}",
                             f"data.cache_audio={str(cache).lower()}", "data.batch_seconds=4",
                             "features.sample_rate=8000", "augment.speed=[0.8, 1.2]", *extra])
    comps = build_components(cfg)
    utts, _ = load_utterances(str(manifest), comps, cfg.data)
    loader, sampler, dataset = make_loader(utts, comps, cfg.data, cfg.augment, cfg.trainer.seed)
    return loader, sampler, dataset


def _pass(loader, sampler, dataset, epoch):
    sampler.set_epoch(epoch)
    dataset.set_epoch(epoch)
    lengths, skipped = {}, {}
    for b in loader:
        lengths.update({i: int(n) for i, n in zip(b.indices, b.feat_lens)})
        for k, v in b.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    return lengths, skipped


def test_the_audio_cache_lives_in_worker_processes_across_epochs(tmp_path):
    manifest = _corpus(tmp_path)
    cached = _loader(manifest, 1, cache=True)
    plain = _loader(manifest, 1, cache=False)
    for loader in (cached, plain):
        first, skipped = _pass(*loader, 0)
        assert len(first) == 6 and not skipped
    shutil.rmtree(tmp_path / "audio")  # the files are gone: only the workers' cache can serve epoch 1
    second, skipped = _pass(*cached, 1)
    assert len(second) == 6 and not skipped
    assert _pass(*plain, 1)[1] == {"bad_audio": 6}  # without the cache the loss shows


def test_persistent_workers_augment_with_each_batchs_epoch(tmp_path):
    manifest = _corpus(tmp_path)
    reference = [_pass(*_loader(manifest, 0, cache=False), epoch)[0] for epoch in (0, 1, 2)]
    loader, sampler, dataset = _loader(manifest, 1, cache=True)
    cached = [_pass(loader, sampler, dataset, epoch)[0] for epoch in (0, 1, 2)]
    assert cached == reference  # the same speed factors as in the main process, epoch by epoch
    assert reference[1] != reference[2]  # and they do change between epochs
    assert torch.utils.data.get_worker_info() is None


def test_every_line_selecting_key_a_shard_index_cannot_take_is_named_at_once(tmp_path, capsys):
    """A recipe's train and validation slices (yesno's) with shard indexes in their place were refused one at a
    time, without saying the recipe set them: now all of them in one line, with how to clear them."""
    import json

    from speechscale.config import ConfigError, DataConfig
    from speechscale.data.loading import check_line_keys
    from tests.conftest import main_cli, shared

    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": str(shared("ldc93s1", "LDC93S1.wav")), "duration": 2.92,
                                    "text": "she had"}) + "\n")
    code, _, err = main_cli(capsys, "data", "shard", str(manifest), "--out", str(tmp_path / "s"))
    assert code == 0, err
    index = str(tmp_path / "s" / "index.jsonl")
    with pytest.raises(ConfigError) as e:
        check_line_keys(DataConfig(train_manifest=index, val_manifest=index, train_slice=[0, 31], val_slice=[31],
                                   filter={"speaker": "a"}))
    said = str(e.value)
    for key in ("data.filter={'speaker': 'a'}", "data.train_slice=[0, 31]", "data.val_slice=[31]", "a recipe",
                "data.train_slice=[] data.val_slice=[]"):
        assert key in said, said
    check_line_keys(DataConfig(train_manifest=index, val_manifest=str(manifest), val_slice=[0, 1]))  # a manifest may
