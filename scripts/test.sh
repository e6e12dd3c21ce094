#!/usr/bin/env bash
# The tests: install llamacpy with its test dependencies, then pytest. The first run downloads the
# three reference models (~850 MB) into the model cache ($LLAMA_CACHE, default ~/.cache/llama.cpp).
# Extra pytest arguments pass through, e.g. scripts/test.sh tests/format -x
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
