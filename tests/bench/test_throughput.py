import json

from tests.conftest import run_cli, shared


def test_bench_train_reports_throughput_and_phases_as_json():
    m = str(shared("ldc93s1", "manifest.jsonl"))
    proc = run_cli("bench", "train", "--model", "ds2-tiny", "--batch-size", "2", "--seconds", "1", "--steps", "2",
                   "--warmup", "1", "--manifest", m)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["model"] == "ds2-tiny" and res["source"] == "ldc93s1" and res["params"] > 1e6
    assert res["audio_seconds_per_second"] > 0 and res["utterances_per_second"] > 0
    phases = res["ms_per_phase"]
    assert set(phases) == {"data", "forward", "backward", "optimizer"} and all(v > 0 for v in phases.values())
    assert abs(sum(phases.values()) - res["ms_per_step"]) < 0.5


def test_bench_features_reports_cost_per_audio_second():
    m = str(shared("fsdd", "manifest.jsonl"))
    res = json.loads(run_cli("bench", "features", "--manifest", m, "--limit", "20", "--repeats", "1").stdout)
    assert res["utterances"] == 20 and res["audio_seconds"] > 5
    cost = res["ms_per_audio_second"]
    assert cost["load"] > 0 and cost["features"] > 0 and abs(cost["load"] + cost["features"] - cost["total"]) < 0.01
