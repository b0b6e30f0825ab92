"""Offline inference: a model over whole recordings (chunked, graphed), word times snapped to sound, forced
alignment, subtitles."""
