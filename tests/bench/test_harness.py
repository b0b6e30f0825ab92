"""The shared bench harness: interleaving in rotating order, medians and spread, provenance."""
import json

import pytest

from speechscale.bench.harness import interleave, provenance, summarize, write_json


def test_interleave_rotates_the_order_and_times_each_variant(monkeypatch):
    """On a clock the variants advance themselves (a by 1, b by 3 units): each call's own time, exactly."""
    from speechscale.bench import harness

    now, calls, syncs = [0.0], [], []
    monkeypatch.setattr(harness, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])}))

    def variant(name, cost):
        def call():
            calls.append(name)
            now[0] += cost
            return cost
        return call

    stats = interleave({"a": variant("a", 1.0), "b": variant("b", 3.0)}, repeats=4, warmup=1,
                       sync=lambda: syncs.append(now[0]))
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]  # round r starts at variant r mod 2
    assert stats["a"].n == stats["b"].n == 4 and stats["a"].extra == [1.0] * 4
    assert stats["a"].median == 1.0 and stats["b"].median == 3.0 and stats["b"].p90 == 3.0
    assert len(syncs) == 2 * len(calls)  # before and after every call, warm-up included


def test_summary_statistics():
    st = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert st.median == 3.0 and st.p10 == pytest.approx(1.4) and st.p90 == pytest.approx(61.6)
    assert st.brief(1.0) == {"median": 3.0, "p10": 1.4, "p90": 61.6, "n": 5}
    assert summarize([3.0, 1.0, 2.0], ["c", "a", "b"]).at_median() == ["b"]
    assert summarize([4.0, 1.0, 3.0, 2.0], "dabc").at_median() == ["b", "c"]  # the two middle calls, in call order


def test_results_carry_machine_date_commit_and_command(tmp_path):
    doc = write_json(tmp_path / "x.json", [{"a": 1}], ["speechscale", "bench", "x"], 1.5, {"k": 2})
    p = doc["provenance"]
    assert p["command"] == "speechscale bench x" and "cores" in p["machine"] and p["commit"] != "unknown"
    assert json.loads((tmp_path / "x.json").read_text())["settings"] == {"k": 2}
    assert provenance()["date"].endswith("UTC")
    # the vector extension is named: runs on CPUs with other kernels (AVX2, AVX-512) do not reproduce bit for bit
    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    assert ("(AVX-512)" in p["machine"]) == ("avx512f" in flags)
    assert ("(AVX2)" in p["machine"]) == ("avx2" in flags and "avx512f" not in flags)
