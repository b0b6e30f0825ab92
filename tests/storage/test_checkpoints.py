import random
import re

import numpy as np
import pytest
import torch

from speechscale.components import components_from_checkpoint
from speechscale.config import ConfigError
from speechscale.recipe import load_recipe
from speechscale.storage.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from speechscale.storage.seeds import rng_state, set_rng_state
from speechscale.training.trainer import Trainer
from tests.conftest import shared


def _trainer(out, steps, *extra):
    m = shared("ldc93s1", "manifest.jsonl")
    return Trainer(load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={out}",
                                      f"trainer.max_steps={steps}", "trainer.progress=false", "data.batch_seconds=10",
                                      "model.overrides={rnn_hidden: 48, rnn_layers: 2}", *extra]))


def test_round_trip_restores_the_model_from_its_config_with_weights_only(tmp_path):
    trainer = _trainer(tmp_path / "a", 2)
    trainer.fit()
    path = tmp_path / "a" / "checkpoints" / "last.pt"
    state = torch.load(path, weights_only=True)  # plain data and tensors only
    assert state["training"]["step"] == 2 and state["config"]["trainer"]["max_steps"] == 2
    assert state["format_version"] == 3 and "meta" not in state and len(state["ranks"]) == 1
    torch.manual_seed(5)
    comps = components_from_checkpoint(load_checkpoint(path))
    drawn = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(drawn, torch.rand(3))  # the weights were assigned, not drawn at random first
    assert not comps.model.training and not any(t.is_meta for t in comps.model.state_dict().values())
    x, n = torch.randn(2, comps.features.num_features, 90), torch.tensor([90, 60])
    trainer.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(comps.model(x, n)[0], trainer.model(x, n)[0], rtol=0, atol=0)
    assert not list((tmp_path / "a" / "checkpoints").glob(".*tmp*"))  # atomic write left no temp file


@pytest.mark.parametrize("workers", [0, 1])
def test_resume_mid_epoch_continues_exactly(tmp_path, workers):
    """4 steps straight == 2 steps, stop mid-epoch (one utterance a batch, 3 a epoch), resume for 2 more.
    With a worker the DataLoader prefetches: the checkpoint must record what was trained on, not fetched."""
    extra = ["data.batch_seconds=3", f"data.num_workers={workers}", "data.sortagrad=false"]
    straight = _trainer(tmp_path / "s", 4, *extra)
    straight.fit()
    first = _trainer(tmp_path / "r", 2, *extra)
    first.fit()
    assert first.state.epoch == 0 and first.state.consumed == 2 and len(first.plan) == 3
    resumed = _trainer(tmp_path / "r", 4, *extra, "trainer.resume=auto")
    assert resumed.state.step == 2 and resumed.state.consumed == 2
    resumed.fit()
    assert resumed.state.epoch == 1 and resumed.state.step == 4
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_fresh_run_refuses_another_runs_checkpoints_and_weights_alone_do_not_resume(tmp_path):
    """A second run without trainer.resume in the same out_dir replaced the first run's best.pt and last.pt, and
    the rotation (by step number) deleted its own newer files first; an averaged checkpoint as trainer.resume
    raised KeyError."""
    from speechscale.config import ConfigError
    from speechscale.storage.averaging import average_checkpoints

    _trainer(tmp_path / "a", 1).fit()
    before = {p.name: p.read_bytes() for p in (tmp_path / "a" / "checkpoints").iterdir()}
    with pytest.raises(ConfigError, match=r"already holds a run's checkpoints \(last.pt, best.pt, latest, "
                                          r"step-000000001.pt\): continue it with trainer.resume=auto"):
        _trainer(tmp_path / "a", 1)
    assert {p.name: p.read_bytes() for p in (tmp_path / "a" / "checkpoints").iterdir()} == before
    assert _trainer(tmp_path / "a", 2, "trainer.resume=auto").state.step == 1  # continuing is what it offers
    # a resume under another model, features or optimizer raised load_state_dict's size mismatches or KeyError
    for changed, said in [("model.overrides={rnn_hidden: 64, rnn_layers: 2}", "model.overrides rnn_hidden=48 (this run: 64)"),
                          ("features.kind=logmel", "features.kind 'spectrogram' (this run: 'logmel')"),
                          ("optim.name=sgd", "optim.name 'adamw' (this run: 'sgd')")]:
        with pytest.raises(ConfigError, match=re.escape(said) + ".*trainer.init_from"):
            _trainer(tmp_path / "a", 2, "trainer.resume=auto", changed)
    assert _trainer(tmp_path / "a", 2, "trainer.resume=auto", "model.overrides={rnn_layers: 2, rnn_hidden: 48}"
                    ).state.step == 1  # the same architecture, written another way
    averaged = tmp_path / "avg.pt"
    save_checkpoint(averaged, average_checkpoints([str(tmp_path / "a" / "checkpoints" / "last.pt")]))
    with pytest.raises(CheckpointError, match="holds weights only .* trainer.init_from"):
        _trainer(tmp_path / "b", 1, f"trainer.resume={averaged}")


