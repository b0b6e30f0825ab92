"""Streaming transcription: the streamed logits and text equal the offline ones of the same model on the whole
file, for 20 real files (8, 16 and 44.1 kHz, mono and stereo, 0.3-11 s) and chunks from 20 ms to 1 s and odd
sizes; dropping any carried state breaks it; endpointing splits phrases at pauses; other models are refused."""
import numpy as np
import pytest
import soundfile as sf
import torch

from speechscale.components import build_components, load_components
from speechscale.config import load_config
from speechscale.data.audio import load_audio
from speechscale.decoding.greedy import greedy_decode
from speechscale.streaming.session import StreamingRefused, StreamingSession
from tests.conftest import exactness_files, shared

CHUNKS_MS = [20, 100, 320, 1000, 37, 777 / 44.1]
LDC_WORDS = ["she", "had", "your", "dark", "suit", "in", "greasy", "wash", "water", "all", "year", "yes", "no", "dart",
             "sued", "watery"]  # 777/44.1 ms: 777 samples at 44.1 kHz, odd elsewhere too


def _files():
    return exactness_files()


@pytest.fixture(scope="module")
def comps(streaming_checkpoint):
    """A streaming model trained on LDC93S1 (conftest.streaming_checkpoint): every output frame's logits are
    compared, not only its text."""
    return load_components(streaming_checkpoint)


def _offline(comps, path):
    return _offline_wav(comps, load_audio(path, comps.features.cfg.sample_rate))


def _offline_wav(comps, wav):
    """The model on a whole waveform at its rate: logits (T', V) and the greedy transcript."""
    feats = comps.features(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)))
    with torch.no_grad():
        logits, lens = comps.model.eval()(feats[None], torch.tensor([feats.shape[1]]))
    return logits[0, : int(lens[0])], greedy_decode(logits, lens, comps.tokenizer)[0]


def _stream(comps, path, piece_ms, **kwargs):
    """`path` pushed into a StreamingSession (`kwargs`) in pieces of `piece_ms` of audio -> the session, its events."""
    raw, rate = sf.read(str(path), dtype="float32", always_2d=True)
    raw = raw.mean(axis=1)
    session = StreamingSession(comps, sample_rate=rate, **kwargs)
    session.logits = []
    n = max(1, int(round(rate * piece_ms / 1000)))
    events = []
    for i in range(0, len(raw), n):
        events += session.accept(raw[i:i + n])
    events += session.finish()
    return session, events


def test_streamed_logits_and_text_equal_the_offline_ones_for_every_file_and_chunk_size(comps):
    files = _files()
    assert len(files) >= 20 and {sf.info(str(f)).samplerate for f in files} == {8000, 16000, 44100}
    for k, path in enumerate(files):
        logits, text = _offline(comps, path)
        sizes = CHUNKS_MS if path.parent.name == "ldc93s1" else [CHUNKS_MS[k % 5], CHUNKS_MS[-1]]  # all on 3 files
        for ms in sizes:
            session, events = _stream(comps, path, ms)
            streamed = torch.cat(session.logits)
            assert streamed.shape == logits.shape, (path.name, ms)
            torch.testing.assert_close(streamed, logits, atol=2e-4, rtol=1e-4, msg=lambda m, p=path.name, c=ms: f"{p} {c}: {m}")
            assert session.text == text, (path.name, ms)
            assert all(e.type in ("partial", "final") for e in events)


@pytest.mark.parametrize("drop", ["rnn0_h", "conv1", "lookahead", "stft overlap"])
def test_dropping_any_carried_state_breaks_exactness(comps, drop, monkeypatch):
    """The test above fails when a piece of state is not carried: each is reset after every chunk here (the model's
    state by its name in stream_state_names, or the STFT's overlapping samples)."""
    path = shared("ldc93s1", "LDC93S1.wav")
    logits, _ = _offline(comps, path)
    original = StreamingSession.accept
    names = comps.model.stream_state_names()
    assert drop in names or drop == "stft overlap"

    def forgetful(self, samples):
        out = original(self, samples)
        if drop == "stft overlap":
            self.stream.front.features.wav = np.zeros_like(self.stream.front.features.wav)
        else:
            self.recognizer.pool.rows(self.stream.slot)[names.index(drop)].zero_()
        return out
    monkeypatch.setattr(StreamingSession, "accept", forgetful)
    session, _ = _stream(comps, path, 100)
    streamed = torch.cat(session.logits)
    assert streamed.shape != logits.shape or not torch.allclose(streamed, logits, atol=1e-2)


