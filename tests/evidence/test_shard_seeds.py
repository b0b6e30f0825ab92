"""The yesno-shards bench (issue #43 §4): the yesno recipe from its manifest and from `speechscale data shard`
output of the same 31 files, shortened to 2 epochs of one seed: both legs train, the shards' step count is the
manifest's within one batch an epoch, and the summary is recomputed from the rows."""
import statistics

import pytest

from benchmarks import tables
from benchmarks.shard_seeds import bench_shard_seeds


@pytest.mark.slow
@pytest.mark.protocol
def test_both_sources_train_the_same_number_of_steps_and_the_summary_is_their_rows():
    res = bench_shard_seeds([1], shard_size=8, overrides=("trainer.max_epochs=2",))
    rows = {r["source"]: r for r in res["rows"]}
    assert set(rows) == {"manifest", "shards"} and all(r["epochs"] == 2 for r in rows.values())
    assert rows["manifest"]["steps"] > 2  # batches, not one step an epoch
    # the same packing, up to one batch an epoch (buckets are shuffled and packed one by one, each epoch anew)
    assert abs(rows["shards"]["steps"] - rows["manifest"]["steps"]) <= 2
    for source, r in rows.items():
        assert res["summary"][source]["steps"]["median"] == statistics.median([r["steps"]])
        assert res["summary"][source]["wer"]["max"] == r["wer"]
    assert res["overrides"] == ["trainer.max_epochs=2"]
    table = tables.render("yesno-shards", {"provenance": {"date": "d", "machine": "m", "commit": "c", "torch": "t",
                                                          "command": "x"}, "results": res})
    assert f"| shards | 1 | 2 | {rows['shards']['steps']} |" in table
