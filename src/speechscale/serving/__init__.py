"""Using a trained model: transcription of any audio file (chunked, batched, word timings) and the HTTP
service with its web page."""
