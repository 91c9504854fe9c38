#!/usr/bin/env bash
# Creates .venv (once) with the pinned requirements and installs seastar_layers into it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q -r requirements.txt
. scripts/compiler_cache.sh
python -m pip install -q --no-build-isolation -e .
