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
