"""Data-parallel mini-batch training with DistributedDataParallel, launched by torchrun.

    torchrun --nproc-per-node 2 examples/train_distributed.py --library dgl --dataset Reddit-generated --scale 0.01

Each process (rank) holds a replica of the model and trains it on its own share of the training
vertices, sampled by the library's own loader: DGL's `DataLoader(use_ddp=True)` with its
`NeighborSampler`, or PyG's `NeighborLoader` over this rank's slice of the training vertices (it
needs pyg-lib or torch-sparse). DDP averages the gradients across ranks, so the replicas stay
identical; the script checks that at the end. The process group is gloo on CPU and NCCL on GPU;
`--layers` picks seastar's layers or the library's stock ones, and nothing else changes.

Several machines: the same command on each, with `--nnodes N --rdzv-backend c10d --rdzv-endpoint
HOST:PORT --rdzv-id RUN` (see docs/integration.md).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).parent))
from common import load  # noqa: E402
from data import add_data_arguments  # noqa: E402

PYG_SAMPLER_MISSING = (
    "PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is installed. pyg-lib comes from PyG's wheel "
    "index: pip install pyg-lib -f https://data.pyg.org/whl/torch-{torch}.html (pick the index of your torch and "
    "CUDA). torch-sparse is on PyPI as source only: pip install --no-build-isolation torch-scatter torch-sparse "
    "compiles both against the installed torch (tens of minutes on 2 cores). Or use --library dgl.")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", choices=["dgl", "pyg"], default="dgl", help="whose sampler, data loader and layers")
    p.add_argument("--layers", choices=["seastar", "native"], default="seastar",
                   help="seastar's drop-in layers or the library's own")
    p.add_argument("--model", choices=["gat", "gcn"], default="gcn")
    add_data_arguments(p, default="Reddit")
    p.add_argument("--fanouts", type=int, nargs=2, default=[10, 25], help="neighbours sampled per layer")
    p.add_argument("--batch-size", type=int, default=1024, help="seed vertices per rank and step")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (on every rank)")
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="threads per process (default: cores / processes)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU (gloo) even where CUDA is available")
    p.add_argument("--save-dir", default=None, help="each rank writes rank<R>.pt: its final parameters and losses")
    return p.parse_args()


def main():
    args = parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank, local_world = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    say = print if rank == 0 else (lambda *a, **k: None)
    if args.library == "pyg" and not pyg_sampler_available():
        say(f"error: {PYG_SAMPLER_MISSING.format(torch=torch.__version__.split('+')[0])}", file=sys.stderr)
        sys.exit(2)
    if "RANK" not in os.environ:
        say("note: not launched by torchrun; training as a single process (torchrun --nproc-per-node N ... for more)")

    use_cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local_world))
    backend = "nccl" if use_cuda else "gloo"
    with tempfile.TemporaryDirectory(prefix="seastar-ddp-") as scratch:
        if "MASTER_ADDR" in os.environ:  # torchrun's rendezvous
            dist.init_process_group(backend)
        else:  # a group of one, through a file: no port to collide with
            dist.init_process_group(backend, store=dist.FileStore(f"{scratch}/store", 1), rank=0, world_size=1)
        try:
            train(args, rank, local_rank, world, device, say)
        finally:
            dist.destroy_process_group()


def pyg_sampler_available() -> bool:
    import torch_geometric.typing as pyg_typing

    return pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE


def train(args, rank: int, local_rank: int, world: int, device: torch.device, say) -> None:
    data = load_first_on_local_rank_zero(args, local_rank, say)
    say(f"{world} ranks, {args.library} sampling, {args.layers} layers, {device}")

    make_batches, model = (dgl_setup if args.library == "dgl" else pyg_setup)(args, data, rank, world)
    torch.manual_seed(args.seed)  # DDP also broadcasts rank 0's parameters at construction
    model = DistributedDataParallel(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    losses, step, times = [], 0, []
    model.train()
    for epoch in range(args.epochs):
        for inputs, y in make_batches(data.train_mask, epoch):
            t = time.perf_counter()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(*to_device(inputs, device)), y.to(device))
            loss.backward()  # DDP averages the gradients of all ranks here
            optimizer.step()
            times.append(time.perf_counter() - t)
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            losses.append(float(mean_loss) / world)
            step += 1
            if step == 1 or step % 10 == 0:
                say(f"step {step:>4}  loss {losses[-1]:.4f} (mean over ranks)  {1e3 * times[-1]:.0f} ms")
            if step == args.max_steps:
                break
        if step == args.max_steps:
            break

    accuracy = evaluate(model, make_batches, data, device)
    spread = parameter_spread(model)
    say(f"trained {step} steps on {world} ranks: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"{1e3 * sum(times[1:]) / max(len(times) - 1, 1):.0f} ms per step, test accuracy {accuracy:.4f} "
        f"(sampled){' on GENERATED data' if data.note else ''}")
    say(f"parameters identical on all ranks: {'yes' if spread == 0 else 'NO'} (largest difference {spread:g})")
    if args.save_dir:
        Path(args.save_dir).mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": model.module.state_dict(), "losses": losses, "accuracy": accuracy},
                   Path(args.save_dir) / f"rank{rank}.pt")


def load_first_on_local_rank_zero(args, local_rank: int, say):
    """The dataset, read by one process per machine before the others: PyG's and DGL's loaders write their
    processed files on first use, and a process that reads such a file while another is still writing it reads
    a torn one. Once local rank 0 has written them, the other ranks only read."""
    data = load(args, args.library, say) if local_rank == 0 else None
    dist.barrier()
    return data if data is not None else load(args, args.library, say)


def to_device(inputs: tuple, device: torch.device) -> tuple:
    """Tensors and DGL blocks (in lists) to the device; other inputs (a PyG batch size) as they are."""
    def move(x):
        if isinstance(x, list):
            return [move(item) for item in x]
        return x.to(device) if hasattr(x, "to") else x

    return inputs if device.type == "cpu" else tuple(move(x) for x in inputs)


@torch.no_grad()
def evaluate(model, make_batches, data, device, batches: int = 5) -> float:
    """Accuracy on a few sampled batches of test vertices on every rank, summed over the ranks."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64)
    for k, (inputs, y) in enumerate(make_batches(data.test_mask, 0)):
        if k == batches:
            break
        pred = model.module(*to_device(inputs, device)).argmax(-1).cpu()
        counts += torch.tensor([float((pred == y).sum()), float(y.numel())], dtype=torch.float64)
    dist.all_reduce(counts)
    return float(counts[0] / counts[1].clamp(min=1))


