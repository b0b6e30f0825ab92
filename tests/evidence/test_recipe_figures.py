"""Each figure `speechscale recipes` prints is the committed measurement benchmarks/recipe_sources.yaml names (to the
printed digits): the catalog in the wheel holds the figures, the workshop knows where they came from."""
import json
import statistics

import pytest
import yaml

from speechscale.commands.recipes import catalog
from tests.conftest import ROOT

SOURCES = yaml.safe_load((ROOT / "benchmarks" / "recipe_sources.yaml").read_text())


def test_every_catalog_figure_names_its_source_and_back():
    assert set(SOURCES) == {n for n, e in catalog().items() if e["result"]}


@pytest.mark.parametrize("name", [n for n, e in catalog().items() if e["result"]])
def test_a_catalog_result_is_its_committed_measurement(name):
    """The figures `speechscale recipes` prints are those of the JSON the entry names (to the printed digits)."""
    entry, source = catalog()[name], SOURCES[name]
    r = entry["result"]
    path, _, recipe = source["result"].partition("#")
    if path.endswith(".jsonl"):  # bench convergence's runs of one strategy, one line each
        lines = [json.loads(x) for x in (ROOT / path).read_text().splitlines()]
        runs = [{"wer": x["final_wer"], "cer": x["final_cer"], "minutes": x["minutes"], "seed": x["seed"],
                 "machine": x["provenance"]["machine"]} for x in lines if x["strategy"] == recipe]
        base = {x["seed"]: x["final_wer"] for x in lines if x["strategy"] == r.get("goal_vs")}
    else:
        doc = json.loads((ROOT / path).read_text())
        results = doc["results"]
        if "wer_range" in r:  # bench yesno-shards: the runs from the manifest
            runs = [{**x, "minutes": x["wall_seconds"] / 60, "machine": doc["provenance"]["machine"]}
                    for x in results["rows"] if x["source"] == recipe]
    if "wer_range" in r:  # over seeds: medians, range, count
        wer = [x["wer"] for x in runs]
        assert r["seeds"] == len(runs) >= 3 and r["wer"] == pytest.approx(statistics.median(wer), abs=5e-5)
        assert r["cer"] == pytest.approx(statistics.median(x["cer"] for x in runs), abs=5e-5)
        assert r["wer_range"] == pytest.approx([min(wer), max(wer)], abs=5e-5)
        if "goal_vs" in r:  # the goal, another strategy's WER on the same seed (one process: the paper's claim)
            assert r["seeds_reached"] == sum(x["wer"] <= base[x["seed"]] for x in runs)
        else:  # the goal, a WER (0 unless said)
            assert r["seeds_reached"] == sum(w <= r.get("goal_wer", 0) for w in wer)
        assert r["reached"] == (r["seeds_reached"] == len(runs))
        two = [x for x in runs if x["machine"].startswith("2 cores")]  # the time printed: the runs on 2 cores
        assert two and entry["minutes"]["where"] == "2 CPU cores"
        if "minutes" not in source:
            assert entry["minutes"]["cpu"] == pytest.approx(statistics.median(x["minutes"] for x in two), abs=0.01)
            return
        # seeds trained side by side: the time is the recipe's own run, alone on the cores
        path, _, recipe = source["minutes"].partition("#")
        doc = json.loads((ROOT / path).read_text())
        res = doc["results"]
        row = next(x for x in res if x["recipe"] == recipe) if isinstance(res, list) else res[recipe]
        assert entry["minutes"]["cpu"] == pytest.approx(row["train_minutes"], abs=0.01)
        assert doc["provenance"]["machine"].startswith("2 cores")
        return
    row = next(x for x in results if x["recipe"] == recipe) if isinstance(results, list) else results[recipe]
    assert r["wer"] == pytest.approx(row["wer"], abs=5e-5) and r["cer"] == pytest.approx(row["cer"], abs=5e-5)
    assert r["reached"] == row["reached"] and entry["minutes"]["cpu"] == pytest.approx(row["train_minutes"], abs=0.01)
    assert doc["provenance"]["machine"].startswith("2 cores") and entry["minutes"]["where"] == "2 CPU cores"
