"""Speech: whisper's log-mel front end (mel.py) and its decoding loop (transcribe.py)."""
