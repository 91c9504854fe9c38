#!/usr/bin/env bash
# The main job: set up, then train a GAT on Cora with seastar layers and with PyG's stock GATConv,
# and print accuracy, epoch time and peak memory side by side. Extra arguments go to the script
# (e.g. --model gcn, --dataset CiteSeer, --epochs 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python examples/train_pyg.py --model gat --dataset Cora --backend both "$@"
