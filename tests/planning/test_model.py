"""The planner's model: its formulas, its monotonic behaviour, preemption and the deadline search."""
import json
import math

import pytest

from speechscale.planning.hardware import LINKS, Link
from speechscale.planning.model import (
    Cluster,
    PlanError,
    Workload,
    expected_max,
    gpu_counts,
    plan,
    ring_allreduce_seconds,
    run_plan,
    step,
)
from speechscale.planning.workload import measured_throughput, registry_cost


def _work(**kw):
    base = dict(name="m", params=50_000_000, throughput_per_gpu=1000.0, batch_seconds=320.0, hours=960, epochs=16)
    return Workload(**{**base, **kw})


def test_ring_allreduce_is_the_alpha_beta_formula():
    link = Link(bandwidth=10.0, latency_us=5.0)
    got = ring_allreduce_seconds(1e9, 8, link, buckets=3)
    assert got == pytest.approx(2 * 7 / 8 * 1e9 / 10e9 + 3 * 2 * 7 * 5e-6)
    assert ring_allreduce_seconds(1e9, 1, link) == 0


def test_expected_maximum_of_normals_matches_known_values():
    assert expected_max(1) == 0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), abs=0.01)
    assert expected_max(64) == pytest.approx(2.34, abs=0.01)  # tables: 2.249 at 50, 2.508 at 100


def test_one_gpu_has_no_communication_and_efficiency_falls_with_more_gpus():
    w, c = _work(), Cluster(gpus_per_node=8, inter=LINKS["eth-25g"])
    one = step(w, c, 1)
    assert one.speedup == pytest.approx(1) and one.comm_s == 0 and one.step_s == pytest.approx(0.32)
    effs = [step(w, c, n).efficiency for n in (2, 8, 16, 64)]
    assert all(a >= b for a, b in zip(effs, effs[1:])) and effs[-1] < 0.95


def test_overlap_hides_gradient_communication_only_up_to_backward():
    w = _work(params=500_000_000, grad_bytes=4)
    slow = Cluster(gpus_per_node=8, inter=LINKS["eth-25g"], jitter=0)
    hidden = step(w, slow, 16)
    exposed = step(w, Cluster(gpus_per_node=8, inter=LINKS["eth-25g"], jitter=0, overlap=0.0), 16)
    assert exposed.exposed_comm_s == pytest.approx(exposed.comm_s)
    assert hidden.exposed_comm_s == pytest.approx(hidden.comm_s - 2 / 3 * hidden.compute_s)


def test_hierarchical_allreduce_beats_a_flat_ring_when_latency_dominates():
    w = _work(params=2_000_000, batch_seconds=10.0)
    c = Cluster(gpus_per_node=8, inter=Link(12.0, 50.0), jitter=0)
    assert step(w, c, 64, "hierarchical").exposed_comm_s < step(w, c, 64, "allreduce").exposed_comm_s


def test_adpsgd_waits_for_one_neighbour_not_the_slowest_of_all():
    w, c = _work(), Cluster(gpus_per_node=8, jitter=0.05)
    assert step(w, c, 64, "adpsgd-random_ring").straggler_s < step(w, c, 64, "allreduce").straggler_s
    slow_net = Cluster(gpus_per_node=8, inter=LINKS["eth-25g"])
    ring, delayed = step(w, slow_net, 64, "adpsgd-fixed_ring"), step(w, slow_net, 64, "adpsgd-delay_by_one")
    assert delayed.exposed_comm_s < ring.exposed_comm_s == pytest.approx(ring.comm_s)
    random = step(w, slow_net, 64, "adpsgd-random_ring")
    assert random.comm_s > ring.comm_s  # random partners cross nodes more often


def test_preemption_costs_lost_work_and_a_rate_too_high_is_refused():
    c = Cluster(gpus_per_node=8, price_on_demand=3.0, price_preemptible=1.0, preemptions_per_node_hour=0.1)
    r = run_plan(_work(), c, 16)
    per = (c.checkpoint_minutes / 2 + c.restart_minutes) / 60
    assert r.wall_hours_preemptible == pytest.approx(r.train_hours / (1 - 0.2 * per))
    assert r.lost_hours_preemptible > 0 and r.cost_preemptible < r.cost_on_demand
    with pytest.raises(PlanError, match="checkpoint more often"):
        run_plan(_work(), Cluster(gpus_per_node=8, price_on_demand=3, price_preemptible=1,
                                  preemptions_per_node_hour=5.0), 16)


def test_the_cheapest_choice_meets_the_deadline():
    c = Cluster(gpus_per_node=8, price_on_demand=3.0, price_preemptible=1.0, preemptions_per_node_hour=0.05)
    free = plan(_work(), c, 64, deadline_hours=None)
    assert free["cheapest"]["gpus"] == 1 and free["cheapest"]["pricing"] == "preemptible"
    tight = plan(_work(), c, 64, deadline_hours=1.0)
    assert tight["cheapest"]["wall_hours"] <= 1.0 and tight["cheapest"]["gpus"] > 1
    assert plan(_work(), c, 64, deadline_hours=0.001)["cheapest"] is None
    json.dumps(tight)  # plain data


def test_gpu_counts_fill_a_node_then_whole_nodes():
    assert gpu_counts(Cluster(gpus_per_node=8), 64) == [1, 2, 4, 8, 16, 24, 32, 64]
    assert gpu_counts(Cluster(gpus_per_node=6), 24) == [1, 2, 4, 6, 12, 18, 24]


