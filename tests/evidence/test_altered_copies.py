"""The altered copies the benches score a checkpoint on (benchmarks.shared.altered_manifest): a real recording
made quieter by a level measured here, and led by a silent microphone's noise at its stated level."""
import json

import numpy as np
import pytest
import soundfile as sf

from benchmarks.shared import SILENT_MIC_DBFS, altered_manifest
from tests.conftest import shared


def _rms_db(x: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64)))))


@pytest.mark.parametrize("quieter_db, lead_s", [(20.0, 0.0), (0.0, 2.0), (30.0, 1.5)])
def test_a_copy_is_the_recording_quieter_after_a_silent_microphone(tmp_path, quieter_db, lead_s):
    src = shared("ldc93s1", "LDC93S1.wav")
    manifest = tmp_path / "in.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": str(src), "duration": 2.9, "text": "she had"}) + "\n")
    copy = altered_manifest(manifest, tmp_path / "out", quieter_db=quieter_db, lead_s=lead_s)
    [row] = [json.loads(x) for x in open(copy)]
    wav, rate = sf.read(str(src), dtype="float64")
    out, out_rate = sf.read(row["audio_filepath"], dtype="float64")
    lead = int(lead_s * rate)
    assert out_rate == rate and out.shape[0] == wav.shape[0] + lead
    assert row["text"] == "she had" and row["duration"] == pytest.approx(out.shape[0] / rate, abs=1e-4)
    if lead:  # the lead holds only the noise, at its level within a tenth of a decibel
        assert _rms_db(out[:lead]) == pytest.approx(SILENT_MIC_DBFS, abs=0.1)
    # the part after the lead is the recording at the stated level, plus the noise (at its level) where there is one
    speech = out[lead:]
    gain = np.dot(speech, wav) / np.dot(wav, wav)
    assert 20 * np.log10(gain) == pytest.approx(-quieter_db, abs=0.2)  # the noise correlates a little
    residual = speech - gain * wav
    if lead:
        assert _rms_db(residual) == pytest.approx(SILENT_MIC_DBFS, abs=0.1)
    else:
        assert np.abs(residual).max() < 1e-6
