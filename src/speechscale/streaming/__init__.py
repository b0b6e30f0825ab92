"""The live-stream engine: a stream's front end, the recognizer that steps many streams in batches, phrases and their
events, and the session the API and the command line open."""
