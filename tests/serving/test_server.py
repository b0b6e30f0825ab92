"""The transcription service for real: `speechscale serve` on a loopback port, concurrent clients, bad
uploads, and the web page driven in headless Chromium."""
import concurrent.futures
import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from tests.conftest import fake_microphone_chromium, headless_chromium, shared, start_server
from tests.distributed.launch import kill_group

LDC = "she had your dark suit in greasy wash water all year"


@pytest.fixture(scope="module")
def server(ldc_checkpoint, tmp_path_factory):
    proc, url = start_server(ldc_checkpoint, tmp_path_factory.mktemp("serve") / "log", "--max-mb", "1.5",
                             "--max-seconds", "10")
    try:
        yield url
    finally:
        kill_group(proc)


def _post(url, data, content_type="audio/wav", query=""):
    req = urllib.request.Request(url + "/v1/transcribe" + query, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _declared_only(url, size):
    """Send only the headers of a POST declaring `size` bytes; the server must answer without the body."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /v1/transcribe HTTP/1.1\r\nHost: {host}\r\nContent-Type: audio/wav\r\n"
                     f"Content-Length: {size}\r\n\r\n".encode())
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _multipart(data, field="file", filename="clip.wav"):
    boundary = "speechscaleboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_32_concurrent_requests_are_all_answered_correctly_in_batches(server):
    audio = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(_post, server, *( _multipart(audio) if i % 2 else (audio, "audio/wav")))
                   for i in range(32)]
        answers = [f.result() for f in futures]
    assert all(code == 200 for code, _ in answers), answers[:2]
    assert {res["text"] for _, res in answers} == {LDC}
    words = answers[0][1]["words"]
    assert [w["word"] for w in words] == LDC.split()
    assert all(0 <= w["start"] < w["end"] <= 2.95 and 0 < w["confidence"] <= 1 for w in words)
    assert all(a["end"] <= b["start"] for a, b in zip(words, words[1:]))
    with urllib.request.urlopen(server + "/healthz") as r:
        assert json.load(r)["batches"] < 32  # requests shared model calls


def test_a_port_in_use_or_an_unknown_host_is_one_line_before_the_model_loads(server, capsys, tmp_path):
    from urllib.parse import urlsplit

    from tests.conftest import main_cli

    where = urlsplit(server)
    absent = str(tmp_path / "none.pt")  # never read: the address is checked first
    for flags, said in [(["--host", where.hostname, "--port", str(where.port)], "Address already in use"),
                        (["--host", "no-such-host.invalid"], "--host no-such-host.invalid: ")]:
        code, _, err = main_cli(capsys, "serve", "--checkpoint", absent, *flags)
        assert code == 2 and said in err and "none.pt" not in err and err.count("\n") == 1, err


def test_subtitles_are_answered_for_format_srt_and_vtt(server):
    """`?format=srt|vtt`: the same words as the JSON answer, as cues the `srt` and `webvtt-py` parsers read back;
    any other format is refused before the body is read."""
    import io

    import srt
    import webvtt

    audio = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    answers = {}
    for fmt in ("srt", "vtt"):
        req = urllib.request.Request(f"{server}/v1/transcribe?format={fmt}", data=audio,
                                     headers={"Content-Type": "audio/wav"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answers[fmt] = (r.headers["Content-Type"], r.read().decode())
    kind, text = answers["srt"]
    cues = list(srt.parse(text))
    assert kind.startswith("application/x-subrip") and " ".join(c.content.replace("\n", " ") for c in cues) == LDC
    words = _post(server, audio)[1]["words"]
    assert cues[0].start.total_seconds() == words[0]["start"] and cues[-1].end.total_seconds() <= 2.925
    kind, text = answers["vtt"]
    assert kind.startswith("text/vtt") and text.startswith("WEBVTT\n")
    assert " ".join(c.text.replace("\n", " ") for c in webvtt.from_buffer(io.StringIO(text))) == LDC
    req = urllib.request.Request(f"{server}/v1/transcribe?format=docx", data=audio, headers={"Content-Type": "audio/wav"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=60)
    assert refused.value.code == 422 and "srt or vtt" in json.load(refused.value)["detail"]


def test_bad_uploads_get_clear_4xx_answers_and_the_server_lives_on(server):
    assert _post(server, b"")[0] == 422
    code, res = _post(server, b"RIFF\x00\x00not audio at all" * 10)
    assert code == 415 and "unsupported or corrupt audio" in res["detail"]
    code, res = _post(server, str(shared("ldc93s1", "LDC93S1.wav")).encode(), "text/plain")  # a path is just bytes
    assert code == 415
    code, res = _declared_only(server, 2 * 1024 * 1024)  # refused on its Content-Length, before the body
    assert code == 413 and "limit" in res["detail"]
    code, res = _post(server, shared("jfk", "jfk.flac").read_bytes(), "audio/flac")  # 11 s > --max-seconds 10
    assert code == 413 and "11.0 s" in res["detail"]
    code, res = _post(server, *_multipart(b"x", field="other"))
    assert code == 422 and "file" in res["detail"]
    assert _post(server, shared("ldc93s1", "LDC93S1.wav").read_bytes())[1]["text"] == LDC
    audio = shared("ldc93s1", "LDC93S1.wav").read_bytes()
    assert _post(server, audio, query="?digits=true")[1]["text"] == LDC  # no number in it
    code, res = _post(server, audio, query="?digits=maybe")
    assert code == 422 and "digits must be true or false" in res["detail"]


def test_a_phone_recording_in_m4a_or_a_browser_one_in_webm_is_transcribed_and_bounded(server, tmp_path):
    """Compressed containers (PyAV) go through the same bounds as wav: the length limit and a clear 415."""
    import soundfile as sf

    from speechscale.decoding.metrics import edit_distance
    from tests.media import encode

    wav, rate = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="float32")
    for suffix, kind in (("m4a", "audio/mp4"), ("webm", "audio/webm")):
        code, res = _post(server, encode(wav, rate, tmp_path / f"ldc.{suffix}").read_bytes(), kind)
        assert code == 200 and edit_distance(LDC, res["text"]) <= 0.1 * len(LDC), res
    long = encode(np.tile(wav, 4), rate, tmp_path / "long.m4a").read_bytes()  # 11.7 s > --max-seconds 10
    code, res = _post(server, *_multipart(long, filename="long.m4a"))
    assert code == 413 and "11.7 s" in res["detail"]
    m4a = (tmp_path / "ldc.m4a").read_bytes()
    code, res = _post(server, m4a[:len(m4a) // 2], "audio/mp4")
    assert code == 415 and "m4a" in res["detail"]


def _form(fields, audio=None, url=None):
    """A multipart body of text `fields` and, when given, the audio as `file`; posted to `url` when given."""
    boundary = "speechscaleboundary"
    parts = [f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
             for k, v in fields.items()]
    if audio is not None:
        parts.append(_multipart(audio)[0][:-len(f"--{boundary}--\r\n")])
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    if url is None:
        return body
    req = urllib.request.Request(url, data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode(), r.headers.get("content-type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("content-type")


def test_align_times_an_uploaded_transcript_as_the_cli_does_and_refuses_what_it_cannot(server, ldc_checkpoint):
    """POST /v1/align: the words of `speechscale align` for the same file and text (JSON, or SRT parsed back),
    concurrent requests all answered; a missing text, a raw body, a text with nothing to spell, one too long for the
    audio and one over the size limit are refused with the reason, and the server lives on."""
    import srt

    from speechscale.data.audio import load_audio
    from speechscale.inference.align import align_waveform
    from speechscale.inference.transcribe import Transcriber

    path = shared("ldc93s1", "LDC93S1.wav")
    audio, raw = path.read_bytes(), "She had your dark suit in greasy wash water all year."
    expected = align_waveform(Transcriber(ldc_checkpoint), load_audio(path, 16000), raw)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: _form({"text": raw}, audio, server + "/v1/align"), range(4)))
    assert all(code == 200 and json.loads(body) == expected for code, body, _ in answers), answers[0]
    code, body, kind = _form({"text": raw}, audio, server + "/v1/align?format=srt")
    assert code == 200 and kind.startswith("application/x-subrip")
    assert " ".join(c.content.replace("\n", " ") for c in srt.parse(body)) == LDC
    two = _form({"text": raw}, audio).replace(b"--speechscaleboundary\r\n", b"--speechscaleboundary\r\nContent-"
                                              b"Disposition: form-data; name=\"text\"\r\n\r\nzzz\r\n"
                                              b"--speechscaleboundary\r\n", 1)
    req = urllib.request.Request(server + "/v1/align", data=two,
                                 headers={"Content-Type": "multipart/form-data; boundary=speechscaleboundary"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 422 and "one `text` field (text), not 2" in json.load(info.value)["detail"]
    for fields, give, want, words in [({}, audio, 422, "one `text` field (text), not 0"),
                                      ({"text": "?! ..."}, audio, 422, "nothing to align"),
                                      ({"text": "she had λόγος"}, audio, 422, "does not spell: 'γλος'"),
                                      ({"text": " ".join([raw] * 4)}, audio, 422, "longer than the audio"),
                                      ({"text": "a" * 300}, audio, 413, "at most 246"),
                                      ({"text": raw}, None, 422, "`file` field")]:
        code, body, _ = _form(fields, give, server + "/v1/align")
        assert code == want and words in json.loads(body)["detail"], (fields.keys(), code, body)
    req = urllib.request.Request(server + "/v1/align", data=audio, headers={"Content-Type": "audio/wav"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 422 and "fields file and text" in json.load(info.value)["detail"]
    req = urllib.request.Request(server + "/v1/align", data=_form({"text": raw}, audio), headers={
        "Content-Type": "multipart/form-data; boundary=speechscaleboundary", "Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 403  # a page elsewhere cannot use it (the checks /v1/transcribe makes)
    assert _post(server, audio)[1]["text"] == LDC
    with urllib.request.urlopen(server + "/healthz") as r:
        assert json.load(r)["aligning"] == 0  # every alignment answered or refused, none left counted


def test_the_page_uploads_a_file_and_shows_the_transcript_in_chromium(server, tmp_path):
    browser = headless_chromium()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        browser.get(server + "/")
        assert browser.title == "speechscale"
        browser.find_element(By.ID, "file").send_keys(str(shared("ldc93s1", "LDC93S1.wav")))
        browser.find_element(By.ID, "send").click()
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "transcript").get_attribute("data-text"))
        assert browser.find_element(By.ID, "transcript").get_attribute("data-text") == LDC
        assert browser.find_element(By.ID, "transcript").text.split() == LDC.split()
        assert "2.92 s of audio" in browser.find_element(By.ID, "status").text
        words = browser.find_elements(By.CSS_SELECTOR, "#transcript span.word")
        assert [w.text for w in words] == LDC.split() and all("confidence" in w.get_attribute("title") for w in words)
        browser.save_screenshot(str(tmp_path / "page.png"))
        # the subtitle links save what the service answers for ?format=srt and vtt, named after the upload
        downloads = tmp_path / "downloads"
        downloads.mkdir()
        browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        audio = shared("ldc93s1", "LDC93S1.wav").read_bytes()
        for fmt in ("srt", "vtt"):
            assert browser.find_element(By.ID, "subtitles").is_displayed()
            browser.find_element(By.ID, fmt).click()
            saved = downloads / f"LDC93S1.{fmt}"
            WebDriverWait(browser, 60).until(lambda b, p=saved: p.exists() and p.stat().st_size)
            WebDriverWait(browser, 10).until(lambda b, f=fmt: f"Saved LDC93S1.{f}" in b.find_element(By.ID, "status").text)
            req = urllib.request.Request(f"{server}/v1/transcribe?format={fmt}", data=audio,
                                         headers={"Content-Type": "audio/wav"})
            with urllib.request.urlopen(req, timeout=120) as r:
                assert saved.read_bytes() == r.read()
        cues = (downloads / "LDC93S1.srt").read_text().split("\n\n")
        assert " ".join(" ".join(c.splitlines()[2:]) for c in cues if c.strip()) == LDC
        # with its transcript given, the page times those words (POST /v1/align), and its subtitles are align's
        raw = "She had your dark suit in greasy wash water all year."
        browser.find_element(By.ID, "known").send_keys(raw)
        browser.find_element(By.ID, "send").click()
        WebDriverWait(browser, 60).until(lambda b: "s of audio" in b.find_element(By.ID, "status").text)
        assert browser.find_element(By.ID, "transcript").get_attribute("data-text") == LDC
        browser.save_screenshot(str(tmp_path / "aligned.png"))
        aligned = json.loads(_form({"text": raw}, audio, server + "/v1/align")[1])["words"]
        titles = [w.get_attribute("title") for w in browser.find_elements(By.CSS_SELECTOR, "#transcript span.word")]
        assert titles == [f"{w['start']:.2f}-{w['end']:.2f} s, confidence {w['confidence']:g}" for w in aligned]
        again = tmp_path / "again"
        again.mkdir()
        browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(again)})
        browser.find_element(By.ID, "vtt").click()
        WebDriverWait(browser, 60).until(lambda b: (again / "LDC93S1.vtt").exists() and (again / "LDC93S1.vtt").stat().st_size)
        assert (again / "LDC93S1.vtt").read_text() == _form({"text": raw}, audio, server + "/v1/align?format=vtt")[1]
    finally:
        browser.quit()


def test_the_page_records_from_a_microphone_and_transcribes_it_in_chromium(server, tmp_path):
    """Chromium's fake capture device plays a real recording into getUserMedia; the page records it as
    WAV, posts it and shows the transcript."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser = fake_microphone_chromium(tmp_path)
    try:
        browser.get(server + "/")
        browser.find_element(By.ID, "record").click()
        WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "stop").is_enabled())
        time.sleep(4.0)  # the 2.9 s recording plays into the page
        browser.find_element(By.ID, "stop").click()
        WebDriverWait(browser, 60).until(lambda b: "s of audio" in b.find_element(By.ID, "status").text
                                         or "Error" in b.find_element(By.ID, "status").text)
        status = browser.find_element(By.ID, "status").text
        text = browser.find_element(By.ID, "transcript").get_attribute("data-text")
        assert "s of audio" in status, status
        seconds = float(status.split()[0])
        assert 3.0 <= seconds <= 8.0  # what was recorded, at the page's own sample rate
        # the recording, heard through the page: the fake device glitches when the machine is loaded (words
        # garbled, letters kept: "youar daeryry ysuit" seen), so the characters are what must come through
        from speechscale.decoding.metrics import edit_distance

        assert edit_distance(LDC, text) / len(LDC) <= 0.4, text
    finally:
        browser.quit()