def test_running_normalization_streams_exactly_with_each_streams_own_statistics(comps, monkeypatch):
    """features.normalize=running (each frame's mean updated by the frames before it) streams: the streamed logits
    equal the offline ones of the same features, for files at three rates and several chunk sizes; two streams
    stepped in one batch keep their own statistics; resetting a stream's statistics after every chunk breaks it."""
    import dataclasses

    from speechscale.data.features import FeatureExtractor, global_stats
    from speechscale.streaming.recognizer import Recognizer

    files = [shared("ldc93s1", "LDC93S1.wav"), shared("jfk", "jfk.flac"), _files()[0]]
    stats = global_stats(comps.features.raw(torch.from_numpy(load_audio(f, 16000))) for f in files)
    cfg = dataclasses.replace(comps.features.cfg, normalize="running", global_stats=stats)  # the checkpoint's: none
    running = dataclasses.replace(comps, features=FeatureExtractor(cfg))
    for k, path in enumerate(files):
        logits, text = _offline(running, path)
        assert not torch.allclose(logits, _offline(comps, path)[0], atol=1e-2)  # not the checkpoint's normalization
        for ms in (CHUNKS_MS[k], CHUNKS_MS[-1]):
            session, _ = _stream(running, path, ms)
            torch.testing.assert_close(torch.cat(session.logits), logits, atol=2e-4, rtol=1e-4,
                                       msg=lambda m, p=path.name, c=ms: f"{p} {c}: {m}")
            assert session.text == text
    rec = Recognizer(running)  # one recognizer: both streams' spectra in one STFT, their steps in one batch
    streams = [rec.create_stream(16000) for _ in range(2)]
    wavs = [load_audio(f, 16000) for f in files[:2]]
    for s in streams:
        s.keep_logits = []
    for i in range(0, max(map(len, wavs)), 1600):
        for s, w in zip(streams, wavs):
            if i < len(w):
                s.push(w[i:i + 1600])
        rec.decode_streams(streams)
    for s in streams:
        s.close()
    rec.decode_streams(streams)
    for s, path in zip(streams, files[:2]):
        s.events()  # the decided logits, kept
        torch.testing.assert_close(torch.cat(s.keep_logits), _offline(running, path)[0], atol=2e-4, rtol=1e-4)
    original = StreamingSession.accept

    def forgetful(self, samples):
        out = original(self, samples)
        self.stream.front.carry = None
        return out
    monkeypatch.setattr(StreamingSession, "accept", forgetful)
    session, _ = _stream(running, files[0], 100)
    streamed = torch.cat(session.logits)
    assert streamed.shape != logits.shape or not torch.allclose(streamed, _offline(running, files[0])[0], atol=1e-2)


def test_models_that_need_the_whole_utterance_are_refused_in_one_line():
    for overrides, reason in [(["model.name=ds2-tiny", "features.normalize=none"], "bidirectional"),
                              (["model.name=conformer-tiny", "features.normalize=none"], "whole utterance"),
                              (["model.name=ds2-streaming-tiny", "features.normalize=utterance"],
                               "features.normalize=global, running or none")]:
        c = build_components(load_config(None, overrides))
        with pytest.raises(StreamingRefused) as info:
            StreamingSession(c)
        assert reason in str(info.value) and "\n" not in str(info.value)


def test_a_stream_takes_tensors_as_the_same_samples(comps):
    """A stream fed torch tensors (int16 PCM, float32) gives the events an array's samples give."""
    pcm, _ = sf.read(shared("ldc93s1", "LDC93S1.wav"), dtype="int16")
    runs = []
    for wrap in (np.asarray, torch.from_numpy):
        session = StreamingSession(comps)
        events = [e for i in range(0, len(pcm), 1600) for e in session.accept(wrap(pcm[i:i + 1600]))]
        runs.append(([e.to_dict() if hasattr(e, "to_dict") else repr(e) for e in events + session.finish()],
                     session.text))
    assert runs[0] == runs[1] and runs[0][1]


