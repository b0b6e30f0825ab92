"""What streaming costs a model imported from deepspeech.pytorch: its unidirectional fixture model
(../shared/data/deepspeech_pytorch) normalizes each whole utterance by one mean and deviation, which a stream cannot
know; imported with `--stats MANIFEST` it streams with one mean and deviation fixed over that manifest. For each of
the fixture's recordings: the streamed text (a StreamingSession, audio in 100 ms pieces) against deepspeech.pytorch's
own offline text (its expected.json): character error rate, and the frames whose best symbol differs from its
output's; with statistics over LDC93S1 (what the model was trained on) and over the fixture's five recordings.

    python -m benchmarks.dspt_streaming [--out docs/figures/bench-all/dspt-streaming.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.checkout import pin_commit, record
from benchmarks.shared import shared_data

FILES = ("LDC93S1.wav", "LDC93S1_from44k.wav", "fsdd_16k.wav", "jfk_16k.wav", "yesno_16k.wav")


def _stats_manifests(work: Path) -> dict[str, Path]:
    """Manifest name -> the manifest the statistics are computed over."""
    fixture = work / "fixture.jsonl"
    fixture.write_text("".join(json.dumps({"audio_filepath": str(shared_data("deepspeech_pytorch", "audio", n)),
                                           "duration": 1.0, "text": "x"}) + "\n" for n in FILES))
    return {"LDC93S1 (its training audio)": shared_data("ldc93s1", "manifest.jsonl").resolve(),
            "the fixture's five recordings": fixture}


def measure(work: Path) -> list[dict[str, Any]]:
    """One row per statistics source and recording (module doc)."""
    import torch

    from speechscale.components import load_components
    from speechscale.data.audio import load_audio
    from speechscale.decoding.metrics import edit_distance
    from speechscale.streaming.session import StreamingSession

    fixture = shared_data("deepspeech_pytorch")
    expected = json.loads((fixture / "expected.json").read_text())["models"]["unidirectional_lstm"]["files"]
    rows = []
    for source, manifest in _stats_manifests(work).items():
        out = work / "uni.pt"
        subprocess.run([sys.executable, "-m", "speechscale.cli", "-q", "import", "deepspeech-pytorch",
                        str(fixture / "unidirectional_lstm.ckpt"), "--out", str(out), "--stats", str(manifest)],
                       check=True, capture_output=True)
        comps = load_components(out)
        stats = comps.features.cfg.global_stats
        for name in FILES:
            wav = load_audio(fixture / "audio" / name, 16000)
            session = StreamingSession(comps, sample_rate=16000, endpoint_frames=1000)
            session.logits = []
            for piece in np.array_split(wav, max(1, len(wav) // 1600)):
                session.accept(piece)
            session.finish()
            streamed = torch.cat(session.logits).softmax(-1).numpy()  # (T', V) the stream's output frames
            ref = np.load(fixture / f"unidirectional_lstm.{name[:-4]}.probs.npy")
            want = expected[name]["transcription"]
            frames = min(len(ref), len(streamed))
            rows.append({"stats": source, "mean": stats[0], "std": stats[-1], "recording": name,
                         "frames": len(ref), "stream_frames": len(streamed),
                         "cer": edit_distance(want, session.text) / max(1, len(want)),
                         "frames_other_symbol": float((streamed[:frames].argmax(1) != ref[:frames].argmax(1)).mean()),
                         "max_prob_diff": float(np.abs(streamed[:frames] - ref[:frames]).max()),
                         "text": session.text, "offline_text": want})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    pin_commit()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(Path(tmp))
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k not in ("text", "offline_text")}))
    if args.out:
        record(args.out, "benchmarks.dspt_streaming", argv, rows, {"step_ms": 100, "endpoint_frames": 1000}, began)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
