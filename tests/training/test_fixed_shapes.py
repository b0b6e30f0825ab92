"""data.fixed_shapes in the real trainer: the same utterances in the same steps, every batch fitting a shape,
and the same training (SGD: an update linear in the gradient, so rounding stays at rounding's size)."""
import json

import torch

from tests.conftest import shared
from tests.training.tiny import george_run


def _run(out, *extra):
    summary, trace, trainer = george_run(out, *extra)
    return summary, trace, trainer.model.state_dict(), trainer.shapes


def test_fixed_shapes_train_the_same_steps_on_the_same_utterances(tmp_path):
    plain, plain_trace, plain_w, _ = _run(tmp_path / "plain")
    shaped, shaped_trace, shaped_w, shapes = _run(tmp_path / "shaped", "data.fixed_shapes=3")
    assert shaped_trace == plain_trace and len(plain_trace) == plain["step"] > 4  # sampling untouched
    assert shaped["unshaped_batches"] == 0 and "unshaped_batches" not in plain
    assert 2 <= len(shapes.shapes) <= 3
    for k, v in plain_w.items():
        if v.is_floating_point():
            # rounding's size after 2 epochs: the padded batches reduce in another order (3e-5 seen on weights of
            # 0.1); batch norm's running statistics carry every layer's differences (3e-3 relative seen)
            stats = k.endswith(("running_mean", "running_var"))
            torch.testing.assert_close(shaped_w[k], v, atol=5e-4 if stats else 5e-5, rtol=5e-3 if stats else 1e-4,
                                       msg=lambda m, k=k: f"{k}: {m}")
    assert abs(shaped["val_loss"] - plain["val_loss"]) < 1e-4 * abs(plain["val_loss"])


def test_the_run_log_reports_audio_seconds_per_second_the_wait_for_data_and_the_host_time(tmp_path):
    """Each train row's audio_s_per_s times the wall time since the previous row is the audio of the utterances
    traced in those steps (their manifest durations, recomputed here), and the wait and the steps' host time are
    parts of that time."""
    from speechscale.data.manifest import read_manifest

    summary, trace, _, _ = _run(tmp_path / "run", "trainer.log_every=2", "augment.speed=[]")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    utts, _ = read_manifest(str(shared("fsdd", "manifest.jsonl")))
    george = [u for u in utts if u.extra.get("speaker") == "george" and u.extra.get("split") == "test"]
    train = [r for r in rows if r["kind"] == "train"]
    start = next(r for r in rows if r["kind"] == "start")
    assert len(train) >= 3
    previous = start
    for r in train:
        ids = [i for step in trace[previous["step"]:r["step"]] for i in step]
        audio = sum(george[i].duration for i in ids)
        span = r["time"] - previous["time"]
        assert 0 < r["data_wait_fraction"] < 1 and r["audio_s_per_s"] > 0
        # the row's own clock starts a little before the previous row's time stamp: a few % apart at most
        assert abs(r["audio_s_per_s"] * span - audio) <= 0.1 * audio + 0.02 * r["audio_s_per_s"], (r, audio, span)
        # the host's time inside the steps: a part of the time not spent waiting for data (the rest is logging,
        # traces and the loop's own bookkeeping, large beside this tiny model's steps)
        busy_ms = 1000 * span * (1 - r["data_wait_fraction"])
        steps = r["step"] - previous["step"]
        assert 0 < r["host_ms_per_step"] * steps <= 1.05 * busy_ms + 5, (r, steps, busy_ms)
        previous = r
    assert summary["audio_s_per_s"] > 0 and 0 < summary["data_wait_fraction"] < 1