def test_a_pause_ends_a_phrase_with_word_times_from_the_stream_start(comps):
    """Speech, 1.5 s of silence, speech: with an endpoint of 0.4 s the stream's events split where the model's
    output goes quiet, finals carry increasing word times inside the stream, and their texts are the transcript.
    The pause always ends a phrase; the small overfit model may also fall quiet for 0.4 s inside an utterance (how
    often depends on the machine's rounding), which ends a phrase there too."""
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    audio = np.concatenate([wav, np.zeros(24000, np.float32), wav])
    session = StreamingSession(comps, endpoint_frames=20)  # 20 output frames: 0.4 s
    events = []
    for i in range(0, len(audio), 1600):
        events += session.accept(audio[i:i + 1600])
    events += session.finish()
    finals = [e for e in events if e.type == "final"]
    assert len(finals) >= 2 and " ".join(f.text for f in finals).replace(" ", "") == session.text.replace(" ", "")
    starts = [w.start for f in finals for w in f.words]
    assert starts == sorted(starts) and all(0 <= s <= len(audio) / 16000 for s in starts)
    quiet = session.frame_s * 20  # the endpoint span
    for a, b in zip(finals, finals[1:]):  # a phrase ends only after a quiet span
        assert b.words[0].start - a.words[-1].end >= quiet - 1e-6
    # a phrase ends inside the pause: the next one starts at the second utterance's own time
    second = (len(wav) + 24000) / 16000
    assert any(a.words[-1].end <= len(wav) / 16000 + 0.5 and b.words[0].start > second - 0.5
               for a, b in zip(finals, finals[1:])), [(f.words[0].start, f.words[-1].end) for f in finals]


def test_streamed_words_are_the_offline_words_with_their_times_and_confidences(comps):
    """Each final's words (start, end, confidence) are the offline transcript's words of its phrase: the greedy
    path's over the whole waveform's logits from the phrase's first output frame to its last, timed from the
    stream's start; for a file cut into phrases at a pause and for single files streamed in odd pieces. Of a quiet
    stretch before a phrase's first character only its last `lead` frames are kept (a space said there starts the
    first word), so each phrase is compared with the offline words from `lead` frames before its first frame (all
    quiet: the phrase before ended with more quiet frames than that)."""
    from speechscale.decoding.alignment import word_times

    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    cases = [(np.concatenate([np.zeros(8000, np.float32), wav, np.zeros(24000, np.float32), wav]), 20, 1600),
             (load_audio(shared("jfk", "jfk.flac"), 16000), 30, 777), (wav, 30, 320)]
    for audio, endpoint, piece in cases:
        session = StreamingSession(comps, endpoint_frames=endpoint)
        events = []
        for i in range(0, len(audio), piece):
            events += session.accept(audio[i:i + piece])
            dec = session.stream.decoder
            kept = sum(p.numel() for p in dec.path)
            assert kept == dec.frame - dec.phrase_start and (dec.phrase or kept <= dec.lead == 15)
        events += session.finish()
        log_probs = _offline_wav(comps, audio)[0].log_softmax(-1)
        finals = [e for e in events if e.type == "final"]
        assert len(finals) == len(session.boundaries) and finals
        for final, lo, hi in zip(finals, [0, *session.boundaries], session.boundaries):
            lo = max(0, lo - dec.lead)
            offline = word_times(log_probs[lo:hi], hi - lo, comps.tokenizer, session.frame_s, lo * session.frame_s)
            assert [w.word for w in final.words] == [w["word"] for w in offline] == final.text.split()
            for s, o in zip(final.words, offline):  # no word ends past the audio the stream received
                end = min(o["end"], round(len(audio) / 16000, 3))
                assert (s.start, s.end) == pytest.approx((min(o["start"], end), end), abs=1e-6), (s, o)
                assert s.confidence == pytest.approx(o["confidence"], abs=2e-3), (s, o)
        if len(finals) == 1:  # one phrase: the offline transcript's own words
            whole = word_times(log_probs, log_probs.shape[0], comps.tokenizer, session.frame_s)
            assert [w.word for w in finals[0].words] == [w["word"] for w in whole]
            received = round(len(audio) / 16000, 3)
            assert [t for w in finals[0].words for t in (w.start, w.end)] == \
                   pytest.approx([min(w[k], received) for w in whole for k in ("start", "end")], abs=1e-6)


