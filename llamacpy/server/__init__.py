"""llama-server: the OpenAI-compatible HTTP server (routes in app.py, engine thread in engine.py)."""
