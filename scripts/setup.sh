#!/usr/bin/env bash
# Shared by run.sh and test.sh: a virtual environment in .venv with llamacpy installed (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
SPEC="."
[ -n "${EXTRAS:-}" ] && SPEC=".[$EXTRAS]"
.venv/bin/python -m pip install --quiet -e "$SPEC"
# Compile the numba kernels now, into numba's cache, so that llama-server's first start and the
# first request do not wait for them (the catalogue models in the model cache, else a tiny model
# of every tensor type). A failure here only means the kernels compile on first use instead.
if [ -z "${LLAMACPY_NO_WARMUP:-}" ]; then
  echo "== compiling the kernels ahead of time (llamacpy warmup; LLAMACPY_NO_WARMUP=1 skips it)"
  .venv/bin/llamacpy warmup || echo "== llamacpy warmup failed; the kernels will compile on first use"
fi
