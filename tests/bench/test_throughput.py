import json
import re

import pytest

from tests.conftest import shared


@pytest.mark.slow
def test_bench_train_reports_throughput_phases_ratios_and_mfu_per_precision(cli):
    m = str(shared("ldc93s1", "manifest.jsonl"))
    proc = cli("bench", "train", "--model", "ds2-tiny,wav2letter+-tiny,lstm-ctc-tiny,conformer-tiny",
                   "--precision", "bf16,fp32", "--batch-size", "2", "--seconds", "1", "--steps", "2", "--warmup", "1",
                   "--manifest", m)
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert [(r["model"], r["precision"]) for r in rows] == [
        (name, p) for name in ("ds2-tiny", "wav2letter+-tiny", "lstm-ctc-tiny", "conformer-tiny") for p in ("fp32", "bf16")]
    for res in rows:
        assert res["source"] == "ldc93s1" and res["params"] > 1e6 and res["device"] == "cpu"
        assert res["audio_seconds_per_second"] > 0 and res["utterances_per_second"] > 0
        phases = res["ms_per_phase"]
        assert set(phases) == {"data", "forward", "backward", "optimizer"} and all(v > 0 for v in phases.values())
        # the phases are timed inside the median step(s) the harness times around them: they cannot sum to more
        # (up to rounding each figure to 0.1 ms). How much they leave out is a bench figure, not asserted here.
        assert sum(phases.values()) <= res["ms_per_step"] + 0.05 * (len(phases) + 1)
        if res["mfu"] is None:  # bf16 on a CPU without bf16 kernels: the matmul probe is slower than the model
            assert res["precision"] == "bf16" and "no fast kernel for this dtype" in res["peak_source"]
        else:
            assert 0 < res["mfu"] < 1 and res["peak_source"] == f"measured {res['precision']} matmul"
        assert res["final_loss"] > 0  # the label fits the output frames: a real CTC loss
        ratio = res["audio_seconds_per_second"] / next(
            r for r in rows if r["model"] == res["model"] and r["precision"] == "fp32")["audio_seconds_per_second"]
        assert res["speedup_vs_fp32"] == pytest.approx(ratio, rel=0.01)


@pytest.mark.slow
def test_bench_train_uses_a_given_peak_and_rejects_unknown_precisions(cli):
    m = str(shared("ldc93s1", "manifest.jsonl"))
    res = json.loads(cli("bench", "train", "--model", "wav2letter+-tiny", "--batch-size", "2", "--seconds", "1",
                             "--steps", "1", "--warmup", "1", "--manifest", m, "--peak-tflops", "0.5").stdout)
    # both figures are rounded to 4 decimals: mfu = round(a / 0.5), achieved = round(a), so they differ by at most
    # the two roundings (a relative tolerance failed at these tiny rates: 0.0015 against 0.0016)
    assert res["peak_source"] == "given" and abs(res["mfu"] - res["achieved_tflops"] / 0.5) <= 0.00005 / 0.5 + 0.00005
    proc = cli("bench", "train", "--precision", "fp8", check=False)
    assert proc.returncode == 2 and "--precision='fp8' is unknown; choose one of fp32, tf32, bf16, fp16" in proc.stderr


