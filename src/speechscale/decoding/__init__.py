"""Decoding: CTC log-probabilities to text (greedy, beam search with a KenLM model, lexicon), word timings,
WER/CER and their word alignment, LM building and tuning."""
