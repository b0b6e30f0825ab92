"""Benchmarks: each measures one thing side by side in one run and returns JSON; `bench all` (suite.py) runs
them, commits JSON + PNG and renders the BENCHMARKS.md tables (tables.py)."""
