"""The service over hours, under honest and hostile load at once: `speechscale serve` in its own process on loopback.

    speechscale bench soak --minutes 60 [--checkpoint CKPT] [--streams 4]

For `minutes`, together:
- HTTP transcriptions: 2 s of real speech POSTed every 0.5 s (each must be answered 200);
- real-time streams: `streams` clients each streaming 8 s of real speech in 100 ms chunks on the audio's clock with
  `"partials": "every"` (each chunk timed to its partial; each stream must end with its end message);
- hostile clients, one act a second in turn: abandoned streams (socket closed mid-stream), stalled streams (quiet
  after 0.5 s; the server must close them within its idle limit), pings flooded without reading, frames declaring
  2 MiB, fragments adding up past 1 MiB, undeclared compression, unmasked frames, bad and deeply nested JSON,
  half-sent headers (408 within the header timeout), oversized and undecodable uploads (413, 415). Each act must get
  its code; one that does not counts as unexpected.
Each interval (a minute by default) the server's resident set (VmRSS), p50/p95 latency of both kinds, and the
counts are recorded. The summary holds the goals: RSS drift from minute 5 (or a sixth of the run) to the end, the
last 10 minutes' p95 against the first 10 (thirds of a shorter run), every well-formed request answered, no stream
slot held past its idle limit.
"""
from __future__ import annotations

import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .audio import speech
from .rawws import Conn, frame, text
from .stream import _connect, _Server, _Stream, initial_streaming_checkpoint

IDLE_S, SEND_TIMEOUT_S, HEADER_TIMEOUT_S = 5.0, 3.0, 3.0
START = {"type": "start", "sample_rate": 16000, "encoding": "pcm16"}


