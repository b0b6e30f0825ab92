"""BENCHMARKS.md rows from JSONL files of runs (bench/summary_runs.py): recomputed from the runs, and a file whose
runs came from several calls names every commit and no single command."""
import json
import statistics

from speechscale.bench import summary_runs


def _run(strategy, seed, wer, commit, command, date):
    return {"strategy": strategy, "seed": seed, "learners": 1 if strategy == "single" else 4, "threads": 1,
            "epochs": 36, "final_wer": wer, "final_cer": wer / 2,
            "settings": {"config": "configs/fsdd.yaml", "procs": 4, "epochs": None, "overrides": []},
            "provenance": {"machine": "2 cores, X", "date": date, "commit": commit, "command": command}}


def _write(path, runs):
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))


def test_a_recipe_over_seeds_is_its_one_process_runs_against_the_goal(tmp_path):
    runs = [_run("single", 1, 0.04, "aaa", "c1", "2026-11-27 07:00 UTC"),
            _run("single", 2, 0.08, "aaa", "c1", "2026-11-27 07:00 UTC"),
            _run("allreduce", 1, 0.02, "bbb", "c2", "2026-11-27 09:00 UTC"),
            _run("single", 3, 0.05, "bbb", "c2", "2026-11-27 08:00 UTC")]
    _write(tmp_path / "fsdd.jsonl", runs)
    (row,) = summary_runs.one_process_seeds(tmp_path / "fsdd.jsonl", "fsdd", 0.05)
    assert row["what"] == "recipe `fsdd`, one process, seeds 1, 2, 3"
    assert row["figure"] == "WER 5.0 % (4.0-8.0), CER 2.5 % (2.0-4.0)"
    assert row["status"] == "**not reached** (2 of 3 seeds did; gap 0.0 points at the median)"
    assert row["commit"] == "`aaa`, `bbb`" and row["date"] == "2026-11-27"  # every commit; the newest run's date
    assert row["command"].startswith("speechscale bench convergence, 2 calls")
    assert summary_runs.one_process_seeds(tmp_path / "none.jsonl", "fsdd", 0.05) == []


def test_each_strategy_is_set_against_one_process_of_the_same_seed(tmp_path):
    runs = [_run("single", s, w, "aaa", "c1", "2026-11-27 07:00 UTC") for s, w in [(1, 0.20), (2, 0.30), (3, 0.25)]]
    runs += [_run("allreduce", s, w, "aaa", "c1", "2026-11-27 07:00 UTC") for s, w in [(1, 0.18), (2, 0.31)]]
    folder = tmp_path / "convergence"
    folder.mkdir()
    _write(folder / "fsdd.jsonl", runs)
    (row,) = summary_runs.convergence(folder)
    gaps = [0.18 - 0.20, 0.31 - 0.30]  # one process on the same seeds (1, 2): 20 % and 30 %, not seed 3's 25 %
    assert row["figure"] == (f"{100 * statistics.median([0.18, 0.31]):.1f} % (18.0-31.0) against 25.0 % (20.0-30.0) "
                             f"on seeds 1, 2; gap {100 * statistics.median(gaps):+.1f} points (-2.0 to +1.0)")
    assert row["status"] == "**not reached** (1 of 2 did)" and row["command"] == "c1"
    assert row["what"].startswith("allreduce, 4 learners, `configs/fsdd.yaml`")
    _write(folder / "fsdd.jsonl", runs[:4])  # one seed: its figures, no range
    (row,) = summary_runs.convergence(folder)
    assert row["figure"] == "18.0 % against 20.0 % on seed 1; gap -2.0 points" and row["status"] == "reached"
    ring = [_run("adpsgd-fixed_ring", s, w, "aaa", "c1", "2026-11-27 07:00 UTC") for s, w in [(1, 0.22), (3, 0.2)]]
    _write(folder / "fsdd.jsonl", runs + ring)  # an ADPSGD strategy is also set beside allreduce on its seeds
    row = next(r for r in summary_runs.convergence(folder) if r["what"].startswith("adpsgd-fixed_ring"))
    assert row["figure"].endswith("; allreduce on the same seed: 18.0 %")  # seed 3 has no allreduce run