def test_transcribe_stream_prints_json_lines_from_a_file_and_from_standard_input(streaming_checkpoint, ldc_checkpoint,
                                                                                capsys):
    import json
    import subprocess
    import sys

    from tests.conftest import main_cli

    path = shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")
    comps = load_components(streaming_checkpoint)
    _, text = _offline(comps, path)
    code, out, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint",
                              str(streaming_checkpoint), str(path))
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and rows[-1]["type"] == "final" and rows[-1]["text"] == text and rows[0]["type"] == "partial"
    pcm = (load_audio(path, 16000) * 32767).astype("<i2")  # raw 16-bit PCM at the model's rate: quantized audio,
    _, quantized = _offline_wav(comps, pcm.astype(np.float32) / 32768.0)  # so its own offline transcript
    proc = subprocess.run([sys.executable, "-m", "speechscale.cli", "transcribe", "--stream", "--no-realtime",
                           "--checkpoint", str(streaming_checkpoint), "-"], input=pcm.tobytes(), capture_output=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.decode().strip().splitlines()[-1] == quantized, proc.stderr[-2000:]
    code, _, err = main_cli(capsys, "transcribe", "--stream", "--checkpoint", str(ldc_checkpoint), str(path))
    assert code == 2 and "bidirectional" in err and len(err.strip().splitlines()) == 1


def test_transcribe_stream_reads_a_compressed_container_and_refuses_what_is_not_audio_in_one_line(
        streaming_checkpoint, tmp_path, capsys):
    import json

    from tests.conftest import main_cli
    from tests.media import encode

    wav, rate = sf.read(str(shared("ldc93s1", "LDC93S1.wav")), dtype="float32")
    m4a = encode(wav, rate, tmp_path / "ldc.m4a")
    _, text = _offline(load_components(streaming_checkpoint), m4a)  # the decoded file's own offline transcript
    code, out, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint",
                              str(streaming_checkpoint), str(m4a))
    assert code == 0 and json.loads(out.splitlines()[-1])["text"] == text, err
    (tmp_path / "not.wav").write_bytes(b"RIFF and then nothing that is audio")
    code, _, err = main_cli(capsys, "transcribe", "--stream", "--checkpoint", str(streaming_checkpoint),
                            str(tmp_path / "not.wav"))
    assert code == 2 and "not audio that soundfile can decode" in err and len(err.strip().splitlines()) == 1, err


def test_the_python_api_streams_a_streaming_checkpoint(streaming_checkpoint):
    import speechscale

    path = shared("ldc93s1", "LDC93S1_pcms16le_1_8000.wav")
    model = speechscale.load(streaming_checkpoint, device="cpu")
    _, text = _offline(model.components, path)
    wav, rate = sf.read(str(path), dtype="float32")
    stream = model.stream(sample_rate=rate)
    events = [e for i in range(0, len(wav), 800) for e in stream.accept(wav[i:i + 800])] + stream.finish()
    assert stream.text == text and events[-1].type == "final" and events[-1].text == text
    for bad in [dict(sample_rate=0), dict(sample_rate=10**9), dict(endpoint_frames=0),
                dict(endpoint_frames=1001), dict(endpoint_frames=2.5)]:
        with pytest.raises(ValueError, match="sample_rate must be|endpoint_frames must be"):
            model.stream(**bad)
    stream = model.stream(sample_rate=rate)  # a bad piece is refused before it reaches the stream's state
    for bad, said in [(np.full(800, np.nan, np.float32), "non-finite"), (wav[:1600].reshape(2, 800), "mono")]:
        with pytest.raises(ValueError, match=said):
            stream.accept(bad)
    events = [e for i in range(0, len(wav), 800) for e in stream.accept(wav[i:i + 800])] + stream.finish()
    assert stream.text == text and events[-1].text == text


