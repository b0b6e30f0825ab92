"""The service against hostile input, for real: `speechscale serve` on loopback, raw sockets and real audio.

Bombs (a long silent FLAC, absurd headers), foreign Host and Origin, slow and half-open clients, a full queue,
and the answers they get: the right 4xx/503/504, no internals, the server alive and `/healthz` true to it."""
import concurrent.futures
import io
import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import shared, start_server
from tests.distributed.launch import free_port, kill_group

pytestmark = pytest.mark.slow  # real servers (one per configuration) and raw sockets

LDC = "she had your dark suit in greasy wash water all year"
INTERNALS = ("0x", "Traceback", "BytesIO", "soundfile", "libsndfile", "File \"")


def _start(checkpoint, tmp_path_factory, *flags):
    return start_server(checkpoint, tmp_path_factory.mktemp("serve") / "log", *flags)


@pytest.fixture(scope="module")
def server(ldc_checkpoint, tmp_path_factory):
    proc, url = _start(ldc_checkpoint, tmp_path_factory, "--max-seconds", "10", "--body-timeout", "1",
                       "--allowed-host", "asr.example")
    try:
        yield proc, url
    finally:
        kill_group(proc)


def _post(url, data, headers=None, timeout=60):
    req = urllib.request.Request(url + "/v1/transcribe", data=data,
                                 headers={"Content-Type": "audio/wav", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.load(e), e.headers


def _raw(url, request: bytes, wait=30.0):
    """Send raw bytes on a fresh connection; the status and body of the answer (b'' if it was closed)."""
    host, port = url.removeprefix("http://").split(":")
    reply = b""
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):  # the server answered and closed while we were still
            pass  # sending: its answer may still be read
        while True:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            reply += chunk
            head, _, body = reply.partition(b"\r\n\r\n")
            length = [int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")]
            if length and len(body) >= length[0]:
                break
    head, _, body = reply.partition(b"\r\n\r\n")
    return (int(head.split()[1]) if head else 0), body


def _wav(rate=16000, channels=1, seconds=1.0):
    buf = io.BytesIO()
    sf.write(buf, np.zeros((int(rate * seconds), channels), dtype=np.float32), rate, format="WAV")
    return buf.getvalue()


def _silent_flac(path, hours, rate=8000):
    """Hours of digital silence: a few hundred KB of FLAC that decode to hours of samples."""
    block = np.zeros(rate * 60, dtype=np.int16)
    with sf.SoundFile(path, "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16") as f:
        for _ in range(int(hours * 60)):
            f.write(block)
    return path.read_bytes()


def _peak_rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _reset_peak_rss(pid):
    """Start the peak (VmHWM) over from the current RSS (Linux: clear_refs 5), so that an earlier peak (start-up,
    another test's requests) cannot hide this one's."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def _clean(detail):
    return not any(x in detail for x in INTERNALS)


def test_decompression_and_header_bombs_are_refused_from_the_header_without_decoding(server, tmp_path):
    proc, url = server
    bomb = _silent_flac(tmp_path / "bomb.flac", hours=1)
    assert len(bomb) < 2_000_000  # an hour of audio in a small upload
    _reset_peak_rss(proc.pid)
    before = _peak_rss_mb(proc.pid)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _post(url, bomb, {"Content-Type": "audio/flac"}), range(8)))
    for code, res, _ in answers:
        assert code == 413 and "3600.0 s is over the limit of 10 s" in res["detail"], res
    grown = _peak_rss_mb(proc.pid) - before
    print(f"peak RSS of the server grew {grown:.1f} MB while 8 one-hour FLAC bombs ({len(bomb)} bytes each) were refused")
    assert grown < 100  # nothing was decoded: the peak did not move by 100 MB

    def with_rate(wav, rate):  # the same WAV with its header's sample rate (and byte rate) rewritten
        return wav[:24] + struct.pack("<II", rate, rate * 2) + wav[32:]

    for data in (with_rate(_wav(), 1), with_rate(_wav(), 4_000_000), _wav(channels=9)):
        code, res, _ = _post(url, data)
        assert code == 415 and "unsupported or corrupt audio" in res["detail"] and _clean(res["detail"]), res
    code, res, _ = _post(url, b"RIFF\x00\x00not audio at all" * 10)
    assert code == 415 and _clean(res["detail"]), res
    assert _post(url, shared("ldc93s1", "LDC93S1.wav").read_bytes())[1]["text"] == LDC


def test_absurd_headers_get_4xx(server):
    _, url = server
    code, _ = _raw(url, b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n")
    assert 400 <= code < 500
    code, _ = _raw(url, b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999\r\n\r\n")
    assert code in (400, 413)
    code, _ = _raw(url, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
    assert 400 <= code < 500  # h11 refuses an oversized head with an answer, not a dropped connection
    with urllib.request.urlopen(url + "/healthz") as r:
        assert json.load(r)["status"] == "ok"


def test_foreign_host_and_cross_origin_posts_are_refused_and_docs_are_off(server):
    _, url = server
    wav = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    assert _post(url, wav, {"Host": "attacker.example"})[0] == 400  # DNS rebinding: a name we do not serve
    assert _post(url, wav, {"Host": "asr.example:8000"})[1]["text"] == LDC  # --allowed-host
    code, res, _ = _post(url, wav, {"Origin": "https://evil.example"})
    assert code == 403 and "cross-origin" in res["detail"]
    assert _post(url, wav, {"Origin": url})[1]["text"] == LDC  # the page's own origin
    for path in ("/docs", "/openapi.json"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url + path)
        assert info.value.code == 404


def test_slow_and_half_open_clients_get_408_and_do_not_block_others(server):
    _, url = server
    wav = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    host, port = url.removeprefix("http://").split(":")
    slow = []
    for _ in range(20):  # headers promise 1000 bytes, 10 arrive, then nothing
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(b"POST /v1/transcribe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: audio/wav\r\n"
                  b"Content-Length: 1000\r\n\r\n" + b"x" * 10)
        slow.append(s)
    try:
        assert _post(url, wav)[1]["text"] == LDC  # a valid client is served meanwhile
        for s in slow:  # each trickler is answered 408 after --body-timeout (1 s), not held open
            reply = s.recv(4096)
            assert reply.split()[1] == b"408", reply[:200]
    finally:
        for s in slow:
            s.close()


def test_a_full_queue_answers_503_with_retry_after_and_a_late_answer_504(ldc_checkpoint, tmp_path_factory):
    proc, url = _start(ldc_checkpoint, tmp_path_factory, "--max-batch", "1", "--max-queue", "1",
                       "--request-timeout", "0.001")
    try:
        wav = shared("ldc93s1", "LDC93S1.wav").read_bytes()
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: _post(url, wav), range(12)))
        codes = [c for c, _, _ in answers]
        assert set(codes) <= {503, 504} and 504 in codes and 503 in codes, codes
        assert all(h.get("Retry-After") == "1" for c, _, h in answers if c == 503)
        assert all(_clean(r["detail"]) for _, r, _ in answers)
        with urllib.request.urlopen(url + "/healthz") as r:
            assert json.load(r)["status"] == "ok"  # busy is not broken
    finally:
        kill_group(proc)


def test_one_failing_item_fails_alone_and_a_dead_batcher_shows_in_healthz(ldc_checkpoint):
    import asyncio

    import uvicorn

    from speechscale.inference.transcribe import Transcriber
    from speechscale.service.server import Batcher, Limits, create_app

    asr = Transcriber(str(ldc_checkpoint))
    good = sf.read(str(shared("ldc93s1", "LDC93S1.wav")), dtype="float32")[0]
    bad = np.zeros((16000, 3), dtype=np.float32)  # not a mono waveform: the model cannot take it

    async def one_batch():
        batcher = Batcher(asr, Limits())
        futs = [asyncio.get_running_loop().create_future() for _ in range(3)]
        await batcher._answer([(good, futs[0]), (bad, futs[1]), (good, futs[2])])
        return futs

    futs = asyncio.run(one_batch())
    assert futs[0].result()["text"] == LDC and futs[2].result()["text"] == LDC
    assert futs[1].exception() is not None

    port = free_port()
    app = create_app(asr, Limits())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                    assert json.load(r)["status"] == "ok"
                    break
            except OSError:
                time.sleep(0.05)
        task = app.state.batcher.task
        task.get_loop().call_soon_threadsafe(task.cancel)  # the batcher dies
        time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url + "/healthz")
        assert info.value.code == 503 and json.load(info.value)["status"] == "stopped"
        code, res, _ = _post(url, shared("ldc93s1", "LDC93S1.wav").read_bytes())
        assert code == 503 and "not running" in res["detail"]
    finally:
        server.should_exit = True
        thread.join(10)