def test_the_pages_digits_box_writes_numbers_in_digits_in_the_transcript_and_its_subtitles(numbers_checkpoint,
                                                                                            tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    proc, url = start_server(numbers_checkpoint / "run" / "checkpoints" / "best.pt", tmp_path / "log")
    browser = headless_chromium()
    try:
        browser.get(url + "/")
        transcript = browser.find_element(By.ID, "transcript")
        browser.find_element(By.ID, "file").send_keys(str(numbers_checkpoint / "s.wav"))
        for box, want in ((False, "in nineteen ninety it cost five dollars and fifty cents on the twenty first"),
                          (True, "in 1990 it cost $5.50 on the 21st")):
            if browser.find_element(By.ID, "digits").is_selected() != box:
                browser.find_element(By.ID, "digits").click()
            browser.execute_script("document.getElementById('transcript').dataset.text = ''")
            browser.find_element(By.ID, "send").click()
            WebDriverWait(browser, 60).until(lambda b: transcript.get_attribute("data-text"))
            assert transcript.get_attribute("data-text") == want
        downloads = tmp_path / "downloads"
        downloads.mkdir()
        browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        browser.find_element(By.ID, "srt").click()
        WebDriverWait(browser, 60).until(lambda b: (downloads / "s.srt").exists() and (downloads / "s.srt").stat().st_size)
        assert "in 1990 it cost $5.50 on the 21st" in " ".join((downloads / "s.srt").read_text().split())
    finally:
        browser.quit()
        kill_group(proc)