def parameter_spread(model) -> float:
    """The largest difference between any rank's parameters and rank 0's."""
    mine = torch.cat([p.detach().flatten().cpu().double() for p in model.module.parameters()])
    reference = mine.clone()
    dist.broadcast(reference, src=0)
    spread = (mine - reference).abs().max()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return float(spread)


def dgl_setup(args, data, rank: int, world: int):
    """DGL: the DataLoader gives each rank an equal share of the vertices itself (use_ddp=True)."""
    from train_sampled import MODELS

    from seastar_layers.compat import import_dgl

    dgl = import_dgl()
    import seastar_layers.dgl as seastar_dgl

    g = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
    g.create_formats_()
    sampler = dgl.dataloading.NeighborSampler(args.fanouts)

    def make_batches(mask, epoch):
        loader = dgl.dataloading.DataLoader(g, mask.nonzero().flatten(), sampler, batch_size=args.batch_size,
                                            shuffle=True, drop_last=False, use_ddp=True, ddp_seed=args.seed)
        for _, out_ids, blocks in loader:
            yield (blocks, data.x[blocks[0].srcdata[dgl.NID]]), data.y[out_ids]

    layers = seastar_dgl if args.layers == "seastar" else dgl.nn
    return make_batches, MODELS[args.model](layers, data.x.shape[1], data.num_classes)


def pyg_setup(args, data, rank: int, world: int):
    """PyG: each rank's NeighborLoader gets an equal slice of the shuffled seed vertices."""
    import torch_geometric
    from torch_geometric.loader import NeighborLoader
    from train_pyg import MODELS

    import seastar_layers

    graph = torch_geometric.data.Data(x=data.x, y=data.y, edge_index=data.edge_index, num_nodes=data.num_nodes)

    def make_batches(mask, epoch):
        seeds = mask.nonzero().flatten()
        seeds = seeds[torch.randperm(len(seeds), generator=torch.Generator().manual_seed(args.seed + epoch))]
        share = len(seeds) // world  # equal shares: every rank must take the same number of steps
        loader = NeighborLoader(graph, num_neighbors=args.fanouts, input_nodes=seeds[rank * share:(rank + 1) * share],
                                batch_size=args.batch_size, shuffle=False)
        for batch in loader:
            yield (batch.x, batch.edge_index, batch.batch_size), batch.y[:batch.batch_size]

    layers = seastar_layers if args.layers == "seastar" else torch_geometric.nn
    model = MODELS[args.model](layers, data.x.shape[1], data.num_classes)
    return make_batches, SeedRows(model)


class SeedRows(torch.nn.Module):
    """A PyG model on a sampled subgraph, returning the rows of its seed vertices (listed first)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, edge_index, batch_size: int):
        return self.model(x, edge_index)[:batch_size]


if __name__ == "__main__":
    main()
