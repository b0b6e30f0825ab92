"""The built-in recipes: each one listed by `speechscale recipes`, loadable by name, its data behind data.root, its
comments configuration only (tests/evidence/test_recipe_figures.py checks the figures the catalog prints)."""
import re

import pytest

from speechscale.commands.recipes import catalog
from speechscale.config import RECIPES, ConfigError, builtin_recipes, load_config
from tests.conftest import ROOT, main_cli

# what a recipe's comment may not say: dates, measured outcomes, or files the wheel does not hold
HISTORY = re.compile(r"20\d\d-\d\d-\d\d|\b(took|ended at|measured|seeds? \d)\b|docs/|BENCHMARKS|LESSONS|\.json\b|configs/")


def test_every_recipe_file_has_a_catalog_entry_and_back():
    import yaml

    index = yaml.safe_load((RECIPES / "_index.yaml").read_text())
    assert set(index) == set(builtin_recipes()) == {p.stem for p in (ROOT / "configs").glob("[!_]*.yaml")}
    for name, entry in catalog().items():
        assert {"about", "model", "data", "result", "minutes"} <= set(entry), name
        assert load_config(name, ["data.root=/corpus"]).model.name == entry["model"], name


def test_a_recipe_that_needs_data_root_says_so_in_one_line():
    with pytest.raises(ConfigError) as info:
        load_config("yesno")
    assert "data.root is not set" in str(info.value) and "manifest.jsonl" in str(info.value)
    cfg = load_config("yesno", ["data.root=/corpus/yesno", "data.val_manifest=/elsewhere/test.jsonl"])
    assert cfg.data.train_manifest == "/corpus/yesno/manifest.jsonl"  # relative: read from data.root
    assert cfg.data.val_manifest == "/elsewhere/test.jsonl"          # absolute: as given
    again = load_config(None, [f"data.root={cfg.data.root}", f"data.train_manifest={cfg.data.train_manifest}"])
    assert again.data.train_manifest == cfg.data.train_manifest      # a written-out config reads back the same


def test_recipes_lists_shows_and_trains_by_name(capsys, tmp_path):
    code, out, _ = main_cli(capsys, "recipes")
    assert code == 0 and all(f"\n{n} " in f"\n{out}" for n in builtin_recipes())
    assert "medians over 3 seeds (goal WER 0 %: reached on " in out  # yesno's committed figures, over seeds
    code, out, _ = main_cli(capsys, "recipes", "show", "yesno")
    assert code == 0 and out == (RECIPES / "yesno.yaml").read_text()
    code, _, err = main_cli(capsys, "recipes", "show", "nope")
    assert code == 2 and "built-in recipes: demo" in err
    code, out, _ = main_cli(capsys, "train", "--config", "yesno", "--print-config", "data.root=d")
    assert code == 0 and "  train_manifest: d/manifest.jsonl" in out


def test_fsdd_adpsgd_is_the_fsdd_recipe_as_bench_convergence_ran_its_fixed_ring():
    """The catalog's fsdd_adpsgd figures are bench convergence's fixed-ring runs: configs/fsdd.yaml with the
    strategy's overrides and one thread a learner; the recipe must be exactly that (its out_dir and time guard
    aside)."""
    from dataclasses import asdict

    from speechscale.bench.straggler import STRATEGY_RUNS

    guard = ["trainer.out_dir=o", "trainer.max_minutes=120", "data.root=/corpus"]
    ring = asdict(load_config("fsdd_adpsgd", guard))
    bench = asdict(load_config("fsdd", [*guard, *STRATEGY_RUNS["adpsgd-fixed_ring"], "trainer.threads=1"]))
    assert ring == bench
    for variant in ("random_ring", "delay_by_one"):  # the header's other strategies: the bench's runs of them too
        assert asdict(load_config("fsdd_adpsgd", [*guard, f"distributed.adpsgd.variant={variant}"])) == \
            asdict(load_config("fsdd", [*guard, *STRATEGY_RUNS[f"adpsgd-{variant}"], "trainer.threads=1"]))
    assert asdict(load_config("fsdd", [*guard, "trainer.threads=1"])) == \
        asdict(load_config("fsdd", [*guard, *STRATEGY_RUNS["allreduce"], "trainer.threads=1"]))


def test_a_recipe_comments_on_what_it_is_never_on_what_it_measured():
    """Results and their history live in the catalog's data; a recipe names no file the wheel does not hold."""
    for path in sorted(RECIPES.glob("*.yaml")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            comment = line.partition("#")[2]
            where = f"{path.name}:{n}: {line.strip()}"
            assert not HISTORY.search(comment), where
