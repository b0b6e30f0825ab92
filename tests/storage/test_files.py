"""Checkpoints in object storage: a real S3-compatible server (moto) on loopback, and fsspec's memory://."""
import pytest

from speechscale import storage
from speechscale.recipe import load_recipe
from speechscale.storage.checkpoints import CheckpointError, load_checkpoint, newest_checkpoint
from speechscale.training.trainer import Trainer
from tests.conftest import shared


def _cfg(out, *extra):
    m = shared("ldc93s1", "manifest.jsonl")
    return load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", f"trainer.out_dir={out}",
                              "trainer.progress=false", "data.batch_seconds=3", "data.sortagrad=false",
                              "model.overrides={rnn_hidden: 32, rnn_layers: 1}", *extra])


def test_training_checkpoints_to_s3_and_resumes_from_it(s3, tmp_path):
    out = "s3://ckpts/runs/ldc"
    first = Trainer(_cfg(out, "trainer.max_steps=3", "trainer.checkpoint_every_steps=1", "trainer.keep_checkpoints=2",
                         f"trainer.log_dir={tmp_path}/logs"))
    first.fit()
    names = storage.list_names(f"{out}/checkpoints", "*")
    assert {"last.pt", "best.pt", "latest", "step-000000002.pt", "step-000000003.pt"} <= set(names)
    assert "step-000000001.pt" not in names  # rotated away
    assert (tmp_path / "logs" / "metrics.jsonl").is_file()  # logs stay local
    path, state = newest_checkpoint(f"{out}/checkpoints")
    assert path.endswith("step-000000003.pt") and state["training"]["step"] == 3
    resumed = Trainer(_cfg(out, "trainer.max_steps=5", "trainer.resume=auto", f"trainer.log_dir={tmp_path}/logs"))
    assert resumed.state.step == 3
    resumed.fit()
    assert load_checkpoint(f"{out}/checkpoints/last.pt")["training"]["step"] == 5


def test_cli_eval_reads_a_checkpoint_from_s3(s3, tmp_path, cli):
    out = "s3://ckpts/runs/cli"
    Trainer(_cfg(out, "trainer.max_steps=1", f"trainer.log_dir={tmp_path}")).fit()
    m = str(shared("ldc93s1", "manifest.jsonl"))
    proc = cli("eval", "--checkpoint", f"{out}/checkpoints/last.pt", "--manifest", m, "--json")
    assert '"utterances"' in proc.stdout


def test_memory_urls_and_clear_errors():
    storage.write_bytes("memory://ss/a.bin", b"x")
    assert storage.exists("memory://ss/a.bin") and storage.read_bytes("memory://ss/a.bin") == b"x"
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint("memory://ss/none.pt")
    with pytest.raises(CheckpointError, match="a.bin is not a checkpoint: not a file torch.save writes"):
        load_checkpoint("memory://ss/a.bin")


def test_a_write_through_a_temp_path_keeps_the_old_file_when_it_fails(tmp_path):
    """written_whole: what a path-taking writer (torch.jit.save, the int8 quantizer) writes appears whole at the end
    or not at all; a failure part-way leaves the old file as it was and no temp file behind."""
    from speechscale.storage.files import written_whole

    path = tmp_path / "model.onnx"
    path.write_bytes(b"the old export")
    with pytest.raises(OSError, match="No space left"):
        with written_whole(path) as tmp:
            tmp.write_bytes(b"half of a new")
            raise OSError(28, "No space left on device")
    assert path.read_bytes() == b"the old export" and sorted(tmp_path.iterdir()) == [path]
    with written_whole(path) as tmp:
        assert path.read_bytes() == b"the old export"  # not touched while the new one is written
        tmp.write_bytes(b"the new export")
    assert path.read_bytes() == b"the new export" and sorted(tmp_path.iterdir()) == [path]