@pytest.mark.parametrize("name", ["beam", "lexicon"])
def test_a_beam_search_streams_each_phrase_as_the_offline_search_of_its_frames(comps, name, tmp_path):
    """flashlight's incremental search (decode_begin/step/end) over the streamed frames: each phrase's final is the
    offline beam (or lexicon) search of that phrase's frames of the offline logits, searched by a decoder of its own;
    a file without a pause is one phrase, so its text is the offline search of the whole file."""
    from speechscale.decoding.decoders import DecoderConfig, build_decoder

    lexicon = tmp_path / "words.txt"
    lexicon.write_text("\n".join(LDC_WORDS) + "\n")
    cfg = DecoderConfig(name=name, beam_width=16, lexicon=str(lexicon) if name == "lexicon" else "")
    files = [*sorted(shared("ldc93s1").glob("*.wav")), shared("jfk", "jfk.flac"), *_files()[:3]]
    phrases, restarts = {}, {}
    for k, path in enumerate(files):
        logits, _ = _offline(comps, path)
        ms = CHUNKS_MS[k % len(CHUNKS_MS)]
        session, events = _stream(comps, path, ms, decoder=build_decoder(cfg, comps.tokenizer),
                                  endpoint_frames=12)
        reference = build_decoder(cfg, comps.tokenizer)
        log_probs = logits.float().log_softmax(-1)
        cuts = sorted({*session.boundaries, *session.stream.decoder.restarts})  # where searches began again
        starts, ends = [0, *cuts], [*cuts, logits.shape[0]]
        expected = [reference(log_probs[None, a:b], torch.tensor([b - a]))[0] for a, b in zip(starts, ends) if b > a]
        finals = [e.text for e in events if e.type == "final"]
        assert finals == [t for t in expected if t] or (not finals and not any(expected)), (path.name, ms)
        spans = [(a, b) for a, b, t in zip(starts, ends, expected) if t]
        for final, (a, b) in zip([e for e in events if e.type == "final"], spans):  # words timed inside their phrase
            times = [t for w in final.words for t in (w.start, w.end)]
            assert [w.word for w in final.words] == final.text.split() and times == sorted(times)
            assert a * session.frame_s - 1e-6 <= times[0] and times[-1] <= b * session.frame_s + 1e-6
        assert session.text == " ".join(t for t in expected if t)
        phrases[path.name] = len(finals)
        if path.name == "LDC93S1.wav":
            assert len(session.boundaries) == 1 and any(e.type == "partial" for e in events)
        restarts[path.name] = len(session.stream.decoder.restarts)
    assert phrases["jfk.flac"] >= 2, phrases  # searches restarted at pauses
    assert restarts["jfk.flac"] >= 1, restarts  # and in a pause long enough after a phrase's end


@pytest.mark.parametrize("name", ["beam", "lexicon"])
def test_a_silent_stream_holds_a_bounded_search(comps, name, tmp_path):
    """A beam search over a minute of faint noise and then speech: while nothing is said the search starts again
    every `endpoint_frames` quiet frames, keeping the last `lead` (a space said there starts the first word), so the
    frames it holds stay below those plus a step's; the speech after it is still found."""
    from speechscale.decoding.decoders import DecoderConfig, build_decoder

    lexicon = tmp_path / "words.txt"
    lexicon.write_text("\n".join(LDC_WORDS) + "\n")
    cfg = DecoderConfig(name=name, beam_width=16, lexicon=str(lexicon) if name == "lexicon" else "")
    session = StreamingSession(comps, decoder=build_decoder(cfg, comps.tokenizer), endpoint_frames=30)
    rng = np.random.default_rng(0)
    held = []
    for _ in range(600):  # 60 s of noise at -80 dBFS, in 100 ms pieces
        session.accept((1e-4 * rng.standard_normal(1600)).astype(np.float32))
        held.append(sum(f.shape[0] for f in session.stream.decoder.beam_frames))
    assert max(held) <= 30 + 15 + 5 and len(session.stream.decoder.restarts) >= 60 * 50 / 30 - 2, max(held)
    assert session.stream.decoder.lead == 15
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    events = [e for i in range(0, len(wav), 1600) for e in session.accept(wav[i:i + 1600])] + session.finish()
    said = " ".join(e.text for e in events if e.type == "final")
    assert "greasy wash water" in said, said


