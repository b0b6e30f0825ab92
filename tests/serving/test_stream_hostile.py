"""`WS /v1/stream` against a hostile client at the level of the socket (tests/serving/rawws.py), on a real
`speechscale serve`: every protocol violation, bomb and malformed message is answered with a close frame carrying
its code and words; half-open, stalled and flooding clients are cut off in time; afterwards no stream slot is
held and the server's memory is where it was. The drain on SIGTERM loses no final of a stream in flight."""
import json
import os
import signal
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import pytest

from speechscale.bench.audio import speech
from speechscale.bench.rawws import Conn, close_frame, frame, text
from tests.conftest import speech_files, start_server
from tests.distributed.launch import kill_group, wait_for

pytestmark = pytest.mark.slow  # real servers and raw sockets

START = {"type": "start", "sample_rate": 16000, "encoding": "pcm16"}
FLAGS = ("--max-streams", "3", "--stream-idle", "3", "--stream-send-timeout", "2", "--header-timeout", "2",
         "--max-connections", "16")


@pytest.fixture(scope="module")
def server(streaming_checkpoint, tmp_path_factory):
    log = tmp_path_factory.mktemp("hostile") / "serve.log"
    proc, url = start_server(streaming_checkpoint, log, *FLAGS)
    port = int(url.rsplit(":", 1)[1])
    c = Conn(port)
    c.start()
    c.send(frame(0x2, speech(speech_files(), 1.0).tobytes()) + text({"type": "end"}))
    assert c.close_code() == (1000, "")  # warm: the model has run once
    yield proc, url, port, _rss_mb(proc.pid)
    kill_group(proc)
    assert "Traceback" not in log.read_text()  # every refusal logged in a line, if at all


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _no_stream_held(url: str, within: float = 5.0) -> None:
    wait_for(lambda: _health(url)[1]["streams"] == 0, timeout=within, every=0.1)


