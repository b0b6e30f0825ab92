"""`speechscale bench stream` (live transcription under load) and `bench soak` (the service for N minutes under
honest and hostile load; JSON and a plot)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from .args import choice_list, non_negative, out_folder, positive


def stream(args: argparse.Namespace) -> int:
    import tempfile

    from ..bench.audio import speech_files
    from ..bench.stream import bench_stream

    levels = tuple(int(x) for x in args.streams.split(","))
    if args.model and args.checkpoint:
        from ..config import ConfigError

        raise ConfigError("--model picks initial weights to serve; --checkpoint brings its own model: give one")
    with tempfile.TemporaryDirectory() as tmp:
        files = speech_files(args.manifest, tmp)
        for i, ws in enumerate(args.ws):  # stacks one after the other in one run; exactness once
            print(json.dumps(bench_stream(args.checkpoint, levels, args.seconds, args.chunk_ms, args.memory_streams,
                                          args.memory_streams // 4, exact=i == 0, ws=ws,
                                          model=args.model or "ds2-streaming-tiny", files=files,
                                          step_ms=args.step_ms)), flush=True)
    return 0


def soak(args: argparse.Namespace) -> int:
    import tempfile

    from ..bench.audio import speech_files
    from ..bench.soak import bench_soak, plot_soak, soak_table

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        result = bench_soak(args.checkpoint, args.minutes, args.interval, args.streams,
                            files=speech_files(args.manifest, tmp))
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_soak(result, out / "soak.png")
    print(soak_table(result))
    print(json.dumps(result["summary"]), flush=True)
    return 0


def register(bsub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `bench stream` and `bench soak`."""
    bs = command(bsub, "stream", "live transcription: WS /v1/stream latency with N real-time streams, the server's "
                 "real-time factor and memory over many streams")
    bs.add_argument("--checkpoint", default=None,
                    help="a streaming model's checkpoint (default: --model's initial weights)")
    bs.add_argument("--model", default=None,
                    choices=["ds2-streaming-tiny", "ds2-streaming", "conformer-streaming-tiny", "conformer-streaming"],
                    help="the streaming preset whose initial weights are served (default ds2-streaming-tiny); not with "
                         "--checkpoint")
    bs.add_argument("--streams", default="8,32", help="comma-separated concurrent streams; the server takes the most")
    bs.add_argument("--seconds", type=positive(float), default=20.0, help="audio per stream")
    bs.add_argument("--manifest", default=None, help="speech to stream (its first 20 files end to end; each also "
                    "streamed alone against its offline text) (default: synthesized speech)")
    bs.add_argument("--chunk-ms", type=positive(int), default=100, help="audio per message, sent in real time")
    bs.add_argument("--step-ms", type=positive(float), default=100.0,
                    help="the server's audio per model step (serve --stream-step-ms)")
    bs.add_argument("--memory-streams", type=non_negative(int), default=200,
                    help="streams opened and closed for the memory figure, a quarter abandoned (0: none)")
    bs.add_argument("--ws", type=choice_list(("guarded", "wsproto")), default=["guarded"],
                    help="connection stacks (serve --ws), comma-separated: one JSON line each, same run")
    bs.set_defaults(func=stream)
    bk = command(bsub, "soak", "the service for N minutes under HTTP, real-time streams and hostile clients at once: "
                 "latency and memory each interval (JSON + plot)")
    bk.add_argument("--minutes", type=positive(float), default=60.0, help="how long")
    bk.add_argument("--interval", type=positive(float), default=60.0, help="seconds per recorded interval")
    bk.add_argument("--streams", type=positive(int), default=4, help="real-time streams at any time")
    bk.add_argument("--checkpoint", default=None,
                    help="a streaming model's checkpoint (default: ds2-streaming-tiny's initial weights)")
    bk.add_argument("--out", type=out_folder, default="runs/soak", help="folder for soak.json and soak.png")
    bk.add_argument("--manifest", default=None,
                    help="speech to send (its first files end to end) (default: synthesized speech)")
    bk.set_defaults(func=soak)
