#!/usr/bin/env bash
# Builds the sdist and, from it, the wheel (`python -m build`); checks that the wheel's extension
# targets the architecture's baseline CPU; installs the wheel into a scratch folder (not the
# checkout) and runs the layer tests against that installation (test_prebuilt.py runs the layers
# with SEASTAR_NO_JIT=1 and no compiler). Proves that MANIFEST.in carries everything the build
# needs and that the wheel works where it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
. scripts/compiler_cache.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset SEASTAR_NATIVE  # the distributed build must be the portable one
python -m build --no-isolation --outdir "$work/dist" . >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
sdist=$(ls "$work"/dist/seastar_layers-*.tar.gz)
wheel=$(ls "$work"/dist/seastar_layers-*.whl)
echo "built $(basename "$sdist") and $(basename "$wheel")"

python -m pip install -q --no-deps --target "$work/site" "$wheel"
extension=$(ls "$work"/site/seastar_layers/_C*.so)
if [ "$(uname -m)" = x86_64 ]; then
  # the x86-64 baseline has SSE2 only: a ymm/zmm register means AVX code that older CPUs cannot run,
  # except in the kernels' AVX2 and AVX-512 clones (codegen/cpu.py: CLONES), which only CPUs that
  # have those are given
  counts=$(objdump -d --no-show-raw-insn "$extension" | awk '
    /^[0-9a-f]+ <.*>:$/ { clone = ($2 ~ /\.arch_x86_64_v[34]/) }
    /%[yz]mm/ { if (clone) cloned++; else avx++ }
    END { print avx + 0, cloned + 0 }')
  read -r avx cloned <<<"$counts"
  if [ "$avx" != 0 ]; then
    echo "error: $(basename "$wheel") is not portable: $avx instructions outside the clones use AVX" \
         "registers (was it built with SEASTAR_NATIVE=1 or -march in CFLAGS?)" >&2
    exit 1
  fi
  if [ "$cloned" = 0 ]; then
    echo "error: $(basename "$wheel") has no AVX2 clones of its kernels (codegen/cpu.py: CLONES)" >&2
    exit 1
  fi
  echo "portable: AVX registers only in the kernels' AVX2 and AVX-512 clones ($cloned instructions)"
fi

repo=$(pwd)
cd "$work"
export PYTHONPATH="$work/site"
python -c "import seastar_layers, sys; assert seastar_layers.__file__.startswith('$work/site'), seastar_layers.__file__"
SEASTAR_CACHE_DIR="$work/cache" python -m pytest -q -p no:cacheprovider -n auto --dist worksteal \
  "$repo/tests/test_pyg_layers.py" "$repo/tests/test_dgl_layers.py" "$repo/tests/test_prebuilt.py"