@pytest.mark.parametrize("name", ["greedy", "lexicon"])
def test_speech_without_a_pause_ends_a_phrase_at_a_space_once_it_is_long(comps, name, tmp_path):
    """LDC93S1 (2.9 s without a pause) with phrases of at most 0.6 s: several finals, each ended at a space, so
    their words are whole and joined they are the transcript; a lexicon search holds at most a phrase's frames and
    each final is the offline search of its phrase's frames."""
    from speechscale.decoding.decoders import DecoderConfig, build_decoder

    lexicon = tmp_path / "words.txt"
    lexicon.write_text("\n".join(LDC_WORDS) + "\n")
    search = None if name == "greedy" else build_decoder(DecoderConfig(name=name, beam_width=16, lexicon=str(lexicon)),
                                                         comps.tokenizer)
    path = shared("ldc93s1", "LDC93S1.wav")
    logits, text = _offline(comps, path)
    wav = load_audio(path, 16000)
    session = StreamingSession(comps, decoder=search)
    dec = session.stream.decoder
    dec.max_phrase_frames = 30  # 0.6 s
    events, held = [], []
    for i in range(0, len(wav), 1600):
        events += session.accept(wav[i:i + 1600])
        held.append(sum(f.shape[0] for f in dec.beam_frames))
    events += session.finish()
    finals = [e.text for e in events if e.type == "final"]
    assert len(finals) >= 3 and " ".join(finals) == session.text, finals
    assert session.text == (text if name == "greedy" else "she had your dark suit in greasy wash water all year")
    if name == "lexicon":
        assert max(held) <= 30 + 10 + 5  # a phrase: 0.6 s, a third more to its space, a step's frames
        reference = build_decoder(DecoderConfig(name=name, beam_width=16, lexicon=str(lexicon)), comps.tokenizer)
        log_probs = logits.float().log_softmax(-1)
        cuts = sorted({*session.boundaries, *dec.restarts})
        spans = zip([0, *cuts], [*cuts, logits.shape[0]])
        assert finals == [t for t in (reference(log_probs[None, a:b], torch.tensor([b - a]))[0] for a, b in spans) if t]


def test_transcribe_stream_and_the_api_take_the_lexicon_decoder(comps, streaming_checkpoint, tmp_path, capsys):
    import json

    import speechscale
    from speechscale.decoding.alignment import text_word_times
    from speechscale.decoding.decoders import DecoderConfig, build_decoder
    from tests.conftest import main_cli

    lexicon = tmp_path / "words.txt"
    lexicon.write_text("she\nhad\nyour\ndark\nsuit\nin\ngreasy\nwash\nwater\nall\nyear\n")
    path = shared("ldc93s1", "LDC93S1.wav")
    logits, _ = _offline(comps, path)
    search = build_decoder(DecoderConfig(name="lexicon", beam_width=50, lexicon=str(lexicon)), comps.tokenizer)
    expected = search(logits.float().log_softmax(-1)[None], torch.tensor([logits.shape[0]]))[0]
    assert expected == "she had your dark suit in greasy wash water all year"
    code, out, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--decoder", "lexicon",
                              "--lexicon", str(lexicon), "--checkpoint", str(streaming_checkpoint), str(path))
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and [r["text"] for r in rows if r["type"] == "final"] == [expected], err
    # one phrase, the whole file: its words timed on the offline logits as on the streamed ones
    frame_s = 1000 * comps.features.hop_length / comps.features.cfg.sample_rate * comps.model.stream_stride / 1000
    timed = text_word_times(logits.float().log_softmax(-1), logits.shape[0], expected, comps.tokenizer, frame_s)
    received = round(len(load_audio(path, 16000)) / 16000, 3)
    assert timed[-1]["end"] <= received + frame_s  # the last output frame's end
    for w in timed:  # a stream's words end by the audio it received
        w["end"] = min(w["end"], received)
    keys = ("word", "start", "end")
    assert [{k: w[k] for k in keys} for w in rows[-1]["words"]] == [{k: w[k] for k in keys} for w in timed]
    assert [w["confidence"] for w in rows[-1]["words"]] == pytest.approx([w["confidence"] for w in timed], abs=2e-3)
    assert [w["word"] for w in timed] == expected.split()
    stream = speechscale.load(streaming_checkpoint, device="cpu", decoder="lexicon", lexicon=str(lexicon)).stream()
    wav = load_audio(path, 16000)
    for i in range(0, len(wav), 1000):
        stream.accept(wav[i:i + 1000])
    stream.finish()
    assert stream.text == expected


