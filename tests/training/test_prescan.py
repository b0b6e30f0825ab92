"""Memory pre-scan: worst-case batch, peak memory, a clear stop on OOM or over budget, no side effects."""
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from speechscale.recipe import load_recipe
from speechscale.training.prescan import prescan
from speechscale.training.trainer import Trainer
from tests.conftest import ROOT, shared


@pytest.fixture
def ldc40(tmp_path):
    """40 lines of the LDC93S1 recording: enough utterances to fill big batches."""
    src = shared("ldc93s1")
    row = json.loads((src / "manifest.jsonl").read_text().splitlines()[0])
    row["audio_filepath"] = str(src / row["audio_filepath"])
    (tmp_path / "m.jsonl").write_text((json.dumps(row) + "\n") * 40)
    return tmp_path / "m.jsonl"


def _cfg(manifest, out, *extra):
    return load_recipe(None, [f"data.train_manifest={manifest}", f"data.val_manifest={manifest}",
                              f"trainer.out_dir={out}", "trainer.progress=false", "trainer.max_steps=2",
                              "data.batch_seconds=15", "augment.speed=[0.9, 1.1]", "augment.time_masks=1",
                              "model.overrides={rnn_hidden: 64, dropout: 0.3}", *extra])


def test_prescan_measures_the_worst_case_and_leaves_training_exactly_unchanged(ldc40, tmp_path):
    scanned = Trainer(_cfg(ldc40, tmp_path / "a", "trainer.prescan=true"))
    result = prescan(scanned)
    assert result["utterances"] == 5  # the sampler packs floor(15 s / 2.92 s) of the longest
    # ... and speed perturbation at 0.9 stretches each to 3.25 s
    assert result["seconds"] == pytest.approx(2.9248 / 0.9, abs=0.01) and result["peak_mb"] > 100
    # added silence lengthens the worst case by both its ends at most, before the speed perturbation
    padded = prescan(Trainer(_cfg(ldc40, tmp_path / "c", "augment.silence=0.5", "augment.silence_max_s=0.25")))
    assert padded["seconds"] == pytest.approx((2.9248 + 0.5) / 0.9, abs=0.01)
    assert padded["peak_mb"] > 100
    scanned.fit()  # fit() pre-scans again, then trains
    plain = Trainer(_cfg(ldc40, tmp_path / "b"))
    plain.fit()
    for (name, a), b in zip(scanned.model.state_dict().items(), plain.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_prescan_over_the_memory_budget_stops_before_training_with_one_line(ldc40, tmp_path, cli):
    proc = cli("-q", "train", "--config", "configs/ldc93s1.yaml", f"data.train_manifest={ldc40}",
               f"data.val_manifest={ldc40}", f"trainer.out_dir={tmp_path}", "trainer.prescan=true",
               "trainer.memory_budget_mb=1", check=False)
    assert proc.returncode == 3
    last = [x for x in proc.stderr.splitlines() if x.strip()][-1]
    assert last.startswith("speechscale train: stopped: pre-scan: a batch of") and "data.batch_seconds" in last
    assert last.endswith("or set trainer.activation_checkpointing=true")  # the advice names recomputation too
    assert not (tmp_path / "checkpoints").exists()


def test_a_real_out_of_memory_in_the_prescan_names_the_limit_to_lower(ldc40, tmp_path):
    """The process gets an address-space limit 300 MB above what it uses; a 40-utterance batch of
    ds2-small needs more, so torch's CPU allocator really fails."""
    code = textwrap.dedent(f"""
        import resource, sys
        from pathlib import Path
        from speechscale.recipe import load_recipe
        from speechscale.training.trainer import Trainer
        from speechscale.training.prescan import prescan, PrescanError
        m = {str(ldc40)!r}
        cfg = load_recipe(None, [f"data.train_manifest={{m}}", f"data.val_manifest={{m}}",
                                 "trainer.out_dir={tmp_path}", "data.batch_seconds=2000", "data.max_batch_size=512",
                                 "trainer.progress=false", "model.name=ds2-small"])
        t = Trainer(cfg)
        status = Path("/proc/self/status").read_text().splitlines()
        vm = [int(x.split()[1]) for x in status if x.startswith("VmSize")][0] * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + 300 * 2 ** 20, resource.RLIM_INFINITY))
        try:
            prescan(t)
        except PrescanError as e:
            print(e)
            sys.exit(3)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "ran out of memory; lower data.batch_seconds (now 2000)" in proc.stdout