BIG = 2 << 20  # over the 1 MiB message limit
CASES = {  # what the client sends after the start message (or, with the key "pre:", instead of it) -> code, words
    "unmasked frame": (frame(0x2, b"\0\0", mask=False), 1002, "masking"),
    "reserved bits": (frame(0x2, b"\0\0", rsv=2), 1002, "reserved bits"),
    "permessage-deflate data it did not negotiate": (frame(0x2, zlib.compress(b"\0" * 999)[2:-4], rsv=4), 1002,
                                                     "reserved bits"),
    "reserved opcode": (frame(0x3, b"x"), 1002, "opcode"),
    "reserved control opcode": (frame(0xB, b"x"), 1002, "opcode"),
    "close code out of range": (close_frame(999), 1002, "status code"),
    "close code reserved (1005)": (close_frame(1005), 1002, "status code"),
    "close reason not UTF-8": (close_frame(1000, b"\xff"), 1007, ""),
    "control frame over 125 bytes": (frame(0x9, b"x" * 126), 1002, "control frame"),
    "fragmented control frame": (frame(0x9, b"x", fin=False), 1002, "fragmented"),
    "continuation without a start": (frame(0x0, b"xx"), 1002, "continuation"),
    "new message inside a fragmented one": (frame(0x2, b"\0\0", fin=False) + frame(0x2, b"\0\0"), 1002,
                                            "expected a continuation"),
    "text that is not UTF-8": (frame(0x1, b"\xff\xfe"), 1007, "UTF-8"),
    "a frame declaring 2 MiB": (frame(0x2, b"", length=BIG), 1009, "exceeds limit"),
    "a frame declaring 2**63 bytes": (frame(0x2, b"", length=(1 << 63) - 1), 1009, "exceeds limit"),
    "fragments adding up past 1 MiB": (frame(0x2, b"\0" * 700_000, fin=False) + frame(0x0, b"\0" * 700_000),
                                       1009, "exceeds limit"),
    "JSON nested 100000 deep after the start": (text("[" * 100_000), 1007, "nested"),
    "an unknown control message": (text({"type": "pause"}), 1003, "audio, then"),
    "odd bytes of pcm16": (frame(0x2, b"\0\0\0"), 1007, "whole samples"),
    "pre:JSON nested 100000 deep": (text("{\"a\":" * 100_000), 1007, "nested"),
    "pre:not JSON": (text("{"), 1007, "not JSON"),
    "pre:encoding a list": (text({**START, "encoding": ["pcm16"]}), 1007, "encoding"),
    "pre:encoding an object": (text({**START, "encoding": {"a": 1}}), 1007, "encoding"),
    "pre:sample_rate true": (text({**START, "sample_rate": True}), 1007, "sample_rate"),
    "pre:sample_rate a string": (text({**START, "sample_rate": "16000"}), 1007, "sample_rate"),
    "pre:endpoint_frames a float": (text({**START, "endpoint_frames": 2.5}), 1007, "endpoint_frames"),
    "pre:partials a list": (text({**START, "partials": ["every"]}), 1007, "partials"),
    "pre:a JSON list": (text([1, 2]), 1007, "first message"),
    "pre:audio first": (frame(0x2, b"\0\0"), 1003, "start message"),
    "pre:float32 NaN": (text({**START, "encoding": "float32"}) + frame(0x2, b"\0\0\xc0\x7f"), 1007, "non-finite"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_hostile_message_gets_its_close_code_and_words_and_frees_the_slot(server, name):
    _, url, port, _ = server
    data, code, words = CASES[name]
    c = Conn(port)
    if name.startswith("pre:"):
        assert c.handshake()[0] == 101
    else:
        c.start()
    try:
        c.send(data)
    except OSError:  # the server closed while the rest was still being sent: its close frame is read below
        pass
    got, reason = c.close_code(10)
    c.close()
    assert got == code, (got, reason)
    assert words in reason and "Traceback" not in reason
    _no_stream_held(url)


@pytest.mark.parametrize("key,status", [("c2hvcnQ=", 400), ("not base64!", 400), ("", 400)])
def test_a_malformed_handshake_is_refused_with_400(server, key, status):
    c = Conn(server[2])
    got, head = c.handshake(key=key)
    c.close()
    assert got == status, head


def test_a_wrong_websocket_version_is_refused(server):
    c = Conn(server[2])
    c.sock.sendall(b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n")
    head = c.sock.recv(4096)
    c.close()
    assert head.split()[1] in (b"400", b"426"), head


def test_half_open_requests_cannot_lock_out_clients_and_are_closed_with_408(server):
    """More half-sent upgrade requests than --max-connections: /healthz and a stream are served meanwhile, and each
    half-open connection gets 408 after --header-timeout."""
    _, url, port, _ = server
    half = []
    for _ in range(40):
        c = Conn(port)
        c.send(b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n")
        half.append(c)
    assert _health(url)[0] == 200
    s = Conn(port)
    assert s.start()["type"] == "ready"
    s.send(text({"type": "end"}))
    assert s.close_code()[0] == 1000
    started = time.monotonic()
    for c in half:
        c.sock.settimeout(10)
        assert c.sock.recv(64).startswith(b"HTTP/1.1 408"), "a half-open connection was not timed out"
        c.close()
    assert time.monotonic() - started < 20  # the 2 s header timeout, with a loaded machine's margin


def test_clients_that_stop_reading_or_flood_pings_lose_their_slot_and_hold_no_memory(server):
    """Three streams (--max-streams) that never read: one floods pings, two go quiet. The quiet ones are closed
    (1008) once idle; the flood's pongs are not taken into the server's memory (it stops reading the client), and
    its close, which the client's unread pongs block, is given up after --stream-send-timeout with the connection;
    a fourth stream is served after."""
    proc, url, port, rss0 = server
    quiet = [Conn(port, rcvbuf=4096) for _ in range(2)]
    flood = Conn(port, rcvbuf=4096)
    for c in [*quiet, flood]:
        c.start()
    assert _health(url)[1]["streams"] == 3
    flood.sock.settimeout(1)
    ping, started = frame(0x9, b"p" * 125), time.monotonic()
    try:
        while time.monotonic() - started < 5:
            flood.send(ping * 64)
    except OSError:  # the server stopped reading it: its pongs are unread
        pass
    assert _rss_mb(proc.pid) - rss0 < 30, "pongs queued in the server's memory"
    _no_stream_held(url, within=10)
    for c in quiet:
        assert c.close_code(30) == (1008, "idle for 3 s")
        c.close()
    code, why = flood.close_code(30)  # the pongs, then a close frame if it got into the socket, else the end
    assert code == 1008 or why in ("ConnectionResetError", "EOFError"), (code, why)
    flood.close()
    s = Conn(port)
    assert s.start()["type"] == "ready"
    s.close()


def test_an_upgraded_connection_that_never_starts_loses_its_slot_within_the_header_timeout(server):
    _, url, port, _ = server
    c = Conn(port)
    assert c.handshake()[0] == 101
    started = time.monotonic()
    assert c.close_code(10) == (1008, "no start message within 2 s")
    assert time.monotonic() - started < 20  # the 2 s start timeout, with a loaded machine's margin
    c.close()
    _no_stream_held(url)


def test_a_message_without_end_is_cut_at_the_limit_with_a_close_frame_not_a_reset(server):
    _, url, port, _ = server
    c = Conn(port)
    c.start()
    c.send(frame(0x2, b"", fin=False))
    try:
        for _ in range(64):  # up to 4 MiB, cut at 1 MiB
            c.send(frame(0x0, b"\0" * 65536, fin=False))
    except OSError:  # the server stopped taking it
        pass
    assert c.close_code(10)[0] == 1009
    c.close()
    _no_stream_held(url)


def test_after_the_hostile_cases_the_server_is_healthy_and_its_memory_is_back(server):
    proc, url, _, rss0 = server
    status, body = _health(url)
    assert status == 200 and body["status"] == "ok" and body["streams"] == 0
    assert _rss_mb(proc.pid) - rss0 < 40


def _events(c: Conn) -> list:
    """The non-partial messages of a stream and its close (code, reason)."""
    out = []
    c.sock.settimeout(60)
    while True:
        opcode, payload = c.read_frame()
        if opcode == 0x8:
            return out + [("close", int.from_bytes(payload[:2], "big"), payload[2:].decode())]
        message = json.loads(payload)
        if message["type"] != "partial":
            out.append((message["type"], message.get("text")))


def test_sigterm_drains_streams_in_flight_without_losing_a_final(streaming_checkpoint, tmp_path):
    """Two streams in flight at SIGTERM: one ends itself during the drain (1000, all its finals), the other is
    finished by the server at the drain timeout (its finals, the end message, 1001); meanwhile /healthz says
    draining and new streams and transcriptions are refused; then the server exits 0."""
    log = tmp_path / "serve.log"
    proc, url = start_server(streaming_checkpoint, log, "--drain-timeout", "3", "--stream-idle", "20")
    port = int(url.rsplit(":", 1)[1])
    try:
        audio = speech(speech_files(), 6.0)
        chunks = [audio[lo:lo + 1600].tobytes() for lo in range(0, len(audio), 1600)]
        ref = Conn(port)
        ref.start()
        ref.send(b"".join(frame(0x2, ch) for ch in chunks[:30]) + text({"type": "end"}))
        reference = _events(ref)  # what the first 3 s give when the client ends the stream itself
        a, b = Conn(port), Conn(port)
        for c in (a, b):
            c.start(partials="every")  # a partial answers each chunk: the server has taken all 30
            c.send(b"".join(frame(0x2, ch) for ch in chunks[:30]))
        early = {id(c): [] for c in (a, b)}  # finals before the signal
        for c in (a, b):
            answered = 0
            while answered < 30:
                message = json.loads(c.read_frame()[1])
                answered += message["type"] == "partial"
                if message["type"] != "partial":
                    early[id(c)].append((message["type"], message.get("text")))
        os.kill(proc.pid, signal.SIGTERM)
        wait_for(lambda: _health(url)[1]["status"] == "draining", timeout=5)
        assert _health(url)[0] == 503
        n = Conn(port)
        n.handshake()
        n.send(text(START))
        assert n.close_code(5)[0] == 1001
        req = urllib.request.Request(url + "/v1/transcribe", data=b"RIFF", headers={"Content-Type": "audio/wav"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=10)
        assert refused.value.code == 503
        a.send(b"".join(frame(0x2, ch) for ch in chunks[30:]) + text({"type": "end"}))
        got_a, got_b = early[id(a)] + _events(a), early[id(b)] + _events(b)
        assert got_a[-1] == ("close", 1000, "") and got_a[-2][0] == "end" and got_a[-2][1]
        assert [e for e in got_a if e[0] == "final"], got_a
        assert got_b[-1][:2] == ("close", 1001) and "shutting down" in got_b[-1][2]
        assert got_b[:-1] == reference[:-1]  # every final and the whole transcript of the audio it sent
        assert proc.wait(timeout=30) == 0
    finally:
        kill_group(proc)
    assert "Traceback" not in log.read_text()


def test_a_streams_send_is_given_up_at_the_idle_limit_when_that_is_shorter():
    """A stream that neither sends nor reads is idle, whatever waits to be sent to it: with the idle limit under the
    send timeout, a send the client does not read is given up at the idle limit (three such clients held every slot
    until the 10 s send timeout, past a 5 s idle limit)."""
    from types import SimpleNamespace

    from speechscale.service.transport import protocols

    for idle, send, want in ((5.0, 10.0, 5.0), (3.0, 2.0, 2.0)):
        limits = SimpleNamespace(stream_idle_s=idle, stream_send_timeout_s=send, header_timeout_s=2.0, max_pending=8)
        assert protocols(limits)[1].send_timeout_s == want


def test_a_flood_of_one_sample_messages_is_closed_while_real_time_streams_go_on(streaming_checkpoint, tmp_path):
    """Beside two real-time streams, 2,000 one-sample messages on one stream each waited a batch round (minutes,
    neither answered nor closed); now a stream sending more than 200 messages a second of audio is closed (1008)
    within 15 s, and the next stream is served."""
    import threading

    proc, url = start_server(streaming_checkpoint, tmp_path / "serve.log", "--max-streams", "4", "--stream-idle", "10",
                             "--max-connections", "16")
    port = int(url.rsplit(":", 1)[1])
    audio = speech(speech_files(), 1.0)
    try:
        stop = threading.Event()

        def real_time(c: Conn) -> None:
            while not stop.is_set():
                c.send(frame(0x2, audio[:1600].tobytes()))
                time.sleep(0.1)

        feeders = [Conn(port) for _ in range(2)]
        threads = []
        for c in feeders:
            c.start()
            threads.append(threading.Thread(target=real_time, args=(c,), daemon=True))
            threads[-1].start()
        flood = Conn(port)
        flood.start()
        started = time.monotonic()
        flood.send(b"".join(frame(0x2, audio[i:i + 1].tobytes()) for i in range(2000)) + text({"type": "end"}))
        code, why = flood.close_code(15)
        took = time.monotonic() - started
        stop.set()
        for t in threads:
            t.join(timeout=5)
        assert code == 1008 and "audio messages a second of audio" in why and took < 15, (code, why, took)
        s = Conn(port)
        assert s.start()["type"] == "ready"
        for c in [*feeders, flood, s]:
            c.close()
    finally:
        kill_group(proc)
