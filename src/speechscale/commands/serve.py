"""`speechscale serve`: the HTTP transcription service with its web page."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from .args import check_listen, chunk_seconds, decoder_args, decoder_config, device_arg, model_file, port, positive


def serve(args: argparse.Namespace) -> int:
    from ..extras import require

    for module in ("fastapi", "uvicorn", "multipart", "websockets"):
        require(module, "serve", "speechscale serve")
    if args.ws == "wsproto":
        require("wsproto", "dev", "speechscale serve --ws wsproto")
    import os

    import torch

    from ..config import ConfigError
    from ..inference.transcribe import Transcriber
    from ..service.server import Limits
    from ..service.server import serve as run_server
    from ..streaming.opener import open_step
    from ..streaming.recognizer import step_problem

    if problem := step_problem(args.stream_step_ms):
        raise ConfigError(f"--stream-step-ms: {problem}")
    check_listen(args.host, args.port)  # before the model loads
    streams = open_step(args.stream_step) if args.stream_step else None
    if args.stream_step and streams is None:
        raise ConfigError(f"--stream-step: {args.stream_step} is not an ONNX streaming step (export --format onnx "
                          "--streaming writes one)")
    # the event loop (connections, JSON) needs a core of its own: torch's threads spinning on every core starve it
    torch.set_num_threads(args.threads or max(1, len(os.sched_getaffinity(0)) - 1))

    asr = Transcriber(args.checkpoint, chunk_seconds=args.chunk_seconds, backend=args.backend,
                      decoder=decoder_config(args), device=args.device)
    limits = Limits(max_bytes=int(args.max_mb * 1024 * 1024), max_seconds=args.max_seconds, max_batch=args.max_batch,
                    max_queue=args.max_queue, request_timeout_s=args.request_timeout, body_timeout_s=args.body_timeout,
                    max_connections=args.max_connections, decode_workers=args.decode_workers,
                    max_streams=args.max_streams, stream_max_seconds=args.stream_max_seconds,
                    stream_idle_s=args.stream_idle, stream_send_timeout_s=args.stream_send_timeout,
                    stream_step_ms=args.stream_step_ms,
                    header_timeout_s=args.header_timeout, drain_timeout_s=args.drain_timeout,
                    allowed_hosts=args.allowed_host or [], docs=args.docs)
    print(f"speechscale serve: http://{args.host}:{args.port}/ ({asr.comps.model_name})", file=sys.stderr, flush=True)
    run_server(asr, args.host, args.port, limits, ws=args.ws, stream_model=streams)
    return 0


def register(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add `serve` to the subcommand table."""
    sv = command(sub, "serve", "an HTTP transcription service with a web page (POST /v1/transcribe, GET /healthz)")
    sv.add_argument("--checkpoint", required=True, type=model_file,
                    help="a checkpoint, a file `speechscale export` wrote, or a run folder (its best.pt)")
    sv.add_argument("--stream-step", default=None, type=model_file,
                    help="an ONNX streaming step (export --streaming) that WS /v1/stream runs in onnxruntime, in place "
                         "of the checkpoint's model in PyTorch (its chunk is fixed when exported: --stream-step-ms "
                         "does not apply)")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    sv.add_argument("--port", type=port, default=8000, help="TCP port")
    sv.add_argument("--backend", default="auto", choices=["auto", "torch", "onnx", "torchscript"],
                    help="model runtime (auto: the one the file needs)")
    device_arg(sv)
    sv.add_argument("--max-mb", type=positive(float), default=20.0, help="largest request body (MB)")
    sv.add_argument("--max-seconds", type=positive(float), default=60.0, help="longest audio per request (s)")
    sv.add_argument("--max-batch", type=positive(int), default=16, help="requests transcribed together")
    sv.add_argument("--chunk-seconds", type=chunk_seconds, default=None, metavar="auto|SECONDS",
                    help="long audio is cut at its pauses into chunks at most this long (default auto: as "
                         "transcribe's)")
    sv.add_argument("--max-queue", type=positive(int), default=64,
                    help="requests waiting for the model; more are refused with 503 and Retry-After")
    sv.add_argument("--request-timeout", type=positive(float), default=60.0,
                    help="seconds from decoded audio to answer before 504")
    sv.add_argument("--body-timeout", type=positive(float), default=10.0,
                    help="seconds for the whole request body to arrive before 408 (slow clients)")
    sv.add_argument("--max-connections", type=positive(int), default=128,
                    help="open connections and requests in flight; more are refused with 503")
    sv.add_argument("--decode-workers", type=positive(int), default=4, help="threads that decode uploads")
    sv.add_argument("--allowed-host", action="append", default=None, metavar="HOST",
                    help="a Host name clients may use besides loopback and --host (repeatable; '*' allows any)")
    sv.add_argument("--docs", action="store_true", help="serve the OpenAPI page at /docs")
    sv.add_argument("--threads", type=positive(int), default=None,
                    help="torch's threads for the model (default: this machine's cores less one, at least one; the "
                         "connections keep a core)")
    sv.add_argument("--max-streams", type=positive(int), default=64,
                    help="WS /v1/stream: open streams; more are closed (1013, try again later)")
    sv.add_argument("--stream-max-seconds", type=positive(float), default=3600.0, help="audio per stream")
    sv.add_argument("--stream-idle", type=positive(float), default=30.0,
                    help="seconds a stream may send nothing before it is closed")
    sv.add_argument("--stream-send-timeout", type=positive(float), default=10.0,
                    help="seconds a stream's client may leave the server's messages unread before it is closed")
    sv.add_argument("--stream-step-ms", type=positive(float), default=100.0,
                    help="audio per model step, rounded up to whole output frames: longer steps cost less CPU per "
                         "stream and decide later (a streaming conformer attends in chunks of a step's frames)")
    sv.add_argument("--header-timeout", type=positive(float), default=10.0,
                    help="seconds for a request's line and headers to arrive (408), and a stream's start message (1008)")
    sv.add_argument("--drain-timeout", type=positive(float), default=20.0,
                    help="on SIGTERM, seconds open streams may go on before the server finishes them (1001)")
    sv.add_argument("--ws", default="guarded", choices=["guarded", "wsproto"],
                    help="the connection stack: guarded (service/transport.py), or uvicorn's wsproto without its "
                         "limits, for comparison")
    decoder_args(sv)
    sv.set_defaults(func=serve)
