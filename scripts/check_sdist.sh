#!/usr/bin/env bash
# Builds an sdist, installs it into a scratch folder (not the checkout), and runs the layer tests
# against that installation with the JIT disabled: proves MANIFEST.in carries everything needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m build --sdist --no-isolation --outdir "$work/dist" . >/dev/null
python -m pip install -q --no-build-isolation --no-deps --target "$work/site" "$work"/dist/seastar_layers-*.tar.gz
repo=$(pwd)
cd "$work"
export PYTHONPATH="$work/site"
python -c "import seastar_layers, sys; assert seastar_layers.__file__.startswith('$work/site'), seastar_layers.__file__"
SEASTAR_CACHE_DIR="$work/cache" python -m pytest -q -p no:cacheprovider \
  "$repo/tests/test_pyg_layers.py" "$repo/tests/test_dgl_layers.py" "$repo/tests/test_prebuilt.py"
