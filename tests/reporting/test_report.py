"""`speechscale report`: a real run resumed twice, a run still being written, old logs, and the page in
headless Chromium."""
import json
import shutil

import pytest

from speechscale.reporting.report import write_report
from speechscale.reporting.runs import load_run, throughput
from tests.conftest import DATA, headless_chromium, shared

TRAIN = ["-q", "train", "--config", "configs/ldc93s1.yaml", "trainer.log_every=1", "trainer.val_every_steps=2",
         "trainer.target_wer=-1", "trainer.resume=auto", f"data.root={DATA / 'ldc93s1'}"]


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """LDC93S1 trained to step 3, resumed to 5, resumed again to 7: three starts in one folder. Each start is
    `speechscale train` in this process: as three processes, their imports made the fixture 14 s on an idle
    machine (29 s in the suite), in-process 5 s. The run log does not know the difference."""
    from speechscale.cli import main

    shared("ldc93s1", "manifest.jsonl")  # skips (saying why) where ../shared/data is missing
    out = tmp_path_factory.mktemp("run")
    for steps in (3, 5, 7):
        assert main([*TRAIN, f"trainer.out_dir={out}", f"trainer.max_steps={steps}"]) == 0
    return out


@pytest.mark.slow  # real processes end to end (make test runs it; make test-fast does not)
def test_the_run_log_records_each_start_with_where_it_resumed_from(resumed_run):
    run = load_run(resumed_run)
    assert [s.start_step for s in run.segments] == [0, 3, 5]
    assert run.segments[0].resumed_from is None and "step-000000003" in run.segments[1].resumed_from
    assert all(s.ended and s.stopped_by is None for s in run.segments) and run.status == "finished"
    assert [r["step"] for r in run.of("train")] == list(range(1, 8))
    assert all(v > 0 for _, _, v in throughput(run))
    assert any((resumed_run / "tensorboard").iterdir())  # TensorBoard keeps working beside the report


@pytest.mark.slow  # shares the three real training runs of resumed_run
def test_report_cli_writes_a_self_contained_page_that_chromium_renders(resumed_run, tmp_path, cli):
    proc = cli("report", str(resumed_run), "--out", str(tmp_path / "rep"))
    index = tmp_path / "rep" / "index.html"
    assert proc.stdout.strip() == str(index)
    pngs = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert {"loss.png", "error_rates.png", "lr.png", "throughput.png"} <= set(pngs)
    text = index.read_text()
    assert text.count("data:image/png;base64,") == len(pngs) and "step-000000005" in text
    moved = tmp_path / "elsewhere.html"  # self-contained: it renders without the PNG files beside it
    shutil.copy(index, moved)
    browser = headless_chromium(size="1200,900")
    from selenium.webdriver.common.by import By

    try:
        browser.get(moved.as_uri())
        assert browser.title.startswith("speechscale run report")
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
        assert len(images) == len(pngs)
        assert all(done and w > 400 and h > 100 for _, done, w, h in images), images
        rows = browser.find_elements(By.XPATH, "//h2[text()='Starts, resumes and restarts']/following-sibling::table[1]//tr")
        assert len(rows) == 1 + 3
        assert '"name": "ds2-tiny"' in browser.find_element(By.ID, "config").text
    finally:
        browser.quit()


@pytest.mark.slow  # shares the three real training runs of resumed_run
def test_a_run_still_being_written_is_reported(resumed_run, tmp_path):
    live = tmp_path / "live"
    live.mkdir()
    lines = (resumed_run / "metrics.jsonl").read_text().splitlines()
    cut = max(i for i, line in enumerate(lines) if '"kind": "start"' in line)  # the third process, mid-run
    (live / "metrics.jsonl").write_text("\n".join(lines[:cut + 3]) + '\n{"kind": "train", "ti')
    run = load_run(live)
    assert run.torn_lines == 1 and run.status.startswith("running") and len(run.segments) == 3
    assert not run.segments[-1].ended
    assert write_report(live).is_file()


def test_old_logs_without_start_rows_split_where_the_step_goes_back(tmp_path):
    rows = [{"kind": "train", "time": 100 + s, "step": s, "epoch": 0, "lr": 1e-3, "loss": 1.0 / s} for s in (1, 2, 3, 4)]
    rows += [{"kind": "train", "time": 200 + s, "step": s, "epoch": 0, "lr": 1e-3, "loss": 1.0 / s} for s in (3, 4, 5)]
    rows += [{"kind": "val", "time": 210, "step": 5, "epoch": 1, "train_loss": 0.2, "val_loss": 0.3, "wer": 0.5,
              "cer": 0.2, "consensus_distance": 0.01, "bad_audio": 2, "loader_restarts": 1}]
    rows += [{"kind": "train", "time": 211, "step": 6, "epoch": 1, "lr": 1e-3, "loss": 0.1, "loss_scale": 1024.0}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    run = load_run(tmp_path)
    assert [s.start_step for s in run.segments] == [1, 3]
    write_report(tmp_path)
    made = {p.name for p in (tmp_path / "report").glob("*.png")}
    assert {"consensus.png", "loss_scale.png", "skipped.png"} <= made and "memory.png" not in made
    assert "<td>loader restarts (a worker died)</td><td>1</td>" in (tmp_path / "report" / "index.html").read_text()


def test_report_of_a_folder_without_metrics_is_one_line(tmp_path, cli):
    proc = cli("report", str(tmp_path), check=False)
    assert proc.returncode == 2 and "no metrics.jsonl" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_foreign_or_damaged_log_is_one_line_or_skipped_rows(tmp_path, cli):
    (tmp_path / "metrics.jsonl").write_bytes(bytes(range(128, 256)) * 8)
    proc = cli("report", str(tmp_path), check=False)
    assert proc.returncode == 2 and "not UTF-8 text" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = cli("report", str(tmp_path / "metrics.jsonl"), check=False)
    assert proc.returncode == 2 and "not a folder" in proc.stderr
    good = {"kind": "train", "time": 100, "step": 1, "loss": 2.0, "samples": 8}
    bad = [{"kind": "train", "time": 101, "step": "2", "loss": 1.0}, {"kind": "train", "time": "x", "step": 3},
           {"kind": 5, "time": 102, "step": 4}, {"kind": "train", "time": 103, "step": 5, "samples": "many"},
           {"kind": "train", "time": float("inf"), "step": 6}, {"kind": "train", "time": 104, "step": True},
           {"kind": "val", "time": 105, "step": 7, "wer": 0.5, "cer": 0.2, "bad_audio": "two"}]
    lines = [json.dumps(good)] + [json.dumps(r) for r in bad]
    lines += [json.dumps({"kind": "train", "time": 106, "step": 8, "loss": float("nan"), "samples": 16}),
              json.dumps({"kind": "train", "time": 107, "step": 9, "loss": 1e300, "samples": 1e300})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "config.json").write_text('{"model": [1]}')
    run = load_run(tmp_path)
    assert [r["step"] for r in run.rows] == [1, 8, 9] and run.torn_lines == len(bad)
    page = write_report(tmp_path).read_text()
    assert "(7 unreadable, skipped)" in page and "Loss (CTC per target token)" in page
