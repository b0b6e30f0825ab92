"""BENCHMARKS.md rows from JSONL files of runs (bench/summary_runs.py): recomputed from the runs, and a file whose
runs came from several calls names every commit and no single command."""
import json
import statistics

from benchmarks import summary_runs


def _run(strategy, seed, wer, commit, command, date):
    return {"strategy": strategy, "seed": seed, "learners": 1 if strategy == "single" else 4, "threads": 1,
            "epochs": 36, "final_wer": wer, "final_cer": wer / 2, "best_wer": wer, "minutes": 1.0,
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
    assert row["figure"].endswith("; allreduce on the same seed: 18.0 %, gap +4.0 points")  # seed 3: no allreduce run
    ring += [_run("adpsgd-fixed_ring", 2, 0.30, "aaa", "c1", "2026-11-27 07:00 UTC")]
    _write(folder / "fsdd.jsonl", runs + ring)  # seeds 1, 2 beside allreduce: 22 - 18 and 30 - 31, seed by seed
    row = next(r for r in summary_runs.convergence(folder) if r["what"].startswith("adpsgd-fixed_ring"))
    assert row["figure"].endswith("; allreduce on the same seeds: 24.5 % (18.0-31.0), gap +1.5 points (-1.0 to +4.0)")


def test_a_row_names_every_machine_and_commit_of_the_runs_it_reads_and_no_others(tmp_path):
    runs = [_run("single", s, 0.2, "aaa", "c1", "2026-11-27 07:00 UTC") for s in (1, 2)]
    runs += [_run("allreduce", 1, 0.2, "bbb", "c2", "2026-11-27 08:00 UTC"),
             {**_run("allreduce", 2, 0.2, "ccc", "c3", "2026-11-27 10:00 UTC"),
              "provenance": {"machine": "16 cores, Y", "date": "2026-11-27 10:00 UTC", "commit": "ccc", "command": "c3"}},
             _run("adpsgd-fixed_ring", 1, 0.2, "ddd", "c4", "2026-11-27 09:00 UTC")]
    folder = tmp_path / "convergence"
    folder.mkdir()
    _write(folder / "fsdd.jsonl", runs)
    rows = {r["what"].split(",")[0]: r for r in summary_runs.convergence(folder)}
    assert rows["allreduce"]["machine"] == "2 cores, X; 16 cores, Y" and rows["allreduce"]["commit"] == "`aaa`, `bbb`, `ccc`"
    assert rows["allreduce"]["date"] == "2026-11-27"
    ring = rows["adpsgd-fixed_ring"]  # seed 1 only: seed 2's allreduce run (ccc, machine Y) is not read
    assert ring["machine"] == "2 cores, X" and ring["commit"] == "`aaa`, `bbb`, `ddd`"
    assert ring["command"].startswith("speechscale bench convergence, 3 calls")


def test_every_run_is_one_row_of_the_runs_table_and_benchmarks_md_holds_the_committed_one(tmp_path):
    from pathlib import Path

    from benchmarks.tables import read_block

    folder = tmp_path / "convergence"
    folder.mkdir()
    runs = [_run("adpsgd-fixed_ring", 2, 0.3141, "bbb", "c2", "2026-11-27 09:00 UTC"),
            _run("single", 1, 0.25, "aaa", "c1", "2026-11-27 07:00 UTC")]
    _write(folder / "fsdd.jsonl", runs)
    lines = summary_runs.render_runs(folder).strip().splitlines()
    assert len(lines) == 2 + 2  # head, rule, one row a run: one process first, as the bench orders them
    assert lines[2].startswith("| `fsdd.jsonl` | single | 1 | 1 x 1 | 36 | 25.0 % | 12.5 % |")
    assert "| adpsgd-fixed_ring | 2 | 4 x 1 |" in lines[3] and "| 31.4 % | 15.7 % |" in lines[3] and "`bbb`" in lines[3]
    root = Path(__file__).resolve().parents[2]
    committed = summary_runs.render_runs(root / "docs/figures/convergence")
    from benchmarks.tables import pages_text

    assert read_block(pages_text(root / "BENCHMARKS.md"), "convergence-runs") == committed, \
        "BENCHMARKS.md's convergence-runs table drifted from docs/figures/convergence: run bench all --tables-only"
    n = sum(len(summary_runs._read(p)) for p in (root / "docs/figures/convergence").glob("*.jsonl"))
    assert committed.count("\n| `") == n


def test_a_file_of_another_schedule_is_set_against_its_recipes_one_process_and_allreduce(tmp_path):
    base = [_run("single", s, w, "aaa", "c1", "2026-11-27 07:00 UTC") for s, w in [(1, 0.20), (2, 0.30)]]
    base += [_run("allreduce", s, w, "aaa", "c1", "2026-11-27 07:00 UTC") for s, w in [(1, 0.24), (2, 0.26)]]
    base += [_run("adpsgd-delay_by_one", 1, 0.40, "aaa", "c1", "2026-11-27 07:00 UTC")]
    longer = [{**_run("adpsgd-delay_by_one", s, w, "bbb", "c2", "2026-11-27 09:00 UTC"), "epochs": 48}
              for s, w in [(1, 0.22), (2, 0.28)]]
    folder = tmp_path / "convergence"
    folder.mkdir()
    _write(folder / "fsdd.jsonl", base)
    _write(folder / "fsdd-48ep.jsonl", longer)
    rows = [r for r in summary_runs.convergence(folder) if r["source"] == "convergence/fsdd-48ep.jsonl"]
    (row,) = rows  # its own strategy only: fsdd.jsonl's one process and allreduce are its references, not rows
    assert row["what"] == ("adpsgd-delay_by_one, 4 learners, `configs/fsdd.yaml`, 48 epochs: final WER against one "
                           "process at the recipe's 36, over seeds")
    # seed by seed: 22 - 20 and 28 - 30 against one process; 22 - 24 and 28 - 26 against allreduce
    assert row["figure"] == ("25.0 % (22.0-28.0) against 25.0 % (20.0-30.0) on seeds 1, 2; gap +0.0 points (-2.0 to "
                             "+2.0); allreduce on the same seeds: 25.0 % (24.0-26.0), gap +0.0 points (-2.0 to +2.0)")
    assert row["status"] == "**not reached** (1 of 2 did)" and row["commit"] == "`aaa`, `bbb`"
    assert sum(r["source"] == "convergence/fsdd.jsonl" for r in summary_runs.convergence(folder)) == 2


def test_docs_distributed_md_quotes_only_figures_the_committed_runs_render():
    """docs/distributed.md's FSDD convergence paragraph is prose around the rendered rows: each decimal figure in it is
    one the rows (BENCHMARKS.md's) print, so a new run that moves a row makes this fail until the prose follows."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs/distributed.md").read_text()
    section = text[text.index("FSDD, four learners"):text.index("## Many nodes")]
    folder = root / "docs/figures/convergence"
    rendered = " ".join(r["figure"] + " " + r["status"] for r in summary_runs.convergence(folder))
    rendered += " ".join(r["figure"] for r in summary_runs.one_process_seeds(folder / "fsdd.jsonl", "fsdd", 0.05))
    quoted = re.findall(r"[+-]?\d+\.\d", section)
    assert len(quoted) >= 10
    assert [q for q in quoted if q not in rendered] == []
