"""Decoding (greedy CTC) and metrics (WER/CER)."""
