"""The README is the contract: its commands exist and run."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from speechscale.cli import build_parser
from tests.conftest import ROOT, shared

README = (ROOT / "README.md").read_text()
# the README's front page and the reference pages it links: their commands are exercised alike
DOCS = "\n".join([README, *(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))])


def _commands(prefix, text=DOCS):
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line.startswith(prefix)]


def test_the_two_commands_come_first_and_ci_runs_the_test_command():
    assert _commands("make ", README)[:2] == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_speechscale_command_in_the_readme_parses():
    cmds = _commands("speechscale ")
    assert {shlex.split(c)[1] for c in cmds} >= {"synth", "train", "eval", "transcribe", "bench"}
    for c in cmds:
        try:
            build_parser().parse_args(shlex.split(c)[1:])
        except SystemExit as e:  # --version and --help exit 0; an unknown flag exits 2
            assert e.code == 0, c


def test_torchrun_commands_in_the_readme_launch_a_valid_speechscale_command():
    """tests/distributed runs such launches for real; here the README's own lines must parse."""
    cmds = _commands("torchrun ")
    assert cmds
    for c in cmds:
        argv = shlex.split(c)
        build_parser().parse_args(argv[argv.index("speechscale.cli") + 1:])


@pytest.mark.slow
def test_make_demo_runs_end_to_end_on_a_small_budget(tmp_path):
    """`make demo` itself, with the corpus and training cut down so that it fits in the test budget."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    venv = Path(sys.prefix)
    # -o: the environment is already set up (this test runs inside it); do not reinstall it.
    args = ["make", "demo", f"VENV={venv}", "-o", f"{venv}/.installed-demo", f"DEMO_DIR={tmp_path}/demo", "DEMO_MINUTES=0.5",
            "DEMO_ARGS=trainer.max_steps=2 trainer.progress=false"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WER" in proc.stdout and "CER" in proc.stdout
    assert (tmp_path / "demo" / "checkpoints" / "last.pt").is_file()
    counts = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert counts["train"] > 5 and counts["test"] > 0


def test_shipped_recipes_read_their_corpus_from_data_root():
    """With data.root at the corpus's folder (what `data download NAME --out DIR` writes), each recipe's
    manifests are real files."""
    from speechscale.config import load_config

    for name in ["fsdd", "yesno", "ldc93s1", "fsdd_conformer", "yesno_adpsgd", "fsdd_adpsgd"]:
        corpus = name.split("_")[0]
        cfg = load_config(name, [f"data.root={shared(corpus)}"])
        assert Path(cfg.data.train_manifest).is_file() and Path(cfg.data.val_manifest).is_file(), name


def test_the_license_file_matches_the_declared_license():
    declared = re.search(r'^license = "(.+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)
    text = (ROOT / "LICENSE").read_text()
    assert declared == "Apache-2.0" and "Apache License" in text and "Version 2.0, January 2004" in text


def test_make_test_fast_runs_the_unit_tests_and_make_test_everything_but_the_protocols():
    makefile = (ROOT / "Makefile").read_text()
    run = re.search(r"^PYTEST_RUN += (.*)$", makefile, flags=re.M).group(1)
    assert run == ("PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) "
                   "--dist loadfile --no-loadscope-reorder")  # the files in conftest's order: tests/test_conftest.py
    assert re.search(r"^PYTEST_WORKERS \?= 3$", makefile, flags=re.M)  # one set aside: tests/test_conftest.py
    assert re.search(r'^test-fast: setup lint\n\t\$\(PYTEST_RUN\) -m "not slow and not protocol" --durations=15',
                     makefile, flags=re.M)
    # every test but this repository's measurement protocols run end to end (make test-evidence runs those);
    # nothing installed outside .venv
    assert re.search(r'^test: setup lint\n\t\$\(PYTEST_RUN\) -m "not protocol" --durations=15 \$\(PYTEST_ARGS\)\n',
                     makefile, flags=re.M)
    assert re.search(r"^test-evidence: setup lint\n\t\$\(PYTEST_RUN\) tests/evidence --durations=15 \$\(PYTEST_ARGS\)\n",
                     makefile, flags=re.M)
    assert "make test-fast" in DOCS


def test_every_shipped_recipe_ends_by_its_epochs_and_a_time_cap_is_only_a_guard():
    """A recipe stopped by a time cap measures the machine, not the recipe (issue #20 §3)."""
    import yaml

    for path in sorted((ROOT / "configs").glob("[!_]*.yaml")):
        trainer = yaml.safe_load(path.read_text()).get("trainer", {})
        assert trainer.get("max_epochs", 0) > 0 or trainer.get("max_steps", 0) > 0, path.name
        if trainer.get("max_minutes"):
            line = next(x for x in path.read_text().splitlines() if x.strip().startswith("max_minutes:"))
            assert "only a guard" in line, (path.name, line)



def _front_page() -> str:
    return README.split("\n## Reference\n")[0]


def test_the_front_page_is_short_and_links_every_reference_page():
    front = _front_page()
    assert len(front.splitlines()) <= 150 and "\n## Reference\n" in README
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in README, page.name
    assert "Conformer-CTC" in front.split("\n## ")[0]  # the tagline names every model family


def test_the_front_pages_tables_are_their_committed_data():
    """The models table's throughput is gpu-graphs.json's graphed bf16 row of each family (what training runs on a
    GPU by default); the recipes table is what `speechscale recipes` renders (itself checked against its JSON in
    tests/test_recipes_index.py)."""
    from speechscale.commands.recipes import markdown_table

    front = _front_page()
    assert markdown_table() in front
    rows = json.loads((ROOT / "docs/figures/gpu/gpu-graphs.json").read_text())["results"]
    for family, model in [("DeepSpeech2", "ds2-large"), ("Wav2Letter+", "wav2letter+"), ("LSTM-CTC", "lstm-ctc"),
                          ("Conformer-CTC", "conformer")]:
        r = next(x for x in rows if x["model"] == model and x["precision"] == "bf16+graphs" and x["batch_size"] == 32)
        line = next(x for x in front.splitlines() if x.startswith(f"| {family} |"))
        assert f"{r['audio_seconds_per_second_compute']:,.0f} (`{model}`, {r['params'] / 1e6:.1f} M)" in line, line
    recipes = {x["recipe"]: x for x in json.loads((ROOT / "docs/figures/bench-all/recipes.json").read_text())["results"]}
    demo = json.loads((ROOT / "docs/figures/bench-all/demo.json").read_text())["results"][0]
    assert f"CER {100 * demo['cer']:.1f} % on the demo's unseen voice" in front
    assert f"WER {100 * recipes['yesno-conformer']['wer']:.1f} % on yesno's 29 test files" in front
    # the quick start's sentences: the archive's size, yesno's training time, graphed against eager
    from speechscale.data.download import CORPORA

    assert f"# {CORPORA['yesno'].download_mb:g} MB from OpenSLR" in front
    assert f"# about {recipes['yesno']['wall_seconds'] / 60:.1f} minutes on 2 CPU cores" in front
    ratios = [next(x for x in rows if x["model"] == m and x["precision"] == "bf16+graphs")["audio_seconds_per_second_compute"]
              / next(x for x in rows if x["model"] == m and x["precision"] == "bf16")["audio_seconds_per_second_compute"]
              for m in ("ds2-large", "wav2letter+", "lstm-ctc", "conformer")]
    assert f"{min(ratios):.1f}-{max(ratios):.0f}x the eager step" in front, ratios


@pytest.mark.slow
def test_the_quick_start_and_the_python_example_run(tmp_path, serve):
    """The front page's commands, in order, in a fresh folder: the download from a loopback mirror of a yesno
    archive built from the real recordings, training cut to 3 steps; then its Python example (2 steps)."""
    from tests.archives import md5, yesno_archive

    archive = yesno_archive()
    server = serve({"waves_yesno.tar.gz": archive})
    quick = README.split("## Quick start")[1].split("```bash\n")[1].split("```")[0]
    cmds = [shlex.split(line.split("#")[0]) for line in quick.splitlines() if line.strip()]
    assert [c[1] for c in cmds] == ["recipes", "data", "train", "info", "transcribe"]
    extra = {"data": ["--mirror", server.url, "--checksum", f"waves_yesno.tar.gz=md5:{md5(archive)}"],
             "train": ["trainer.max_steps=3"]}
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for c in cmds:
        proc = subprocess.run([sys.executable, "-m", "speechscale.cli", *c[1:], *extra.get(c[1], [])], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, (c, proc.stderr[-2000:])
    assert proc.stdout.startswith("data/yesno/waves_yesno/1_0_0_0_0_0_0_1.wav\t")
    python = README.split("## From Python")[1].split("```python\n")[1].split("```")[0]
    python = python.replace('"max_epochs": 20', '"max_steps": 2')
    assert '"max_steps": 2' in python  # the example trains 2 steps here, not its 20 epochs
    proc = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].endswith("]"), proc.stderr[-2000:]
