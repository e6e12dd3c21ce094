#!/usr/bin/env bash
# The main job: install llamacpy, fetch the default model (Gemma 3 270M) into the model cache,
# and start llama-server on it. Extra arguments go to llama-server (e.g. --port 8081 -np 4).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS= scripts/setup.sh
MODEL=$(.venv/bin/llamacpy pull gemma3-270m)
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8080}
echo "== model: $MODEL"
echo "== web chat: http://$HOST:$PORT/    OpenAI API: http://$HOST:$PORT/v1"
exec .venv/bin/llama-server -m "$MODEL" --host "$HOST" --port "$PORT" "$@"
