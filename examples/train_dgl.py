"""Train GAT, GCN or APPNP on a Planetoid dataset with DGL, using seastar layers and/or dgl.nn's own.

    python examples/train_dgl.py --model gat --dataset Cora --backend both

The DGLGraph is built from the same Planetoid data (with self-loops, as DGL's examples do). The
models and hyperparameters follow DGL's examples; only the layer classes differ between backends.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from common import compare_full_batch, load, parse_args  # noqa: E402

from seastar_layers.compat import import_dgl  # noqa: E402

dgl = import_dgl()
import seastar_layers.dgl as seastar_dgl  # noqa: E402


class GAT(torch.nn.Module):
    def __init__(self, layers, in_feats, classes, hidden=8, heads=8):
        super().__init__()
        self.conv1 = layers.GATConv(in_feats, hidden, heads, feat_drop=0.6, attn_drop=0.6, activation=F.elu)
        self.conv2 = layers.GATConv(hidden * heads, classes, 1, feat_drop=0.6, attn_drop=0.6)

    def forward(self, g, x):
        x = self.conv1(g, x).flatten(1)
        return self.conv2(g, x).mean(1)


class GCN(torch.nn.Module):
    def __init__(self, layers, in_feats, classes, hidden=16):
        super().__init__()
        self.conv1 = layers.GraphConv(in_feats, hidden, activation=F.relu)
        self.conv2 = layers.GraphConv(hidden, classes)

    def forward(self, g, x):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(g, x)
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(g, x)


class APPNPNet(torch.nn.Module):
    def __init__(self, layers, in_feats, classes, hidden=64):
        super().__init__()
        self.lin1 = torch.nn.Linear(in_feats, hidden)
        self.lin2 = torch.nn.Linear(hidden, classes)
        self.prop = layers.APPNPConv(k=10, alpha=0.1)

    def forward(self, g, x):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.lin1(x))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.prop(g, self.lin2(x))


MODELS = {"gat": GAT, "gcn": GCN, "appnp": APPNPNet}


def main():
    args = parse_args(__doc__)
    data = load(args, "dgl")
    g = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
    g = dgl.add_self_loop(dgl.remove_self_loop(g))
    model = MODELS[args.model]
    compare_full_batch(args, data, lambda layers: model(layers, data.x.shape[1], data.num_classes),
            {"native": dgl.nn, "seastar": seastar_dgl}, lambda m: lambda: m(g, data.x), "DGL")


if __name__ == "__main__":
    main()
