"""Train GAT, GCN or APPNP on a Planetoid dataset with PyG, using seastar layers and/or PyG's own.

    python examples/train_pyg.py --model gat --dataset Cora --backend both

The models and hyperparameters are those of PyG's examples; with --backend both the same initial
weights train with each backend, and the report puts accuracy, epoch time and peak memory side by
side. The only difference between the two models is the import of the layer classes.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

sys.path.insert(0, str(Path(__file__).parent))
from common import HPARAMS, load, parse_args, report, train  # noqa: E402

import seastar_layers  # noqa: E402


class GAT(torch.nn.Module):
    def __init__(self, layers, in_channels, classes, hidden=8, heads=8):
        super().__init__()
        self.conv1 = layers.GATConv(in_channels, hidden, heads=heads, dropout=0.6)
        self.conv2 = layers.GATConv(hidden * heads, classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


class GCN(torch.nn.Module):
    def __init__(self, layers, in_channels, classes, hidden=16):
        super().__init__()
        self.conv1 = layers.GCNConv(in_channels, hidden)
        self.conv2 = layers.GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


class APPNPNet(torch.nn.Module):
    def __init__(self, layers, in_channels, classes, hidden=64):
        super().__init__()
        self.lin1 = torch.nn.Linear(in_channels, hidden)
        self.lin2 = torch.nn.Linear(hidden, classes)
        self.prop = layers.APPNP(K=10, alpha=0.1)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.lin1(x))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.prop(self.lin2(x), edge_index)


MODELS = {"gat": GAT, "gcn": GCN, "appnp": APPNPNet}


def main():
    args = parse_args(__doc__)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load(args)
    hp = HPARAMS[args.model]
    epochs = args.epochs or hp["epochs"]
    backends = ["native", "seastar"] if args.backend == "both" else [args.backend]
    torch.manual_seed(args.seed)
    initial = MODELS[args.model](pyg_nn, data.x.shape[1], data.num_classes).state_dict()
    results = []
    for backend in backends:
        layers = seastar_layers if backend == "seastar" else pyg_nn
        model = MODELS[args.model](layers, data.x.shape[1], data.num_classes)
        model.load_state_dict(copy.deepcopy(initial), strict=True)
        torch.manual_seed(args.seed)
        results.append(train(model, lambda: model(data.x, data.edge_index), data, hp, epochs, backend))
    report(results, f"PyG {args.model.upper()} on {data.name} ({epochs} epochs, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
