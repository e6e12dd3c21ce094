"""Command-line tools, named and flagged like llama.cpp's (one module per tool)."""
