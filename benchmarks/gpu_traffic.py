"""Memory traffic of the layers' CUDA kernels, counted by the CUDA emulator, and a roofline from it.

Runs the layers' programs in the CUDA dialect under the emulator (SEASTAR_EMULATE_CUDA=1) with
SEASTAR_EMU_TRAFFIC set, which counts the 32-byte sectors every warp instruction's global accesses
touch (docs/cuda-emulation.md). Each program runs forward and backward on two random graphs of the
same vertices and different degrees, which separates a kernel's requests per edge from its requests
per row; the roofline then applies them to the Reddit-scale/8 GENERATED graph (examples/data.py).
Needs neither a GPU nor nvcc.

    python benchmarks/gpu_traffic.py                  # GAT 8 x 8 (a training call), GCN and APPNP at 64
    python benchmarks/gpu_traffic.py --two-sweeps     # GAT with its row max in a sweep of its own
    python benchmarks/gpu_traffic.py --one-warp-hubs  # as if every row ran on one group (no split hubs)

Model (printed with the table): requested sectors are what the warps ask of L1/L2, one per warp
instruction and sector (a row's own values, which a kernel re-reads per edge, count every time: L1
hits on a GPU); every request is taken to come from DRAM (no reuse: an upper bound on DRAM traffic)
at H100 SXM's 3.35 TB/s, so the "bandwidth" column is the time the sweep needs at least when
nothing is reused. A kernel's warps are taken to progress at one rate with W = 132 SMs x 32
resident warps (50% occupancy: benchmarks/gpu_registers.py); the busiest warp then bounds the
kernel at (its requests) / (all requests / W) times the bandwidth time: the "hub" column. The
busiest warp sweeps the largest of: an eighth (a 256-thread block's groups of 32 lanes) of the
largest degree, as the kernels split the HUB_ROWS heaviest rows of SPLIT_DEGREE edges or more
among a block's groups (codegen/cuda.py), and the heaviest row after those, which one warp takes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["SEASTAR_EMULATE_CUDA"] = "1"

from seastar_layers.codegen.cuda import HUB_ROWS, SPLIT_DEGREE, THREADS, CudaDialect, group_width  # noqa: E402
from seastar_layers.nn import programs  # noqa: E402

HBM_BYTES_PER_S = 3.35e12  # H100 SXM
RESIDENT_WARPS = 132 * 32
SECTOR = 32


def random_graph(n: int, degree: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (n * degree,), generator=gen), torch.randint(0, n, (n * degree,),
                                                                                         generator=gen)])


def runs(heads: int, channels: int, width: int):
    """(name, call(edge_index, n) running forward and backward) per measured program."""
    slope = torch.tensor(0.2)

    def gat(ei, n):
        feats = {"a_src": torch.randn(n, heads, 1), "a_dst": torch.randn(n, heads, 1),
                 "x": torch.randn(n, heads, channels)}
        leaves = {k: v.requires_grad_() for k, v in feats.items()}
        programs.gat_attention(True, False, False, slope, for_backward=True)(ei, **leaves).sum().backward()

    def gcn(ei, n):
        x = torch.randn(n, width, requires_grad=True)
        programs.weighted_sum(True)(ei, x=x, w=torch.rand(ei.shape[1])).sum().backward()

    def appnp(ei, n):
        x, h = torch.randn(n, width, requires_grad=True), torch.randn(n, width)
        step = programs.appnp_step(True, torch.tensor(0.1), torch.tensor(0.9))
        step(ei, x=x, h=h, w=torch.rand(ei.shape[1])).sum().backward()

    return [(f"GAT {heads}x{channels}", heads * channels, gat), (f"GCN {width}", width, gcn),
            (f"APPNP {width}", width, appnp)]


def busiest_warp_edges(degrees: torch.Tensor, widest: int, split: bool) -> float:
    """Edges the busiest warp sweeps: a split hub's share of a block's groups, or a row one warp takes."""
    degrees = degrees.sort(descending=True).values.double()
    if not split:
        return degrees[0].item()
    hubs = degrees[:HUB_ROWS][degrees[:HUB_ROWS] >= SPLIT_DEGREE]
    shared = hubs[0].item() / (THREADS // group_width(widest)) if len(hubs) else 0.0
    return max(shared, degrees[len(hubs)].item() if len(hubs) < len(degrees) else 0.0)


def count(call, ei: torch.Tensor, n: int) -> dict[str, dict]:
    """The traffic of each kernel one call launches, by kernel."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "traffic.jsonl"
        os.environ["SEASTAR_EMU_TRAFFIC"] = str(path)
        try:
            call(ei, n)
        finally:
            del os.environ["SEASTAR_EMU_TRAFFIC"]
        launches = [json.loads(line) for line in path.read_text().splitlines()]
    out = {}
    for launch in launches:
        name = re.search(r"(forward|backward)_kernel\d+(_fast\d+)?", launch["kernel"]).group(0)
        out[name] = launch
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vertices", type=int, default=2000)
    parser.add_argument("--degrees", type=int, nargs=2, default=(4, 12), help="mean degrees of the two graphs")
    parser.add_argument("--two-sweeps", action="store_true", help="GAT's row max in a sweep of its own")
    parser.add_argument("--one-warp-hubs", action="store_true", help="model every row on one group (no split hubs)")
    parser.add_argument("--out", help="write the table's rows as JSON here")
    args = parser.parse_args()
    if args.two_sweeps:
        CudaDialect.online_softmax = False
    from examples.data import generated_graph

    reddit = generated_graph("Reddit", scale=1 / 8)
    edges, vertices = reddit.edge_index.shape[1], reddit.num_nodes
    degrees = [torch.bincount(reddit.edge_index[k], minlength=vertices) for k in (1, 0)]
    d_max = int(max(d.max() for d in degrees))
    n, (low, high) = args.vertices, args.degrees
    print(f"gpu_traffic: per-edge and per-row sectors from the emulator ({n} vertices, mean degrees {low} and "
          f"{high}); roofline on {reddit.note.split(':')[0]}: {vertices} vertices, {edges} edges, largest degree "
          f"{d_max}; GAT's row max {'in a sweep of its own' if args.two_sweeps else 'online'}; hub rows "
          f"{'on one warp' if args.one_warp_hubs else 'split among a block'}")
    rows = []
    for name, widest, call in runs(8, 8, 64):
        busiest = max(busiest_warp_edges(d, widest, not args.one_warp_hubs) for d in degrees)
        sparse, dense = count(call, random_graph(n, low, 1), n), count(call, random_graph(n, high, 2), n)
        for kernel in dense:
            a = (dense[kernel]["requested_sectors"] - sparse[kernel]["requested_sectors"]) / (n * (high - low))
            b = (sparse[kernel]["requested_sectors"] - a * n * low) / n
            total = a * edges + b * vertices
            seconds = total * SECTOR / HBM_BYTES_PER_S
            hub = (a * busiest + b) / (total / RESIDENT_WARPS)
            rows.append({"program": name, "kernel": kernel, "sectors_per_edge": a, "sectors_per_row": b,
                         "distinct_share": dense[kernel]["distinct_sectors"] / dense[kernel]["requested_sectors"],
                         "bandwidth_ms": seconds * 1e3, "hub_ms": seconds * max(hub, 1.0) * 1e3})
    header = (f"{'program':<10} {'kernel':<24} {'sectors/edge':>12} {'sectors/row':>11} {'distinct':>8} "
              f"{'bandwidth ms':>12} {'hub ms':>8}")
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(f"{r['program']:<10} {r['kernel']:<24} {r['sectors_per_edge']:>12.2f} {r['sectors_per_row']:>11.1f} "
              f"{r['distinct_share']:>8.0%} {r['bandwidth_ms']:>12.2f} {r['hub_ms']:>8.2f}")
    print("distinct: the launch's distinct sectors over its requests, on the denser emulated graph (the rest "
          "were requested again: L1/L2 hits where the caches hold them)")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
