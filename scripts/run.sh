#!/usr/bin/env bash
# The main job: install llamacpy, fetch the default model (Qwen2.5-Coder 0.5B Instruct, the
# catalogue's DEFAULT_MODEL) into the model cache, and start llama-server on it. MODEL_NAME=NAME
# serves another catalogue model; extra arguments go to llama-server (e.g. --port 8081 -np 4).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS= scripts/setup.sh
DEFAULT=$(.venv/bin/python -c 'from llamacpy.hub import DEFAULT_MODEL; print(DEFAULT_MODEL)')
NAME=${MODEL_NAME:-$DEFAULT}
MODEL=$(.venv/bin/llamacpy pull "$NAME")
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8080}
echo "== model: $MODEL"
echo "== web chat: http://$HOST:$PORT/    OpenAI API: http://$HOST:$PORT/v1"
exec .venv/bin/llama-server -m "$MODEL" --host "$HOST" --port "$PORT" "$@"