def test_rng_state_round_trip_through_weights_only(tmp_path):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    save_checkpoint(tmp_path / "r.pt", {"model": {}, "config": {}, "meta": {}, "rng": rng_state()})
    want = (random.random(), np.random.rand(), torch.rand(1))
    set_rng_state(load_checkpoint(tmp_path / "r.pt")["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1)) == want


def test_torn_or_foreign_checkpoints_are_clear_errors(tmp_path):
    save_checkpoint(tmp_path / "ok.pt", {"model": {}, "config": {}, "meta": {}})
    data = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "torn.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"torn.pt is not a checkpoint: its zip archive is torn or malformed"):
        load_checkpoint(tmp_path / "torn.pt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a speechscale checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "none.pt")


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_bytes(b""), r"empty.pt: empty file \(0 bytes\), not a checkpoint$"),
    (lambda p: p.mkdir(), r"empty.pt: a folder, not a checkpoint"),
    (lambda p: p.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt "), r"empty.pt is not a checkpoint: not a file torch.save "
                                                                   r"writes \(a checkpoint is the .pt file"),  # a wav
    (lambda p: torch.save({"model": {}}, p), r"not a speechscale checkpoint \(no config in it\)$"),
    (lambda p: torch.save({"model": torch.nn.Linear(2, 2)}, p),
     r"not a speechscale checkpoint: it names torch.nn.modules.linear.Linear, which a speechscale checkpoint never"),
])
def test_each_unusable_checkpoint_says_what_is_wrong_in_one_line(tmp_path, make, message):
    make(tmp_path / "empty.pt")
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(tmp_path / "empty.pt")
    assert "\n" not in str(info.value) and "weights_only" not in str(info.value)


def test_rotation_keeps_the_last_k_a_pointer_and_last(tmp_path):
    trainer = _trainer(tmp_path, 5, "trainer.checkpoint_every_steps=1", "trainer.keep_checkpoints=2",
                       "data.batch_seconds=3", "data.sortagrad=false")
    trainer.fit()
    ckpts = tmp_path / "checkpoints"
    steps = sorted(p.name for p in ckpts.glob("step-*.pt"))
    assert steps == ["step-000000004.pt", "step-000000005.pt"]
    assert (ckpts / "latest").read_text().strip() == "step-000000005.pt"
    assert load_checkpoint(ckpts / "last.pt")["training"]["step"] == 5


def test_checkpoint_every_minutes_writes_once_the_interval_has_passed(tmp_path):
    """trainer.checkpoint_every_minutes: an interval of wall time, whatever a step costs on this hardware. One
    process checks it at every step: an interval shorter than any step writes one after each; a long one none
    between the epoch ends (3 steps an epoch here)."""
    def steps_saved(out, minutes):
        _trainer(out, 5, f"trainer.checkpoint_every_minutes={minutes}", "trainer.keep_checkpoints=10",
                 "data.batch_seconds=3", "data.sortagrad=false").fit()
        return sorted(int(p.stem.split("-")[1]) for p in (out / "checkpoints").glob("step-*.pt"))

    assert steps_saved(tmp_path / "short", 1e-9) == [1, 2, 3, 4, 5]
    assert steps_saved(tmp_path / "long", 1e3) == [3, 5]  # the epoch end and the run's end
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"trainer.checkpoint_every_minutes=\S+ must be a (finite )?number"):
            _trainer(tmp_path / "bad", 1, f"trainer.checkpoint_every_minutes={bad}")


