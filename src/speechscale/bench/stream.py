"""Live transcription under load: `speechscale serve` in its own process, N WebSocket clients streaming real
speech in real time to `/v1/stream`.

    speechscale bench stream [--checkpoint CKPT] --streams 8,32 --seconds 20 --chunk-ms 100 [--step-ms 100]

Per level, every client sends a chunk of `chunk_ms` of 16-bit PCM when that much audio has "happened" (its
start staggered within one chunk), with `"partials": "every"`: the server answers every audio message with a
partial, in order. A chunk's latency is the time from its send to the partial that answers it; that partial
covers the audio up to the chunk's end minus the model's lookahead (reported as `behind_s`: the audio sent minus
the answer's `decided_s`, which the lookahead and the feature/convolution windows set). The server's CPU time
over the level divided by the audio streamed is its real-time factor (CPU seconds per audio second; the
machine's cores bound how many streams keep up). Meanwhile /healthz is polled; at the level equal to the
server's `--max-streams`, one more stream must be refused with close code 1013.

Memory: `memory_streams` streams (a quarter of them abandoned mid-stream: the socket closed without the end
message) as fast as the server takes them, 8 at a time; the server's resident set (VmRSS, not the peak) after
the first 20 (once warm) against the end.

`step_ms` is the server's audio per model step (`serve --stream-step-ms`), and the exactness run's.
"""
from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from .audio import speech
from .ports import free_port

MODEL = "ds2-streaming-tiny"


def initial_streaming_checkpoint(path: Path, model: str = MODEL) -> Path:
    """A streaming preset's initial weights on unnormalized features (latency does not depend on the weights), with
    the features its family was designed for."""
    import torch

    from ..components import build_components
    from ..config import to_dict
    from ..models.registry import RECOMMENDED_FEATURES
    from ..recipe import load_recipe

    features = [f"features.{k}={v}" for k, v in RECOMMENDED_FEATURES.get(model, {}).items()]
    cfg = load_recipe(None, [f"model.name={model}", "features.normalize=none", *features])
    torch.save({"format_version": 3, "config": to_dict(cfg), "model": build_components(cfg).model.state_dict()},
               path)
    return path


class _Server:
    """`speechscale serve` in a subprocess on a free loopback port; its CPU time and resident set."""

    def __init__(self, checkpoint: str, max_streams: int, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "speechscale.cli", "serve", "--checkpoint", checkpoint,
                                      "--port", str(self.port), "--max-streams", str(max_streams), *flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(1200):
            if self.healthz() is not None:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"speechscale serve exited with {self.proc.returncode} before it answered")
            time.sleep(0.1)
        raise RuntimeError("speechscale serve did not answer /healthz within 120 s")

    def healthz(self) -> float | None:
        """Seconds /healthz took, or None when it did not answer 200 within 5 s."""
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=5) as r:
                return time.perf_counter() - started if r.status == 200 else None
        except OSError:
            return None

    def cpu_s(self) -> float:
        """User + system CPU seconds of the server process so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        """The server's resident set now (VmRSS), MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _connect(url: str, partials: str = "every") -> Any:
    """An open /v1/stream after its start message and the server's ready (or the close frame: (code, reason))."""
    import websocket

    ws = websocket.create_connection(url.replace("http", "ws") + "/v1/stream", timeout=120)
    ws.send(json.dumps({"type": "start", "sample_rate": 16000, "encoding": "pcm16", "partials": partials}))
    opcode, data = ws.recv_data(control_frame=True)
    if opcode == websocket.ABNF.OPCODE_CLOSE:
        ws.close()
        return (struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None, data[2:].decode())
    if json.loads(data).get("type") != "ready":
        raise RuntimeError(f"expected ready, got {data!r}")
    return ws


class _Stream(threading.Thread):
    """One real-time client: chunks sent on the audio's clock, every answer timed."""

    def __init__(self, ws: Any, audio: np.ndarray, chunk: int, t0: float) -> None:
        super().__init__(daemon=True)
        self.ws, self.audio, self.chunk, self.t0 = ws, audio, chunk, t0
        self.sent: list[float] = []
        self.answers: list[tuple[float, float]] = []  # (receive time, decided_s)
        self.error: str | None = None
        self.text = ""
        self.ended = False  # the end message arrived

    def run(self) -> None:
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        try:
            for lo in range(0, len(self.audio), self.chunk):
                due = self.t0 + (lo + self.chunk) / 16000
                time.sleep(max(0.0, due - time.perf_counter()))
                self.sent.append(time.perf_counter())
                self.ws.send_binary(self.audio[lo:lo + self.chunk].tobytes())
            self.ws.send(json.dumps({"type": "end"}))
        except Exception as e:  # noqa: BLE001 - reported in the row
            self.error = f"{type(e).__name__}: {e}"
        reader.join(timeout=120)
        self.ws.close()

    def _read(self) -> None:
        try:
            while True:
                msg = json.loads(self.ws.recv())
                if msg["type"] == "partial":
                    self.answers.append((time.perf_counter(), msg["decided_s"]))
                elif msg["type"] == "end":
                    self.text, self.ended = msg["text"], True
                    return
        except Exception as e:  # noqa: BLE001
            self.error = self.error or f"{type(e).__name__}: {e}"


