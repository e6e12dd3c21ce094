#!/usr/bin/env bash
# The main job: install llamacpy, fetch the default model into the model cache, show what the
# tools do with it (inspect, then llama-quantize to Q8_0 next to it).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS= scripts/setup.sh
MODEL=$(.venv/bin/llamacpy pull gemma3-270m)
echo "== model: $MODEL"
.venv/bin/llamacpy inspect --no-tensors "$MODEL"
OUT="$(dirname "$MODEL")/gemma-3-270m-requantized-q8_0.gguf"
echo "== llama-quantize --allow-requantize $MODEL $OUT Q8_0"
.venv/bin/llama-quantize --allow-requantize "$MODEL" "$OUT" Q8_0 | tail -4
.venv/bin/llamacpy inspect "$OUT" | sed -n '/^tensors:/,+6p'