@pytest.mark.parametrize("name", ["ds2-tiny", "conformer-tiny"])
def test_registry_counts_are_the_models_own(name):
    from speechscale.config import FeatureConfig, from_dict
    from speechscale.data.features import FeatureExtractor
    from speechscale.models.registry import RECOMMENDED_FEATURES, build_model

    params, flops = registry_cost(name)
    feats = FeatureExtractor(from_dict(FeatureConfig, RECOMMENDED_FEATURES.get(name, {})))
    model = build_model(name, None, feats.num_features, 29)
    assert params == sum(p.numel() for p in model.parameters())
    assert flops == pytest.approx(sum(model.flops(feats.frames_for_seconds(10.0))) / 10.0)


def test_a_measured_throughput_is_read_from_bench_output(tmp_path):
    rows = [{"model": "ds2-tiny", "precision": "fp32", "audio_seconds_per_second": 40.0},
            {"model": "ds2-tiny", "precision": "bf16", "audio_seconds_per_second": 44.0}]
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"results": rows}))
    assert measured_throughput(path, "ds2-tiny", "amp") == 44.0
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert measured_throughput(path, "ds2-tiny", "fp32") == 40.0
    with pytest.raises(PlanError, match="no row for model ds2-large"):
        measured_throughput(path, "ds2-large", "fp32")


def test_default_rate_is_our_own_measurement_where_one_is_shipped(capsys):
    from tests.conftest import main_cli

    def plan_json(*args):
        code, out, _ = main_cli(capsys, "plan", "--json", "--max-gpus", "8", *args)
        assert code == 0
        return json.loads(out)

    shipped = plan_json("--model", "ds2-large", "--gpu", "h100")
    # bf16, 32 x 10 s, CUDA-graphed as training runs by default (issue #40; planning/data/measured.json)
    assert shipped["per_gpu_throughput"] == 2382
    assert shipped["workload"]["throughput_source"].startswith("measured: 2382 audio-s/s, ds2-large bf16, CUDA graphs")
    big = plan_json("--model", "ds2-large", "--gpu", "h100", "--batch-seconds", "1280")
    assert big["per_gpu_throughput"] == 4393
    eager = plan_json("--model", "ds2-large", "--gpu", "h100", "--precision", "fp32")  # no graphed fp32 row
    assert eager["per_gpu_throughput"] == 1129 and "CUDA graphs" not in eager["workload"]["throughput_source"]
    # a GPU with no measurement: the measured H100 figure scaled by the data-sheet peak ratio, said so (issue #43
    # §2: the H200, the H100's peak, was planned at FLOPs x 0.1 = 4,748 while the H100 measures 1,192)
    h200 = plan_json("--model", "ds2-large", "--gpu", "h200")
    assert h200["per_gpu_throughput"] == 2382 and h200["workload"]["throughput_source"].startswith(
        "estimated: 2382 audio-s/s = the h100 measurement x 1.00, the data-sheet dense amp peak ratio h200/h100")
    a100 = plan_json("--model", "ds2-large", "--gpu", "a100", "--precision", "fp32")
    assert a100["per_gpu_throughput"] == pytest.approx(1129 * 19.5 / 67.0)
    assert "not measured on a100" in a100["workload"]["throughput_source"]
    analytic = plan_json("--model", "ds2-tiny", "--gpu", "a100")  # measured on no GPU: FLOPs x MFU, said so
    assert "FLOPs x MFU" in analytic["workload"]["throughput_source"]
    given = plan_json("--model", "ds2-large", "--gpu", "h100", "--throughput", "500")
    assert given["per_gpu_throughput"] == 500 and given["workload"]["throughput_source"] == "--throughput"


def test_the_shipped_gpu_rates_are_the_committed_bench_output():
    """planning/data/measured.json is package data; its rows must be what docs/figures/gpu/ measured."""
    from tests.conftest import ROOT

    shipped = json.loads((ROOT / "src/speechscale/planning/data/measured.json").read_text())
    measured = []
    for name in ("gpu-train", "gpu-train-b128"):
        doc = json.loads((ROOT / "docs/figures/gpu" / f"{name}.json").read_text())
        assert "H100" in doc["provenance"]["machine"] and doc["provenance"]["commit"] == shipped["provenance"]["commit"]
        measured += [{"gpu": "h100", "model": r["model"], "precision": r["precision"],
                      "batch_seconds": round(r["batch_size"] * r["utterance_seconds"]),
                      "audio_seconds_per_second": round(r["audio_seconds_per_second"])} for r in doc["results"]]
    graphed = []
    for name in ("gpu-graphs", "gpu-graphs-b128"):  # what training runs on a GPU by default (issue #40)
        doc = json.loads((ROOT / "docs/figures/gpu" / f"{name}.json").read_text())
        assert "H100" in doc["provenance"]["machine"]
        assert doc["provenance"]["commit"] == shipped["graphs_provenance"]["commit"]
        graphed += [{"gpu": "h100", "model": r["model"], "precision": "bf16",
                     "batch_seconds": round(r["batch_size"] * r["utterance_seconds"]),
                     "audio_seconds_per_second": round(r["audio_seconds_per_second_compute"]), "cuda_graphs": True}
                    for r in doc["results"] if r["precision"] == "bf16+graphs"]
    assert shipped["rows"] == measured + graphed
