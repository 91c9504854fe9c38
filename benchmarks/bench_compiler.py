"""The GAT vertex program against a plain-PyTorch reference and DGL's GATConv internals, in one run.

    python benchmarks/bench_compiler.py [--dataset PubMed] [--heads 8] [--width 8]

Reports forward+backward time, bytes kept for backward and peak allocator memory, each as a ratio
to ours. Writes benchmarks/results/compiler_<dataset>.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from common import (DEFAULT_ROOT, load, machine, peak_allocated_bytes, saved_for_backward_bytes, table,  # noqa: E402
                    time_fwd_bwd, write_record)

import seastar_layers as sl  # noqa: E402
from seastar_layers.compat import import_dgl  # noqa: E402


@sl.compile
def gat(v):
    coeff = [torch.exp(F.leaky_relu(nb.el + v.er, 0.2)) for nb in v.innbs]
    s = sum(coeff)
    return sum(c / s * nb.h for c, nb in zip(coeff, v.innbs))


def torch_reference(edge_index, n, el, er, h):
    """What PyG's GATConv does: per-edge logits, scatter softmax, then per-edge messages summed."""
    src, dst = edge_index
    logits = F.leaky_relu(el[src] + er[dst], 0.2)
    row_max = torch.full((n, *logits.shape[1:]), -float("inf")).scatter_reduce(
        0, dst.view(-1, 1, 1).expand_as(logits), logits, "amax", include_self=True)
    weights = torch.exp(logits - row_max[dst])
    total = torch.zeros(n, *weights.shape[1:]).index_add(0, dst, weights)
    alpha = weights / total[dst]
    return torch.zeros(n, *h.shape[1:]).index_add(0, dst, alpha * h[src])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="PubMed", choices=["Cora", "CiteSeer", "PubMed"])
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    data = load(args.dataset, args.root)
    n = data.num_nodes
    loops = torch.arange(n)
    edge_index = torch.cat([data.edge_index, torch.stack([loops, loops])], 1)
    gen = torch.Generator().manual_seed(0)
    H, C = args.heads, args.width
    el, er = (torch.randn(n, H, 1, generator=gen).requires_grad_() for _ in range(2))
    h = torch.randn(n, H, C, generator=gen).requires_grad_()
    grad = torch.randn(n, H, C, generator=gen)

    t = time.perf_counter()
    graph = sl.Graph.from_edge_index(edge_index, n)
    graph_build = time.perf_counter() - t
    t = time.perf_counter()
    gat.specialise({"el": el, "er": er, "h": h})
    first_call = time.perf_counter() - t

    dgl = import_dgl()
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=n)
    g.create_formats_()
    from dgl.ops import edge_softmax

    def dgl_forward():
        with g.local_scope():
            g.srcdata.update({"h": h, "el": el})
            g.dstdata.update({"er": er})
            g.apply_edges(dgl.function.u_add_v("el", "er", "e"))
            g.edata["a"] = edge_softmax(g, F.leaky_relu(g.edata.pop("e"), 0.2))
            g.update_all(dgl.function.u_mul_e("h", "a", "m"), dgl.function.sum("m", "out"))
            return g.dstdata["out"]

    variants = {
        "seastar": lambda: gat(graph, el=el, er=er, h=h),
        "torch": lambda: torch_reference(edge_index, n, el, er, h),
        "dgl": dgl_forward,
    }
    reference = variants["torch"]()
    rows = []
    for name, forward in variants.items():
        out = forward()
        torch.testing.assert_close(out, reference, atol=1e-4, rtol=1e-4)

        def step(forward=forward):
            out = forward()
            out.backward(grad)
            for t in (el, er, h):
                t.grad = None

        seconds = time_fwd_bwd(step, repeat=args.repeat)
        rows.append({"impl": name, "fwd+bwd ms": round(seconds * 1e3, 2),
                     "saved MB": round(saved_for_backward_bytes(forward) / 2**20, 2),
                     "peak MB": round(peak_allocated_bytes(step) / 2**20, 2)})
    ours = rows[0]
    for r in rows:
        r["time / ours"] = round(r["fwd+bwd ms"] / ours["fwd+bwd ms"], 2)
        r["saved / ours"] = round(r["saved MB"] / max(ours["saved MB"], 1e-9), 2)
        r["peak / ours"] = round(r["peak MB"] / max(ours["peak MB"], 1e-9), 2)
    header = (f"GAT program, {args.dataset} graph ({n} vertices, {edge_index.shape[1]} edges incl. self-loops), "
              f"heads={H} width={C}, float32, {torch.get_num_threads()} threads")
    if data.note:
        header += f"\nPubMed: {data.note}"
    print(header)
    print(table(rows, ["impl", "fwd+bwd ms", "time / ours", "saved MB", "saved / ours", "peak MB", "peak / ours"]))
    print(f"Graph build {graph_build * 1e3:.1f} ms; first call (compile or cache hit) {first_call * 1e3:.1f} ms")
    path = write_record(f"compiler_{args.dataset}", {"header": header, "rows": rows, "machine": machine(),
                                                     "graph_build_s": graph_build, "first_call_s": first_call})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
