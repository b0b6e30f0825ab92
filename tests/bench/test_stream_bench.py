"""The live-transcription benchmark against a real server process and real WebSocket clients."""
import pytest

from speechscale.bench.stream import bench_stream, exactness
from tests.conftest import exactness_files, shared, speech_files


@pytest.mark.slow  # real processes end to end (make test runs it; make test-fast does not)
def test_bench_stream_times_every_chunk_refuses_one_too_many_and_counts_memory(streaming_checkpoint):
    res = bench_stream(str(streaming_checkpoint), levels=(2,), seconds=3.0, chunk_ms=100, memory_streams=8,
                       abandoned=2, exact=False, files=speech_files())
    (level,) = res["levels"]
    # every 100 ms chunk of both streams answered by its own partial, in real time (each stream takes ~3 s)
    assert level["chunks"] == 2 * 30 and level["failed_streams"] == 0 and level["wall_s"] >= 3.0, level["errors"]
    assert 0 < level["p50_ms"] <= level["p95_ms"] <= level["max_ms"] < 3000
    # the answer covers the audio sent minus the model's lookahead (20 frames of 20 ms) and its windows
    assert 0.4 <= level["behind_s_median"] <= 1.0
    assert level["refused"] == {"code": 1013, "reason": "busy: 2 streams are open; try again later"}
    assert level["healthz"]["polls"] >= 4 and level["healthz"]["answered"] == level["healthz"]["polls"]
    assert 0 < level["rtf_cpu"] < 2
    m = res["memory"]
    assert (m["streams"], m["abandoned"], m["failed"]) == (8, 2, 0)
    assert [k for k, _ in m["rss_mb_by_streams"]] == [2, 4, 6, 8] and m["warm_after"] == 8
    assert m["growth_mb"] == round(m["rss_mb_end"] - m["rss_mb_warm"], 1) and m["rss_mb_end"] > 50


def test_the_bench_counts_streamed_texts_equal_to_the_offline_ones(streaming_checkpoint):
    shared("fsdd", "recordings")
    e = exactness(str(streaming_checkpoint), exactness_files(), (320.0,))
    assert e == {"files": 20, "chunk_ms": [320.0], "pairs": 20, "equal": 20, "rate": 1.0,
                 "onnx": {"pairs": 20, "equal": 20, "rate": 1.0}, "step_frames": 10, "attention_chunk": None}


@pytest.mark.parametrize("step_ms, frames", [(100.0, 3), (160.0, 4)])
def test_the_bench_compares_a_streaming_conformer_with_its_offline_text_in_the_same_chunks(
        conformer_streaming_checkpoint, step_ms, frames):
    """100 ms steps are 12 feature frames, 3 output frames: the offline reference attends in chunks of 3; steps of
    160 ms (`serve --stream-step-ms 160`) in chunks of 4."""
    shared("fsdd", "recordings")
    e = exactness(str(conformer_streaming_checkpoint), exactness_files(), (37.0,), onnx=False, step_ms=step_ms)
    assert e == {"files": 20, "chunk_ms": [37.0], "pairs": 20, "equal": 20, "rate": 1.0, "step_frames": 4 * frames,
                 "attention_chunk": frames}


def test_bench_stream_takes_a_model_or_a_checkpoint_not_both(capsys):
    from tests.conftest import main_cli

    code, _, err = main_cli(capsys, "bench", "stream", "--model", "conformer-streaming-tiny", "--checkpoint", "x.pt")
    assert code == 2 and "give one" in err and len(err.strip().splitlines()) == 1
