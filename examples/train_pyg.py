"""Train GAT, GCN or APPNP on a Planetoid dataset with PyG, using seastar layers and/or PyG's own.

    python examples/train_pyg.py --model gat --dataset Cora --backend both

The models and hyperparameters are those of PyG's examples; with --backend both the same initial
weights train with each backend, and the report puts accuracy, epoch time and peak memory side by
side. The only difference between the two models is the import of the layer classes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

sys.path.insert(0, str(Path(__file__).parent))
from common import compare_full_batch, load, parse_args  # noqa: E402

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
    data = load(args, "pyg")
    model = MODELS[args.model]
    compare_full_batch(args, data, lambda layers: model(layers, data.x.shape[1], data.num_classes),
            {"native": pyg_nn, "seastar": seastar_layers}, lambda m: lambda: m(data.x, data.edge_index), "PyG")


if __name__ == "__main__":
    main()
