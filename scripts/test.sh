#!/usr/bin/env bash
# Sets up the environment and runs the whole test suite (the command the README and CI use).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m pytest -q "$@"
