"""This repository's evidence: the protocols that make its figures and the renderers of BENCHMARKS.md (run from a
checkout with `python -m benchmarks`; never installed with the package)."""
