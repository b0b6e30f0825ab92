"""The convergence bench: each strategy's final held-out WER against one process, resumable over sessions."""
import json

import pytest

from benchmarks.convergence import _settings, bench_convergence, load_runs, summarize
from tests.conftest import shared
from tests.evidence.conftest import run_benchmarks


def _run(strategy, seed, wer):
    return {"strategy": strategy, "seed": seed, "learners": 1 if strategy == "single" else 4, "epochs": 36,
            "final_wer": wer}


def test_summary_gives_each_strategy_its_spread_and_its_gap_to_one_process_of_the_same_seed():
    runs = [_run("single", 1, 0.10), _run("single", 2, 0.20), _run("single", 3, 0.06),
            _run("allreduce", 1, 0.12), _run("allreduce", 2, 0.15), _run("allreduce", 3, 0.10),
            _run("adpsgd-fixed_ring", 1, 0.30), _run("adpsgd-fixed_ring", 3, 0.05)]
    single, allreduce, ring = summarize(runs)
    assert single["final_wer"] == {"median": 0.10, "min": 0.06, "max": 0.20} and single["gap_to_single"] is None
    assert allreduce["final_wer"] == {"median": 0.12, "min": 0.10, "max": 0.15}
    # per seed: +0.02, -0.05, +0.04
    assert allreduce["gap_to_single"] == {"median": 0.02, "min": -0.05, "max": 0.04}
    assert allreduce["at_or_below_single"] == 1 and allreduce["learners"] == 4
    assert ring["runs"] == 2 and ring["seeds"] == [1, 3]
    assert ring["gap_to_single"] == {"median": 0.095, "min": -0.01, "max": 0.2} and ring["at_or_below_single"] == 1
    assert single["final_cer"] is None  # the runs carry no CER: no figure is made up


def test_summary_gives_the_cer_spread_when_every_run_has_one():
    runs = [{**_run("single", s, w), "final_cer": c} for s, w, c in [(1, 0.1, 0.04), (2, 0.2, 0.09), (3, 0.0, 0.0)]]
    assert summarize(runs)[0]["final_cer"] == {"median": 0.04, "min": 0.0, "max": 0.09}


def test_a_folder_of_runs_made_with_other_settings_is_refused(tmp_path):
    settings = {"config": "configs/fsdd.yaml", "procs": 4, "epochs": None, "overrides": ["data.root=x"]}
    (tmp_path / "runs.jsonl").write_text(json.dumps({**_run("single", 1, 0.1), "settings": settings}) + "\n")
    assert load_runs(tmp_path, settings)[0]["final_wer"] == 0.1
    with pytest.raises(ValueError, match="other settings"):
        load_runs(tmp_path, {**settings, "procs": 2})


def test_no_run_starts_after_start_within_and_the_finished_ones_are_kept(tmp_path, caplog):
    """A session's time guard: past it, the runs left are neither started nor written (the next call does them)."""
    extra = ["data.root=/nowhere"]  # a run that started would fail here: the guard is what keeps this green
    kept = {**_run("single", 1, 0.1), "settings": _settings("configs/fsdd.yaml", 4, None, extra)}
    (tmp_path / "runs.jsonl").write_text(json.dumps(kept) + "\n")
    runs = bench_convergence("configs/fsdd.yaml", 4, [1, 2], tmp_path, extra, ["single", "allreduce"],
                             start_within=0)
    assert runs == [kept] and (tmp_path / "runs.jsonl").read_text().count("\n") == 1
    assert not (tmp_path / "work").exists() and not caplog.records  # a failed run would be logged and left out
    runs = bench_convergence("configs/fsdd.yaml", 4, [2], tmp_path, extra, ["single"], start_within=60)
    assert runs == [kept] and "trainer.seed=2" in caplog.text  # it started, failed, was left out: the bench went on


@pytest.mark.slow
@pytest.mark.protocol
def test_bench_convergence_trains_each_strategy_and_skips_the_runs_it_has(tmp_path):
    root = shared("yesno", "manifest.jsonl").parent
    args = ["convergence", "--config", "configs/yesno.yaml", "--data-root", str(root), "--procs", "2",
            "--seeds", "3", "--epochs", "2", "--strategies", "single,adpsgd-fixed_ring", "--out", str(tmp_path),
            "model.overrides={rnn_hidden: 64, rnn_layers: 1}", "data.max_batch_size=4"]
    lines = [json.loads(x) for x in run_benchmarks(*args, timeout=900).stdout.strip().splitlines()]
    rows = [x for x in lines if "summary" not in x]
    assert sorted((r["strategy"], r["learners"], r["seed"], r["epochs"]) for r in rows) == [
        ("adpsgd-fixed_ring", 2, 3, 2), ("single", 1, 3, 2)]
    saved = [json.loads(x) for x in (tmp_path / "runs.jsonl").read_text().splitlines()]
    for row in saved:  # the final figure is the run's own last validation, as its metrics file has it
        metrics = [json.loads(x) for x in (tmp_path / "work" / f"{row['strategy']}-seed3" / "metrics.jsonl")
                   .read_text().splitlines()]
        last = [m for m in metrics if m["kind"] == "val"][-1]
        assert (row["final_wer"], row["final_cer"], row["final_val_loss"], row["epochs"]) == (
            last["wer"], last["cer"], last["val_loss"], 2)
        assert row["provenance"]["commit"] and row["settings"]["procs"] == 2 and row["threads"] == 1
        assert not any(x.startswith("data.root=") for x in row["settings"]["overrides"])  # resumable elsewhere
        config = json.loads((tmp_path / "work" / f"{row['strategy']}-seed3" / "config.json").read_text())
        assert config["trainer"]["max_minutes"] == 120  # the bench's timeout, not the recipe's guard, ends a slow run
    summary = {x["summary"]["strategy"]: x["summary"] for x in lines if "summary" in x}
    gap = saved[[r["strategy"] for r in saved].index("adpsgd-fixed_ring")]["final_wer"] - summary["single"]["final_wer"]["median"]
    assert summary["adpsgd-fixed_ring"]["gap_to_single"]["median"] == round(gap, 4)
    again = run_benchmarks(*args, timeout=300).stdout.strip().splitlines()  # nothing left to train: summaries only
    assert all("summary" in json.loads(x) for x in again) and len(again) == 2
    assert (tmp_path / "runs.jsonl").read_text().count("\n") == 2
