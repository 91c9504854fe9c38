"""Shared benchmark plumbing: the layers compared, timing, memory kept for backward, peak memory
(CPU allocator or CUDA allocator), JSON records."""
from __future__ import annotations

import functools
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from seastar_layers.profiling import peak_allocated_bytes, saved_for_backward_bytes

# The examples' dataset loaders (local files first, else the loader's download); after this folder
# on the path, so that `common` stays this module.
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "examples"))
from data import DEFAULT_ROOT, DataUnavailable, load_dataset  # noqa: E402

__all__ = ["DEFAULT_ROOT", "RESULTS", "cuda_peak_bytes", "layer_constructors", "load", "machine", "peak_allocated_bytes",
           "saved_for_backward_bytes", "table", "time_fwd_bwd", "time_fwd_bwd_cuda", "write_record"]

RESULTS = Path(__file__).parent / "results"


def load(name: str, root: str):
    """A dataset by name (see examples/data.py); exits with the loader's explanation when it cannot be had."""
    try:
        return load_dataset(name, root)
    except DataUnavailable as e:
        sys.exit(f"error: {e}")


def time_fwd_bwd(step, warmup: int = 3, repeat: int = 15) -> float:
    """Median seconds of step() (which runs forward and backward)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def time_fwd_bwd_cuda(step, warmup: int = 3, repeat: int = 15) -> float:
    """Median seconds of step() on the current GPU, timed with CUDA events around each call (the
    host does not wait for the GPU between calls' launches, only at the end of each)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def cuda_peak_bytes(step, baseline: int) -> tuple[int, int]:
    """(peak bytes of torch's CUDA allocator during step() beyond `baseline`, the allocator's
    torch.cuda.max_memory_allocated() itself). Take the baseline before a layer's first call, so
    that what it keeps between calls (a cached graph) counts and its inputs do not."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return peak - baseline, peak


def layer_constructors(width: int, dgl=None) -> dict:
    """layer -> implementation -> constructor, for the layers the benchmarks compare: GAT with 8
    heads x 8 channels, GCN with 64 channels, APPNP with K=10, alpha=0.1. DGL's and our DGL
    drop-ins only when `dgl` (the module) is given."""
    import torch_geometric.nn as pyg_nn

    import seastar_layers as sl

    pyg = {"GAT": ("GATConv", (width, 8), {"heads": 8}), "GCN": ("GCNConv", (width, 64), {}),
           "APPNP": ("APPNP", (), {"K": 10, "alpha": 0.1})}
    layers = {name: {"seastar-pyg": functools.partial(getattr(sl, cls), *args, **kwargs),
                     "pyg": functools.partial(getattr(pyg_nn, cls), *args, **kwargs)}
              for name, (cls, args, kwargs) in pyg.items()}
    if dgl is not None:
        import seastar_layers.dgl as sd

        for name, (cls, args) in {"GAT": ("GATConv", (width, 8, 8)), "GCN": ("GraphConv", (width, 64)),
                                  "APPNP": ("APPNPConv", (10, 0.1))}.items():
            layers[name]["seastar-dgl"] = functools.partial(getattr(sd, cls), *args)
            layers[name]["dgl"] = functools.partial(getattr(dgl.nn, cls), *args)
    return layers


def machine() -> dict:
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor() or
            platform.machine(), "python": platform.python_version()}


def write_record(name: str, record: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2))
    return path


def table(rows: list[dict], columns: list[str]) -> str:
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(lines)
