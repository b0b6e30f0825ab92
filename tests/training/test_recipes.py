"""Recipe smoke tests: the shipped configs train real models on real recordings to their goals."""
import json
import pytest

from tests.conftest import run_cli, shared

pytestmark = pytest.mark.slow  # trains a recipe to its figure (minutes)


def test_yesno_recipe_reaches_zero_wer_on_kaldis_held_out_files(tmp_path):
    """configs/yesno.yaml: first 31 files train, last 29 test. Goal 0 % (about 2 minutes on 2 cores);
    the bound leaves room for one word of numeric drift on another CPU."""
    shared("yesno", "manifest.jsonl")
    run_cli("-q", "train", "--config", "configs/yesno.yaml", f"trainer.out_dir={tmp_path}", timeout=900)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in rows if r["kind"] == "val"][-1]
    assert final["utterances"] == 29 and final["wer"] <= 1 / 232, final
