"""GAT, GCN and APPNP layers: seastar (PyG and DGL drop-ins) against PyG's and DGL's own, in one run.

    python benchmarks/bench_layers.py [--datasets Cora PubMed] [--repeat 10]

Each row times forward+backward of one layer on the whole graph (self-loops added as the layers
do) and measures the peak allocator memory of that step; ratios are to seastar's PyG drop-in.
PubMed uses its real graph with generated features. Writes benchmarks/results/layers.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import (DEFAULT_ROOT, layer_constructors, load, machine, peak_allocated_bytes, table,  # noqa: E402
                    time_fwd_bwd, write_record)

from seastar_layers.compat import import_dgl  # noqa: E402

dgl = import_dgl()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=["Cora", "PubMed"])
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--width", type=int, default=64, help="input feature width (features are projected to it)")
    args = parser.parse_args()
    rows, notes = [], []
    for name in args.datasets:
        data = load(name, args.root)
        if data.note:
            notes.append(f"{name}: {data.note}")
        n = data.num_nodes
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(n, args.width, generator=gen).requires_grad_()
        ei = data.edge_index
        g = dgl.add_self_loop(dgl.remove_self_loop(dgl.graph((ei[0], ei[1]), num_nodes=n)))
        for layer, impls in layer_constructors(args.width, dgl).items():
            built = {impl: make() for impl, make in impls.items()}
            for impl in ("pyg", "seastar-dgl", "dgl"):
                source = built["seastar-pyg"] if impl == "pyg" else built["dgl"]
                if impl != "dgl":
                    built[impl].load_state_dict(source.state_dict())
            calls = {
                "seastar-pyg": lambda m=built["seastar-pyg"]: m(x, ei),
                "pyg": lambda m=built["pyg"]: m(x, ei),
                "seastar-dgl": lambda m=built["seastar-dgl"]: m(g, x),
                "dgl": lambda m=built["dgl"]: m(g, x),
            }
            reference = calls["pyg"]().detach()
            torch.testing.assert_close(calls["seastar-pyg"]().detach(), reference, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(calls["seastar-dgl"]().detach(), calls["dgl"]().detach(), atol=1e-4, rtol=1e-4)
            results = {}
            for impl, forward in calls.items():
                grad = torch.randn(forward().shape, generator=gen)

                def step(forward=forward, grad=grad):
                    forward().backward(grad)
                    x.grad = None

                results[impl] = (time_fwd_bwd(step, repeat=args.repeat) * 1e3, peak_allocated_bytes(step) / 2**20)
            for impl, (ms, mb) in results.items():
                ours_ms, ours_mb = results["seastar-pyg" if impl in ("seastar-pyg", "pyg") else "seastar-dgl"]
                rows.append({"dataset": name, "layer": layer, "impl": impl, "fwd+bwd ms": round(ms, 2),
                             "time / seastar": round(ms / ours_ms, 2), "peak MB": round(mb, 1),
                             "peak / seastar": round(mb / max(ours_mb, 1e-9), 2)})
    header = (f"forward+backward per layer, float32, {torch.get_num_threads()} threads, input width {args.width}; "
              "ratios are to the seastar drop-in for the same library")
    print(header)
    for note in notes:
        print(note)
    print(table(rows, ["dataset", "layer", "impl", "fwd+bwd ms", "time / seastar", "peak MB", "peak / seastar"]))
    path = write_record("layers", {"header": header, "notes": notes, "rows": rows, "machine": machine()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
