#!/usr/bin/env bash
# Sets up the environment and runs the whole test suite (the command the README and CI use), spread
# over the machine's cores by pytest-xdist (pass -n 0 to run it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# the kernels the tests compile on first use go through ccache too, so check_dist.sh's reuse them
. scripts/compiler_cache.sh
python -m pytest -q -n auto --dist worksteal "$@"
