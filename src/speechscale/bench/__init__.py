"""Benchmarks: training throughput."""