def _level(server: _Server, n: int, audio: np.ndarray, seconds: float, chunk_ms: int, limit: int) -> dict[str, Any]:
    chunk = 16000 * chunk_ms // 1000
    span = int(seconds * 16000)
    conns = [_connect(server.url) for _ in range(n)]
    refused = None
    if n >= limit:  # one more than the server takes: a clean refusal, not a hang
        extra = _connect(server.url)
        refused = {"code": extra[0], "reason": extra[1]} if isinstance(extra, tuple) else {"code": None}
        if not isinstance(extra, tuple):
            extra.close()
    health: list[float | None] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            health.append(server.healthz())

    cpu0, started = server.cpu_s(), time.perf_counter()
    t0 = started + 0.2
    step = chunk / 16000 / n
    streams = [_Stream(ws, audio[(i * 3 % 8) * 16000:][:span], chunk, t0 + i * step)
               for i, ws in enumerate(conns)]
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    for s in streams:
        s.start()
    for s in streams:
        s.join(timeout=seconds + 300)
    stop.set()
    poller.join()
    wall, cpu = time.perf_counter() - started, server.cpu_s() - cpu0
    lat, behind, errors = [], [], [s.error for s in streams if s.error]
    for s in streams:
        for i, sent in enumerate(s.sent):
            if i < len(s.answers):
                got, decided = s.answers[i]
                lat.append(got - sent)
                behind.append(min(len(s.audio), (i + 1) * chunk) / 16000 - decided)
    lat.sort()
    ok = [h for h in health if h is not None]
    return {"streams": n, "seconds": seconds, "chunk_ms": chunk_ms, "chunks": len(lat),
            "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "p95_ms": round(1000 * lat[int(0.95 * (len(lat) - 1))], 1) if lat else None,
            "max_ms": round(1000 * lat[-1], 1) if lat else None,
            "behind_s_median": round(statistics.median(behind), 3) if behind else None,
            "rtf_cpu": round(cpu / (n * seconds), 3), "wall_s": round(wall, 1),
            "healthz": {"polls": len(health), "answered": len(ok),
                        "max_ms": round(1000 * max(ok), 1) if ok else None},
            "refused": refused, "errors": errors[:3], "failed_streams": len(errors)}