def test_a_streaming_preset_trained_by_any_recipe_streams_with_the_training_sets_statistics(tmp_path, capsys):
    """The ldc93s1 recipe does not name a normalization: for ds2-streaming-tiny it resolves to global, training
    stores the per-bin statistics of its utterances in the checkpoint (equal to numpy's over the same frames), and
    `transcribe --stream` gives the offline transcript, frame for frame."""
    import json

    from speechscale.config import FeatureConfig
    from speechscale.data.features import FeatureExtractor
    from tests.conftest import main_cli

    code, out, err = main_cli(capsys, "train", "--config", "ldc93s1", f"data.root={shared('ldc93s1')}",
                              "model.name=ds2-streaming-tiny", "model.overrides={rnn_hidden: 128, rnn_layers: 2}",
                              "trainer.max_epochs=60", f"trainer.out_dir={tmp_path}")
    assert code == 0, err
    ckpt = tmp_path / "checkpoints" / "last.pt"
    saved = torch.load(ckpt, weights_only=True)["config"]["features"]
    assert saved["normalize"] == "global" and len(saved["global_stats"]) == 2 * 161
    raw = FeatureExtractor(FeatureConfig(normalize="none"))(torch.from_numpy(load_audio(shared("ldc93s1", "LDC93S1.wav"),
                                                                                        16000))).double().numpy()
    np.testing.assert_allclose(saved["global_stats"], np.concatenate([raw.mean(axis=1), raw.std(axis=1)]), atol=2e-5)
    comps = load_components(ckpt)
    path = shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")
    logits, text = _offline(comps, path)
    session, _ = _stream(comps, path, 100)
    torch.testing.assert_close(torch.cat(session.logits), logits, atol=2e-4, rtol=1e-4)
    code, out, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint", str(ckpt),
                              str(path))
    rows = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and text and " ".join(r["text"] for r in rows if r["type"] == "final") == text, err


def test_training_with_running_normalization_saves_the_training_sets_statistics_and_streams(tmp_path, capsys):
    """features.normalize=running: training computes the same per-bin statistics as for global (its prior) and
    saves them; the checkpoint streams with them (`transcribe --stream` runs, the offline logits frame for frame)."""
    from tests.conftest import main_cli

    code, out, err = main_cli(capsys, "train", "--config", "ldc93s1", f"data.root={shared('ldc93s1')}",
                              "model.name=ds2-streaming-tiny", "model.overrides={rnn_hidden: 64, rnn_layers: 1}",
                              "features.normalize=running", "trainer.max_steps=2", f"trainer.out_dir={tmp_path}")
    assert code == 0, err
    ckpt = tmp_path / "checkpoints" / "last.pt"
    saved = torch.load(ckpt, weights_only=True)["config"]["features"]
    raw = load_components(ckpt).features.raw(torch.from_numpy(load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)))
    raw = raw.double().numpy()
    assert saved["normalize"] == "running"
    np.testing.assert_allclose(saved["global_stats"], np.concatenate([raw.mean(axis=1), raw.std(axis=1)]), atol=2e-5)
    comps = load_components(ckpt)
    path = shared("ldc93s1", "LDC93S1_pcms16le_2_44100.wav")
    session, _ = _stream(comps, path, 100)
    torch.testing.assert_close(torch.cat(session.logits), _offline(comps, path)[0], atol=2e-4, rtol=1e-4)
    code, out, err = main_cli(capsys, "transcribe", "--stream", "--no-realtime", "--json", "--checkpoint", str(ckpt),
                              str(path))
    assert code == 0 and out.strip().splitlines(), err