@pytest.mark.slow
def test_bench_train_activation_checkpointing_both_runs_each_mode_plain_and_recomputed(cli):
    """The recomputed twin trains exactly as the plain one (no dropout: the two draw their masks at different
    points of one generator): the same losses to the bit, its activations a fraction, its speed relative to the
    plain row's; the two side-by-side comparisons at once, and with CUDA graphs, are one line each."""
    m = str(shared("ldc93s1", "manifest.jsonl"))
    args = ["bench", "train", "--model", "lstm-ctc-tiny", "--model-overrides", "{dropout: 0.0}", "--batch-size", "2",
            "--seconds", "1", "--steps", "2", "--warmup", "1", "--manifest", m, "--device", "cpu"]
    plain, recomputed = [json.loads(x) for x in cli(*args, "--activation-checkpointing", "both").stdout.splitlines()]
    assert (plain["precision"], recomputed["precision"]) == ("fp32", "fp32")
    assert "activation_checkpointing" not in plain and recomputed["activation_checkpointing"] is True
    assert (recomputed["first_loss"], recomputed["final_loss"]) == (plain["first_loss"], plain["final_loss"])
    assert 0 < recomputed["activations_mb"] * 4 < plain["activations_mb"]
    ratio = recomputed["audio_seconds_per_second"] / plain["audio_seconds_per_second"]
    assert recomputed["recompute_speed"] == pytest.approx(ratio, rel=0.01) and "recompute_speed" not in plain
    for extra, said in [(["--activation-checkpointing", "both", "--compile", "both"], "one side-by-side comparison"),
                        (["--activation-checkpointing", "on", "--graphs", "both"], "CUDA graphs stay off with it")]:
        proc = cli(*args, *extra, check=False)
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_bench_train_compile_both_runs_each_mode_eager_and_compiled_side_by_side(cli):
    """The compiled twin starts from the same weights on the same batch: the same first loss (to float rounding;
    a model without dropout, whose masks the two draw differently); its speed-up is its rate over the eager row's."""
    m = str(shared("ldc93s1", "manifest.jsonl"))
    proc = cli("bench", "train", "--model", "lstm-ctc-tiny", "--batch-size", "2", "--seconds", "1", "--steps", "2",
               "--warmup", "1", "--manifest", m, "--device", "cpu", "--compile", "both")
    eager, compiled = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert (eager["precision"], compiled["precision"]) == ("fp32", "fp32")
    assert "compile" not in eager and compiled["compile"] == "default" and "compile_speedup" not in eager
    assert compiled["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-3)
    ratio = compiled["audio_seconds_per_second"] / eager["audio_seconds_per_second"]
    assert compiled["compile_speedup"] == pytest.approx(ratio, rel=0.01)
    assert compiled["speedup_vs_fp32"] == pytest.approx(ratio, rel=0.01)  # the eager fp32 row is the reference


def test_bench_features_reports_cost_per_audio_second(cli):
    m = str(shared("fsdd", "manifest.jsonl"))
    res = json.loads(cli("bench", "features", "--manifest", m, "--limit", "20", "--repeats", "1").stdout)
    assert res["utterances"] == 20 and res["audio_seconds"] > 5
    cost = res["ms_per_audio_second"]
    assert cost["load"] > 0 and cost["features"] > 0 and abs(cost["load"] + cost["features"] - cost["total"]) < 0.01


def test_bench_modes_expand_graphs_and_schemes_and_refuse_what_cannot_run():
    from speechscale.bench.throughput import bench_modes
    from speechscale.config import ConfigError

    assert bench_modes(["bf16", "fp32"], "off", [], False) == ("fp32", "bf16")  # fp32, the reference, leads
    with pytest.raises(ConfigError, match="--graphs needs a CUDA device"):
        bench_modes(["bf16"], "both", ["stacked"], False)
    with pytest.raises(ConfigError, match="--graphs needs a CUDA device"):
        bench_modes(["bf16+graphs@stacked"], "off", [], False)
    with pytest.raises(ConfigError, match=re.escape("--precision: bench mode 'bf16+graph': use one of")):
        bench_modes(["bf16+graph"], "off", [], False)
    with pytest.raises(ConfigError, match="scheme='zigzag' is unknown; choose one of auto, stacked, split, fused"):
        bench_modes(["bf16+graphs@zigzag"], "off", [], False)
    # with a CUDA device
    assert bench_modes(["bf16"], "both", ["split", "stacked"], True) == (
        "bf16", "bf16+graphs@split", "bf16+graphs@stacked")
    assert bench_modes(["bf16", "fp16+graphs@stacked"], "on", [], True) == ("bf16+graphs",)
    assert bench_modes(["bf16", "fp16+graphs@stacked"], "off", [], True) == ("bf16", "fp16+graphs@stacked")