class _Record:
    """Timestamped observations from every thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: list[tuple[float, str, float]] = []  # (time, "http" | "stream", seconds)
        self.counts: list[tuple[float, str]] = []           # (time, what)

    def lat(self, kind: str, seconds: float, at: float | None = None) -> None:
        with self.lock:
            self.latency.append((time.perf_counter() if at is None else at, kind, seconds))

    def count(self, what: str) -> None:
        with self.lock:
            self.counts.append((time.perf_counter(), what))


def _wav(audio: np.ndarray) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _post(url: str, body: bytes, timeout: float = 60.0) -> int:
    req = urllib.request.Request(url + "/v1/transcribe", data=body, headers={"Content-Type": "audio/wav"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def _http(url: str, audio: np.ndarray, rec: _Record, stop: threading.Event) -> None:
    body = _wav(audio[: 2 * 16000])
    while not stop.wait(0.5):
        started = time.perf_counter()
        status = _post(url, body)
        if status == 200:
            rec.lat("http", time.perf_counter() - started)
            rec.count("http_ok")
        else:
            rec.count("http_failed")


def _streams(url: str, audio: np.ndarray, rec: _Record, stop: threading.Event, offset: int) -> None:
    chunk, span = 1600, 8 * 16000
    n = 0
    while not stop.is_set():
        ws = _connect(url)
        if isinstance(ws, tuple):  # refused: counted as a failure of a well-formed stream
            rec.count("stream_failed")
            stop.wait(1.0)
            continue
        lo = ((offset + n) * 3 % 8) * 16000
        s = _Stream(ws, audio[lo:lo + span], chunk, time.perf_counter() + 0.05)
        s.start()
        s.join(timeout=span / 16000 + 120)
        for i, sent in enumerate(s.sent[: len(s.answers)]):
            rec.lat("stream", s.answers[i][0] - sent, at=sent)
        rec.count("stream_ok" if s.ended and not s.error else "stream_failed")
        n += 1


def _code(c: Conn, wait: float) -> int | None:
    code, _ = c.close_code(wait)
    c.close()
    return code


def _after_start(port: int, data: bytes, rcvbuf: int | None = None) -> Conn:
    c = Conn(port, rcvbuf=rcvbuf)
    c.start()
    try:
        c.send(data)
    except OSError:  # the server closed while the rest was being sent
        pass
    return c


def _acts(port: int, url: str, audio: np.ndarray) -> list[tuple[str, Callable[[], bool]]]:
    """(name, act) pairs; an act returns whether the server answered as it should."""
    pcm = audio[:16000].tobytes()

    def abandon() -> bool:
        c = _after_start(port, frame(0x2, pcm))
        c.close()
        return True

    def stall() -> bool:  # quiet after half a second of audio: closed (1008) within the idle limit
        c = _after_start(port, frame(0x2, pcm[:16000]))
        started = time.perf_counter()
        code = _code(c, IDLE_S + 10)
        return code == 1008 and time.perf_counter() - started < IDLE_S + 2

    def ping_flood() -> bool:  # pings without reading; then gone
        c = Conn(port, rcvbuf=4096)
        c.start()
        c.sock.settimeout(1.0)
        ping, started = frame(0x9, b"p" * 125) * 64, time.perf_counter()
        try:
            while time.perf_counter() - started < 1.0:
                c.send(ping)
        except OSError:
            pass
        c.close()
        return True

    def half_open() -> bool:
        c = Conn(port)
        c.send(b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        c.sock.settimeout(HEADER_TIMEOUT_S + 5)
        try:
            answer = c.sock.recv(64)
        except OSError:
            answer = b""
        c.close()
        return answer.startswith(b"HTTP/1.1 408")

    def expect(data: bytes, code: int, started: bool = True) -> Callable[[], bool]:
        def act() -> bool:
            if started:
                return _code(_after_start(port, data), 10) == code
            c = Conn(port)
            c.handshake()
            c.send(data)
            return _code(c, 10) == code
        return act

    def upload(body: bytes, status: int) -> Callable[[], bool]:
        return lambda: _post(url, body) == status

    def oversized() -> bool:  # declares 21 MB, sends 64 KiB of it: refused on the declaration
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: audio/wav\r\n"
                         b"Content-Length: %d\r\n\r\n" % (21 << 20) + b"\0" * 65536)
            return sock.recv(64).startswith(b"HTTP/1.1 413")

    return [("abandoned", abandon), ("stalled", stall), ("ping flood", ping_flood), ("half-open headers", half_open),
            ("frame declaring 2 MiB", expect(frame(0x2, b"", length=2 << 20), 1009)),
            ("fragments past 1 MiB", expect(frame(0x2, b"\0" * 600_000, fin=False) + frame(0x0, b"\0" * 600_000), 1009)),
            ("undeclared compression", expect(frame(0x2, zlib.compress(b"\0" * 999)[2:-4], rsv=4), 1002)),
            ("unmasked frame", expect(frame(0x2, b"\0\0", mask=False), 1002)),
            ("bad JSON", expect(text("{"), 1007, started=False)),
            ("JSON nested 100000 deep", expect(text("[" * 100_000), 1007)),
            ("oversized upload", oversized),
            ("undecodable upload", upload(b"RIFF" + b"\xff" * 4000, 415))]


def _hostile(port: int, url: str, audio: np.ndarray, rec: _Record, stop: threading.Event) -> None:
    acts = _acts(port, url, audio)
    i = 0
    while not stop.wait(1.0):
        name, act = acts[i % len(acts)]
        try:
            ok = act()
        except OSError:
            ok = False
        rec.count(f"hostile:{name}")
        if not ok:
            rec.count(f"unexpected:{name}")
        i += 1


def _pct(xs: list[float], q: float) -> float | None:
    return round(1000 * sorted(xs)[int(q * (len(xs) - 1))], 1) if xs else None


def _interval(rec: _Record, lo: float, hi: float, t0: float, rss: float, streams: int | None) -> dict[str, Any]:
    with rec.lock:
        lat = [(k, s) for t, k, s in rec.latency if lo <= t < hi]
        counts = [w for t, w in rec.counts if lo <= t < hi]
    http = [s for k, s in lat if k == "http"]
    live = [s for k, s in lat if k == "stream"]
    row: dict[str, Any] = {"minute": round((hi - t0) / 60, 2), "rss_mb": round(rss, 1),
                           "http_p50_ms": _pct(http, 0.5), "http_p95_ms": _pct(http, 0.95),
                           "stream_p50_ms": _pct(live, 0.5), "stream_p95_ms": _pct(live, 0.95),
                           "open_streams": streams}
    for what in ("http_ok", "http_failed", "stream_ok", "stream_failed"):
        row[what] = counts.count(what)
    row["hostile"] = sum(w.startswith("hostile:") for w in counts)
    row["unexpected"] = sorted({w.split(":", 1)[1] for w in counts if w.startswith("unexpected:")})
    row["unexpected_n"] = sum(w.startswith("unexpected:") for w in counts)
    return row


def _summary(rows: list[dict[str, Any]], rec: _Record, t0: float, minutes: float) -> dict[str, Any]:
    warm = 5.0 if minutes >= 10 else minutes / 6
    window = 10.0 if minutes >= 20 else minutes / 3
    settled = [r for r in rows if r["minute"] >= warm] or rows
    drift = round(settled[-1]["rss_mb"] - settled[0]["rss_mb"], 1)

    def p95(lo: float, hi: float) -> float | None:
        with rec.lock:
            xs = [s for t, k, s in rec.latency if k == "stream" and lo <= (t - t0) / 60 < hi]
        return _pct(xs, 0.95)

    first, last = p95(0, window), p95(minutes - window, minutes + 1)
    ratio = round(last / first, 3) if first and last else None
    total = {k: sum(r[k] for r in rows) for k in ("http_ok", "http_failed", "stream_ok", "stream_failed",
                                                  "hostile", "unexpected_n")}
    stalled = [w for _, w in rec.counts if w == "unexpected:stalled"]
    return {**total, "rss_from_minute": round(settled[0]["minute"], 2), "rss_drift_mb": drift,
            "p95_window_min": round(window, 2), "stream_p95_first_ms": first, "stream_p95_last_ms": last,
            "p95_last_over_first": ratio,
            "goals": {"rss_drift_under_50mb": abs(drift) < 50,
                      "p95_within_20pct": ratio is not None and ratio <= 1.2,
                      "every_well_formed_request_answered": total["http_failed"] == 0 and total["stream_failed"] == 0,
                      "no_slot_held_past_idle": not stalled,
                      "every_hostile_act_refused_as_documented": total["unexpected_n"] == 0}}


def bench_soak(checkpoint: str | None, minutes: float, interval_s: float = 60.0, streams: int = 4, *,
               files: list[Path]) -> dict[str, Any]:
    """Run the soak (module docstring) sending `files` end to end; the per-interval rows and the summary."""
    import tempfile

    audio = speech(files, 60.0)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint or str(initial_streaming_checkpoint(Path(tmp) / "stream.pt"))
        server = _Server(ckpt, 4 * streams, "--stream-idle", f"{IDLE_S:g}", "--stream-send-timeout",
                         f"{SEND_TIMEOUT_S:g}", "--header-timeout", f"{HEADER_TIMEOUT_S:g}")
        rec, stop = _Record(), threading.Event()
        workers = [threading.Thread(target=_http, args=(server.url, audio, rec, stop), daemon=True),
                   threading.Thread(target=_hostile, args=(server.port, server.url, audio, rec, stop), daemon=True)]
        workers += [threading.Thread(target=_streams, args=(server.url, audio, rec, stop, i), daemon=True)
                    for i in range(streams)]
        samples: list[tuple[float, float, float, int | None]] = []  # (from, to, RSS, open streams)
        try:
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            lo, end = t0, t0 + minutes * 60
            while lo < end - 1e-6:
                hi = min(end, lo + interval_s)
                time.sleep(max(0.0, hi - time.perf_counter()))
                samples.append((lo, hi, server.rss_mb(), _open_streams(server.url)))
                lo = hi
            stop.set()
            for w in workers:
                w.join(timeout=60)  # streams record their chunks' latencies (by send time) as they end
        finally:
            server.close()
    rows = [_interval(rec, lo, hi, t0, rss, open_) for lo, hi, rss, open_ in samples]
    return {"minutes": minutes, "interval_s": interval_s, "streams": streams,
            "limits": {"stream_idle_s": IDLE_S, "stream_send_timeout_s": SEND_TIMEOUT_S,
                       "header_timeout_s": HEADER_TIMEOUT_S},
            "intervals": rows, "summary": _summary(rows, rec, t0, minutes)}


def _open_streams(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
            return json.load(r).get("streams")
    except (OSError, ValueError, socket.timeout):
        return None


def soak_table(result: dict[str, Any]) -> str:
    """One line per interval, for the terminal."""
    return "\n".join(f"{r['minute']:>6} min  RSS {r['rss_mb']:>7} MB  stream p95 {r['stream_p95_ms']} ms  "
                     f"http p95 {r['http_p95_ms']} ms  unexpected {r['unexpected_n']}" for r in result["intervals"])


def plot_soak(result: dict[str, Any], path: Path) -> None:
    """The soak's server memory and p95 latency (streams' chunks and HTTP) per interval."""
    from ..plotting import pyplot

    plt = pyplot()
    fig, (mem, lat) = plt.subplots(1, 2, figsize=(10, 4))
    rows = result["intervals"]
    minutes = [r["minute"] for r in rows]
    mem.plot(minutes, [r["rss_mb"] for r in rows], "o-", color="C0", ms=3, label="server VmRSS")
    mem.set_ylabel("MB")
    for key, color, label in (("stream_p95_ms", "C2", "stream chunk p95"), ("http_p95_ms", "C1", "HTTP p95")):
        lat.plot(minutes, [r[key] for r in rows], "o-", color=color, ms=3, label=label)
    lat.set_ylabel("ms")
    for ax, title in ((mem, "Server memory"), (lat, "Latency")):
        ax.set_xlabel("minute")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
