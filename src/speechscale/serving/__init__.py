"""Using a trained model: transcription of audio files."""
