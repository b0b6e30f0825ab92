"""One recognizer, many streams: 16 streams of different files and rates, pushed in different chunk sizes and
stepped together, each get exactly the logits and text they get alone; a dropped stream's state row is reset
before another stream takes it; a stream that pushed nothing ends cleanly."""
import gc

import numpy as np
import soundfile as sf
import torch

from speechscale.components import load_components
from speechscale.streaming.recognizer import Recognizer
from tests.serving.test_streaming import CHUNKS_MS, _files, _offline, _stream


def test_sixteen_streams_stepped_together_get_the_logits_and_text_each_gets_alone(streaming_checkpoint):
    comps = load_components(streaming_checkpoint)
    rec = Recognizer(comps)
    files = _files()[4:]
    audio = [sf.read(str(p), dtype="float32", always_2d=True) for p in files]
    audio = [(wav.mean(axis=1), rate) for wav, rate in audio]
    assert len(files) == 16 and {rate for _, rate in audio} == {8000, 16000, 44100}
    streams = [rec.create_stream(rate) for _, rate in audio]
    sizes = [max(1, round(rate * CHUNKS_MS[k % len(CHUNKS_MS)] / 1000)) for k, (_, rate) in enumerate(audio)]
    for s in streams:
        s.keep_logits = []
    batches, step = [], rec.step

    class Counted:  # the step, counting its rows
        pad_batch, chunk, lookahead, initial_state = step.pad_batch, step.chunk, step.lookahead, step.initial_state

        def __call__(self, feats, *args):
            batches.append(feats.shape[0])
            return step(feats, *args)
    rec.step = Counted()
    at = [0] * len(streams)
    while not all(s.ended for s in streams):
        for k, (s, (wav, _)) in enumerate(zip(streams, audio)):
            if at[k] < len(wav):
                s.push(wav[at[k]:at[k] + sizes[k]])
                at[k] += sizes[k]
            elif not s.closed:
                s.close()
        rec.decode_streams(streams)
        for s in streams:
            s.events()
    assert max(batches) >= 8 and sum(batches) > 1.5 * len(batches), batches[:40]  # the streams shared steps
    for k, (s, path) in enumerate(zip(streams, files)):
        alone, _ = _stream(comps, path, CHUNKS_MS[k % len(CHUNKS_MS)])
        torch.testing.assert_close(torch.cat(s.keep_logits), torch.cat(alone.logits), atol=1e-5, rtol=1e-5)
        logits, text = _offline(comps, path)
        assert s.text == alone.text == text, path.name


def test_a_dropped_streams_row_is_reset_before_the_next_stream_takes_it(streaming_checkpoint):
    from speechscale.data.audio import load_audio
    from tests.conftest import shared

    comps = load_components(streaming_checkpoint)
    rec = Recognizer(comps)
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), 16000)
    first = rec.create_stream()
    first.push(wav[:24000])  # half the sentence: its row now holds state
    rec.decode_streams([first])
    slot = first.slot
    assert any(t.abs().sum() > 0 for t in rec.pool.rows(slot))
    del first
    gc.collect()
    second = rec.create_stream()
    assert second.slot == slot  # the freed row, reused
    for i in range(0, len(wav), 1600):
        second.push(wav[i:i + 1600])
        rec.decode_streams([second])
        second.events()
    second.close()
    rec.decode_streams([second])
    second.events()
    assert second.text == _offline(comps, shared("ldc93s1", "LDC93S1.wav"))[1]
    empty = rec.create_stream()
    empty.close()
    rec.decode_streams([empty])
    assert empty.events() == [] and empty.ended and empty.text == ""
    np.testing.assert_equal(rec.pool.size, 2)