def test_auto_resume_passes_over_a_torn_newest_checkpoint(tmp_path):
    from speechscale.storage.checkpoints import newest_checkpoint

    _trainer(tmp_path, 4, "trainer.checkpoint_every_steps=1", "data.batch_seconds=3", "data.sortagrad=false").fit()
    ckpts = tmp_path / "checkpoints"
    for name in ("step-000000004.pt", "last.pt"):  # a crash mid-write of the newest (no atomic rename)
        data = (ckpts / name).read_bytes()
        (ckpts / name).unlink()
        (ckpts / name).write_bytes(data[: len(data) // 3])
    path, state = newest_checkpoint(ckpts)
    assert path.endswith("step-000000003.pt") and state["training"]["step"] == 3
    resumed = _trainer(tmp_path, 6, "trainer.checkpoint_every_steps=1", "data.batch_seconds=3",
                       "data.sortagrad=false", "trainer.resume=auto")
    assert resumed.state.step == 3


def test_a_bit_flipped_in_a_saved_weight_is_caught_and_auto_resume_passes_over_it(tmp_path):
    """torch.load reads a checkpoint whose bytes changed after saving (bit rot, a bad copy) as a changed weight; the
    CRC-32 each record was written with tells it, and resume=auto takes the checkpoint before."""
    import zipfile

    from speechscale.storage.checkpoints import newest_checkpoint

    _trainer(tmp_path, 3, "trainer.checkpoint_every_steps=1", "data.batch_seconds=3", "data.sortagrad=false").fit()
    ckpts = tmp_path / "checkpoints"
    good = load_checkpoint(ckpts / "step-000000003.pt")
    newest = ckpts / "step-000000003.pt"  # the pointer's target (and last.pt, a hard link to it)
    data = bytearray(newest.read_bytes())
    with zipfile.ZipFile(newest) as archive:  # the largest tensor's bytes: the file's own layout
        record = max(archive.infolist(), key=lambda r: r.file_size)
    data[data.index(record.filename.encode(), record.header_offset) + len(record.filename) + 100] ^= 0x01
    newest.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"step-000000003.pt is damaged: its record {record.filename} does "
                                              r"not match the CRC-32 written with it"):
        load_checkpoint(newest)
    unchecked = torch.load(newest, weights_only=True)  # what loading without the check gives
    assert sum(not torch.equal(v, good["model"][k]) for k, v in unchecked["model"].items()) == 1
    assert (ckpts / "latest").read_text().strip() == newest.name
    with pytest.raises(CheckpointError, match="last.pt is damaged"):
        load_checkpoint(ckpts / "last.pt")
    try:  # a writer that stores no CRCs (0): nothing to check against, so the file loads
        torch.serialization.set_crc32_options(False)
        save_checkpoint(tmp_path / "no-crc.pt", good)
    finally:
        torch.serialization.set_crc32_options(True)
    with zipfile.ZipFile(tmp_path / "no-crc.pt") as archive:
        assert {r.CRC for r in archive.infolist()} == {0}
    plain = load_checkpoint(tmp_path / "no-crc.pt")["model"]
    assert all(torch.equal(v, good["model"][k]) for k, v in plain.items())
    path, state = newest_checkpoint(ckpts)
    assert path.endswith("step-000000002.pt") and state["training"]["step"] == 2


def test_a_separate_last_pt_stands_in_for_its_damaged_step_file_but_never_for_a_newer_one(tmp_path):
    """On an object store last.pt is a server-side copy of the newest step file, not a hard link: when the step
    file's bytes are damaged, its whole copy resumes the same step rather than the step before. A last.pt older than
    a step file that loads is taken only when nothing newer loads."""
    import shutil

    from speechscale.storage.checkpoints import newest_checkpoint

    _trainer(tmp_path / "run", 3, "trainer.checkpoint_every_steps=1", "data.batch_seconds=3",
             "data.sortagrad=false").fit()
    ckpts = tmp_path / "copied"
    shutil.copytree(tmp_path / "run" / "checkpoints", ckpts, copy_function=shutil.copyfile)  # no hard links
    assert (ckpts / "last.pt").stat().st_ino != (ckpts / "step-000000003.pt").stat().st_ino

    def damage(name):
        data = bytearray((ckpts / name).read_bytes())
        data[len(data) // 2] ^= 0x01
        (ckpts / name).write_bytes(bytes(data))

    damage("step-000000003.pt")
    path, state = newest_checkpoint(ckpts)
    assert path.endswith("last.pt") and state["training"]["step"] == 3
    shutil.copyfile(ckpts / "step-000000001.pt", ckpts / "last.pt")  # a last.pt older than step 2
    path, state = newest_checkpoint(ckpts)
    assert path.endswith("step-000000002.pt") and state["training"]["step"] == 2
    damage("step-000000002.pt")
    damage("step-000000001.pt")
    path, state = newest_checkpoint(ckpts)  # nothing newer loads: the older last.pt is the last resort
    assert path.endswith("last.pt") and state["training"]["step"] == 1


def test_a_kill_during_checkpoint_writes_leaves_the_last_good_checkpoint_intact(tmp_path):
    """A process writes big checkpoints in a loop and is SIGKILLed while a temp file is being written:
    the pointer and resume find a complete checkpoint, and every file under a checkpoint name is whole."""
    import signal
    import subprocess
    import sys
    import time

    from speechscale.storage.checkpoints import newest_checkpoint

    code = (
        "import sys, torch\n"
        "from speechscale.storage.checkpoints import save_rotating\n"
        "big = torch.arange(12_000_000, dtype=torch.float32)\n"  # 48 MB: writes take a while
        "step = 0\n"
        "while True:\n"
        "    step += 1\n"
        "    save_rotating(sys.argv[1], {'model': {'w': big + step}, 'config': {}, 'meta': {}, 'step': step}, step, 2)\n"
        "    print(step, flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "1"  # one complete checkpoint exists
        deadline = time.time() + 60
        while not list(tmp_path.glob(".*.tmp.*")) and time.time() < deadline:
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)  # inside a write: its temp file exists
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert list(tmp_path.glob(".*.tmp.*"))  # the interrupted write
    path, state = newest_checkpoint(tmp_path)
    w = state["model"]["w"]
    assert state["step"] >= 1 and w[0] == state["step"] and w[-1] == 11_999_999 + state["step"]
    for f in [p for p in tmp_path.iterdir() if p.name.startswith("step-") or p.name == "last.pt"]:
        load_checkpoint(f)  # every file under a checkpoint name is complete


def test_a_format_1_checkpoint_is_refused_for_resume_with_one_clear_line(tmp_path):
    trainer = _trainer(tmp_path / "a", 1)
    trainer.fit()
    state = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")
    state["format_version"] = 1
    torch.save(state, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match="format 1 predates resumable"):
        _trainer(tmp_path / "b", 2, f"trainer.resume={tmp_path / 'old.pt'}")
    components_from_checkpoint(load_checkpoint(tmp_path / "old.pt"))  # still usable for inference


@pytest.mark.parametrize("corrupt, message", [
    (lambda c: c["config"]["model"]["overrides"].update(rnn_hidden=10 ** 4), "weights do not match"),
    (lambda c: c["config"]["model"].update(overrides={"rnn_hidden": "wide"}), "model description is not valid"),
    (lambda c: c["config"]["features"].update(kind=7, n_mels=[1]), "model description is not valid"),
    (lambda c: c["config"].pop("model") and c["config"].update(model=[]), "model description is not valid"),
])
def test_a_corrupt_model_description_is_one_line_before_anything_is_allocated(ldc_checkpoint, tmp_path, corrupt,
                                                                                message):
    from speechscale.components import load_components

    state = torch.load(ldc_checkpoint, weights_only=True)
    corrupt(state)
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=message) as info:
        load_components(tmp_path / "bad.pt")  # built on the meta device: nothing allocated
    assert "\n" not in str(info.value)
