"""Benchmarks a user runs on their own hardware (`speechscale bench ...`): each measures one thing, the compared
variants side by side in one run (harness.py), and prints JSON with its provenance. They read the audio they are
given (--manifest) or synthesize it (audio.py)."""
