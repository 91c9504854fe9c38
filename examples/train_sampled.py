"""Mini-batch training with DGL's neighbour sampler on Reddit, seastar vs dgl.nn layers.

    python examples/train_sampled.py --dataset Reddit --model gat --backend both

`--dataset Reddit` is the real graph (232,965 vertices, 114.6M edges) through DGL's RedditDataset,
from ROOT/Reddit or downloaded. Where it cannot be had, `Reddit-generated` is a GENERATED graph with
Reddit's size, feature width, class count and a heavy-tailed degree skew; its labels are random, so
the accuracy printed says nothing about Reddit - the run measures time and memory at scale, and
`--scale` shrinks it (e.g. 0.01 for a quick run). ogbn-products (with ogb installed), Cora, CiteSeer
and PubMed work too. Sampling, blocks and the data loader are DGL's own.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).parent))
from common import Result, compare, load  # noqa: E402
from data import add_data_arguments  # noqa: E402

from seastar_layers.compat import import_dgl  # noqa: E402
from seastar_layers.profiling import peak_allocated_bytes  # noqa: E402

dgl = import_dgl()
import seastar_layers.dgl as seastar_dgl  # noqa: E402


class SampledGAT(torch.nn.Module):
    def __init__(self, layers, in_feats, classes, hidden=16, heads=4):
        super().__init__()
        self.conv1 = layers.GATConv(in_feats, hidden, heads, activation=F.elu, allow_zero_in_degree=True)
        self.conv2 = layers.GATConv(hidden * heads, classes, 1, allow_zero_in_degree=True)

    def forward(self, blocks, x):
        x = self.conv1(blocks[0], x).flatten(1)
        return self.conv2(blocks[1], x).mean(1)


class SampledGCN(torch.nn.Module):
    def __init__(self, layers, in_feats, classes, hidden=64):
        super().__init__()
        self.conv1 = layers.GraphConv(in_feats, hidden, activation=F.relu, allow_zero_in_degree=True)
        self.conv2 = layers.GraphConv(hidden, classes, allow_zero_in_degree=True)

    def forward(self, blocks, x):
        return self.conv2(blocks[1], self.conv1(blocks[0], x))


MODELS = {"gat": SampledGAT, "gcn": SampledGCN}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="gat")
    add_data_arguments(p, default="Reddit")
    p.add_argument("--backend", choices=["seastar", "native", "both"], default="both")
    p.add_argument("--fanouts", type=int, nargs=2, default=[10, 25], help="neighbours sampled per layer")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=30, help="training batches per backend")
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    return p.parse_args()


def train(model, g, data, args, label: str) -> Result:
    sampler = dgl.dataloading.NeighborSampler(args.fanouts)
    train_ids = data.train_mask.nonzero().flatten()
    loader = dgl.dataloading.DataLoader(g, train_ids, sampler, batch_size=args.batch_size, shuffle=True,
                                        drop_last=False, generator=torch.Generator().manual_seed(args.seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    times, last = [], None

    def step(blocks, x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(blocks, x), y)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    model.train()
    batches = iter(loader)
    bar = tqdm(range(args.batches), desc=label, leave=False, dynamic_ncols=True, mininterval=0.3, disable=None)
    for _ in bar:
        try:
            _, out_ids, blocks = next(batches)
        except StopIteration:
            batches = iter(loader)
            _, out_ids, blocks = next(batches)
        x, y = data.x[blocks[0].srcdata[dgl.NID]], data.y[out_ids]
        t = time.perf_counter()
        loss = step(blocks, x, y)
        times.append(time.perf_counter() - t)
        bar.set_postfix(loss=f"{loss:.3f}", edges=blocks[0].num_edges() + blocks[1].num_edges())
        last = (blocks, x, y)
    peak = peak_allocated_bytes(lambda: step(*last)) / 2**20
    accuracy = evaluate(model, g, data, args)
    steady = times[min(3, len(times) - 1):]
    return Result(label, accuracy, accuracy, 1e3 * sum(steady) / len(steady), peak)


@torch.no_grad()
def evaluate(model, g, data, args, batches: int = 5) -> float:
    model.eval()
    sampler = dgl.dataloading.NeighborSampler(args.fanouts)
    test_ids = data.test_mask.nonzero().flatten()
    loader = dgl.dataloading.DataLoader(g, test_ids, sampler, batch_size=args.batch_size, shuffle=True,
                                        generator=torch.Generator().manual_seed(args.seed + 1))
    correct = total = 0
    for k, (_, out_ids, blocks) in enumerate(loader):
        if k == batches:
            break
        pred = model(blocks, data.x[blocks[0].srcdata[dgl.NID]]).argmax(-1)
        correct += int((pred == data.y[out_ids]).sum())
        total += out_ids.numel()
    return correct / max(total, 1)


def main():
    args = parse_args()
    data = load(args, "dgl")
    g = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
    g.create_formats_()
    compare(args, lambda layers: MODELS[args.model](layers, data.x.shape[1], data.num_classes),
            {"native": dgl.nn, "seastar": seastar_dgl}, lambda model, backend: train(model, g, data, args, backend),
            f"DGL {args.model.upper()} with neighbour sampling (fanouts {args.fanouts}, batch {args.batch_size}, "
            f"{args.batches} batches) on {data.name}{' (GENERATED data)' if data.note else ''}; 'epoch ms' is per "
            "training step, accuracy on sampled test batches")


if __name__ == "__main__":
    main()