def _memory(server: _Server, audio: np.ndarray, total: int, abandoned: int, seconds: float = 3.0,
            at_once: int = 8) -> dict[str, Any]:
    """`total` streams, every `total // abandoned`-th abandoned halfway, `at_once` at a time, as fast as served."""
    span, chunk = int(seconds * 16000), 1600
    every = max(1, total // max(1, abandoned))
    sample_every = max(1, min(10, total // 4))
    samples: list[tuple[int, float]] = []
    lock = threading.Lock()
    done = {"n": 0, "abandoned": 0, "failed": 0, "busy_retries": 0}

    def one(k: int) -> None:
        ws = _connect(server.url, partials="changes")
        for _ in range(50):  # a stream that just ended may not have left the server's count yet (1013)
            if not isinstance(ws, tuple) or ws[0] != 1013:
                break
            time.sleep(0.1)
            with lock:
                done["busy_retries"] += 1
            ws = _connect(server.url, partials="changes")
        if isinstance(ws, tuple):
            with lock:
                done["failed"] += 1
            return
        piece = audio[(k * 4000) % 160000:][:span]
        quit_early = abandoned > 0 and k % every == every - 1 and done["abandoned"] < abandoned
        try:
            for lo in range(0, len(piece), chunk):
                if quit_early and lo >= len(piece) // 2:
                    ws.sock.close()  # abandoned: no end message, no close handshake
                    break
                ws.send_binary(piece[lo:lo + chunk].tobytes())
            else:
                ws.send(json.dumps({"type": "end"}))
                while json.loads(ws.recv())["type"] != "end":
                    pass
                ws.close()
        except Exception:  # noqa: BLE001 - counted
            with lock:
                done["failed"] += 1
        with lock:
            done["n"] += 1
            done["abandoned"] += quit_early

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(at_once) as pool:
        futures = [pool.submit(one, k) for k in range(total)]
        for k, f in enumerate(futures):
            f.result()
            if (k + 1) % sample_every == 0:
                samples.append((k + 1, round(server.rss_mb(), 1)))
    time.sleep(2.0)  # abandoned streams' server tasks end on their disconnect
    end = server.rss_mb()
    warm_at, warm = next((k, rss) for k, rss in samples if k >= min(20, total))
    return {"streams": total, "abandoned": done["abandoned"], "failed": done["failed"],
            "busy_retries": done["busy_retries"], "seconds_each": seconds, "warm_after": warm_at,
            "rss_mb_warm": warm, "rss_mb_end": round(end, 1), "growth_mb": round(end - warm, 1), "rss_mb_by_streams": samples}


CHUNKS_MS = (20.0, 100.0, 320.0, 1000.0, 37.0, 777 / 44.1)  # odd sizes too: 777 samples at 44.1 kHz


def exactness(checkpoint: str, files: list[Path], chunks_ms: tuple[float, ...] = CHUNKS_MS, onnx: bool = True,
               step_ms: float = 100.0) -> dict[str, Any]:
    """Each of `files` (any rate) streamed in each chunk size with `step_ms` of audio per model step, through the
    model in PyTorch and (`onnx`) its exported ONNX step: is the streamed text the offline transcript of the whole
    file? (A streaming conformer's offline transcript attends in the chunks it streams with.)"""
    import soundfile as sf
    import torch

    from ..components import load_components
    from ..data.audio import load_audio
    from ..decoding.greedy import greedy_decode
    from ..export.stream_runtime import OnnxStep
    from ..export.stream_step import export_stream_step
    from ..streaming.recognizer import Recognizer
    from ..streaming.session import StreamingSession

    comps = load_components(checkpoint)
    model, rate = comps.model.eval(), comps.features.cfg.sample_rate
    chunk = Recognizer(comps, chunk_ms=step_ms).chunk  # feature frames per step
    attention = chunk // model.stream_stride if hasattr(model, "set_chunk") else None
    if attention is not None:
        model.set_chunk(attention)
    offline = {}
    for path in files:
        feats = comps.features(torch.from_numpy(load_audio(path, rate)))
        with torch.no_grad():
            logits, lens = model(feats[None], torch.tensor([feats.shape[1]]))
        offline[path] = greedy_decode(logits, lens, comps.tokenizer)[0]
    if attention is not None:
        model.set_chunk(None)
    with tempfile.TemporaryDirectory() as tmp:
        steps: dict[str, Any] = {"torch": None}
        if onnx:
            export_stream_step(checkpoint, Path(tmp) / "step.onnx", chunk=chunk)
            steps["onnx"] = OnnxStep(Path(tmp) / "step.onnx")
        counts = {}
        for name, step in steps.items():
            equal = pairs = 0
            for path in files:
                raw, file_rate = sf.read(str(path), dtype="float32", always_2d=True)
                raw = raw.mean(axis=1)
                for ms in chunks_ms:
                    session = StreamingSession(comps, sample_rate=file_rate, step=step, chunk_ms=step_ms)
                    n = max(1, round(file_rate * ms / 1000))
                    for i in range(0, len(raw), n):
                        session.accept(raw[i:i + n])
                    session.finish()
                    pairs += 1
                    equal += session.text == offline[path]
            counts[name] = {"pairs": pairs, "equal": equal, "rate": round(equal / pairs, 4)}
    return {"files": len(files), "chunk_ms": [round(c, 2) for c in chunks_ms], **counts["torch"],
            **({"onnx": counts["onnx"]} if onnx else {}), "step_frames": chunk, "attention_chunk": attention}


def bench_stream(checkpoint: str | None = None, levels: tuple[int, ...] = (8, 32), seconds: float = 20.0,
                 chunk_ms: int = 100, memory_streams: int = 200, abandoned: int = 50,
                 exact: bool = True, ws: str = "guarded", model: str = MODEL, *, files: list[Path],
                 exact_files: list[Path] | None = None, step_ms: float = 100.0) -> dict[str, Any]:
    """Exactness over `exact_files` (default: `files`) and chunk sizes, then the latency levels and the memory run
    against one server limited to max(levels) streams, each stream sending `files` end to end, on the connection
    stack `ws` (`serve --ws`); without a checkpoint, `model`'s initial weights."""
    audio = speech(files, max(seconds, 3.0) + 20)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint or str(initial_streaming_checkpoint(Path(tmp) / "stream.pt", model))
        same = exactness(ckpt, exact_files or files, step_ms=step_ms) if exact else None
        server = _Server(ckpt, max(levels), "--ws", ws, "--stream-step-ms", str(step_ms))
        try:
            warm = _connect(server.url)  # the first stream pays the model's first run
            warm.send_binary(audio[:16000].tobytes())
            warm.recv()
            warm.close()
            rows = [_level(server, n, audio, seconds, chunk_ms, max(levels)) for n in levels]
            at_once = max(1, min(8, max(levels) // 2))  # room under the limit for streams still leaving
            memory = _memory(server, audio, memory_streams, abandoned, at_once=at_once) if memory_streams else None
        finally:
            server.close()
    return {"model": model if checkpoint is None else checkpoint, "weights": "initial" if checkpoint is None
            else "trained", "threads": int(os.environ.get("OMP_NUM_THREADS", 0)) or None,
            "ws": ws, "step_ms": step_ms, "exactness": same, "levels": rows, "memory": memory}
