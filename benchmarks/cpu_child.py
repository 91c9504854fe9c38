"""What one child process of bench_cpu.py does: set up one (workload, graph, layer, library) and
measure it, alone in its process; or one of the TASKS that prepare measurements (generate a graph
into the on-disk cache, draw the sampled mini-batches).

bench_cpu.py forks every child from a server process that has imported this module (so torch,
PyG, DGL and seastar_layers are imported once, and nothing has run yet: no OpenMP pool, no
tensors). A child loads its graph and builds its model (the setup), then measures; its peak
memory is the resident memory its steps add over what it held just before each step
(/proc/self/status VmHWM, reset through /proc/self/clear_refs), so it is that library's alone.
The child sends one JSON-able dict back through a pipe; the parent records what happened if it
sends nothing.
"""
from __future__ import annotations

import ctypes
import gc
import re
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402,F401  (puts examples/ on the path)
from data import generated_graph, load_dataset  # noqa: E402

import seastar_layers as sl  # noqa: E402
from seastar_layers.compat import import_dgl  # noqa: E402

dgl = import_dgl()
import seastar_layers.dgl as sd  # noqa: E402

# Which module provides each library's layers, and how its layers are called (PyG's or DGL's way).
MODULES = {"pyg": pyg_nn, "seastar-pyg": sl, "dgl": dgl.nn, "seastar-dgl": sd}
FLAVOUR = {"pyg": "pyg", "seastar-pyg": "pyg", "dgl": "dgl", "seastar-dgl": "dgl"}

HEADS = 8  # GAT: 8 heads x 8 channels
HIDDEN = 64  # every layer outputs 64 values per vertex, as in the table
APPNP_WIDTH = 64  # APPNP propagates 64 features
FANOUTS = (10, 25)  # the neighbour sampler's fanouts, first layer first (as examples/train_sampled.py)
BATCH_SIZE = 1024  # training vertices a sampled mini-batch
CHECK_ROWS = 32  # output rows sent back for the cross-check against the library the drop-in replaces


# --- memory of this process -------------------------------------------------------------------------

def _status_kb(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1))


def resident_mb() -> float:
    return _status_kb("VmRSS") / 1024


def reset_peak_resident() -> None:
    """Restart VmHWM (the peak resident size) from the current resident size (Linux 4.0+)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as e:
        raise RuntimeError(f"cannot reset the peak resident size through /proc/self/clear_refs ({e}); the benchmark "
                           "measures peak memory that way and needs Linux 4.0 or newer with /proc mounted") from e


def peak_resident_mb() -> float:
    return _status_kb("VmHWM") / 1024


def release_free_memory() -> None:
    """Collect garbage and hand the allocator's free pages back, so the resident size counts live data only."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


# --- the graphs ---------------------------------------------------------------------------------------

def load_graph(graph: dict) -> dict:
    """{'x', 'y', 'train_mask', 'edge_index', 'num_classes', 'note'} of a graph (bench_cpu.Bench.graph_spec)."""
    if graph["kind"] == "planetoid":
        data = load_dataset(graph["dataset"], graph["root"])
        return {"x": data.x, "y": data.y, "train_mask": data.train_mask, "edge_index": data.edge_index,
                "num_classes": data.num_classes, "note": data.note}
    return torch.load(graph["path"], weights_only=True)


def generate(spec: dict) -> dict:
    """Generate a Reddit-scale graph and save it where its spec says; its size and how long it took."""
    graph = spec["graph"]
    start = time.perf_counter()
    data = generated_graph("Reddit", scale=graph["scale"], seed=graph["seed"])
    seconds = time.perf_counter() - start
    path = Path(graph["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save({"x": data.x, "y": data.y, "train_mask": data.train_mask, "edge_index": data.edge_index,
                "num_classes": data.num_classes, "note": data.note}, partial)
    partial.rename(path)  # a run killed while saving leaves no truncated cache behind
    return {"status": "ok", "vertices": data.num_nodes, "edges": int(data.edge_index.shape[1]),
            "features": int(data.x.shape[1]), "note": data.note, "generated_s": seconds}


def dgl_graph(edge_index: torch.Tensor, n: int):
    """The whole graph as DGL's layers want it: self-loops added (GATConv and GraphConv refuse
    vertices without in-edges; PyG's layers add them themselves), and its sparse formats built,
    as DGL's own examples build them once for a graph they train on many times."""
    g = dgl.add_self_loop(dgl.remove_self_loop(dgl.graph((edge_index[0], edge_index[1]), num_nodes=n)))
    g.create_formats_()
    return g


def ring_graph(n: int = 10) -> torch.Tensor:
    """n vertices, each joined both ways to the next: the small graph of the per-call overhead."""
    v = torch.arange(n)
    return torch.stack([torch.cat([v, (v + 1) % n]), torch.cat([(v + 1) % n, v])])


# --- the layers and models ---------------------------------------------------------------------------

def make_layer(layer: str, library: str, in_width: int, out_width: int = HIDDEN, heads: int = HEADS,
               zero_in_degree_ok: bool = False):
    """One of the compared layers in `library`; the same seed gives a drop-in its library's weights.
    `zero_in_degree_ok` lets DGL's layers take vertices without in-edges (sampled blocks have some)."""
    module, pyg = MODULES[library], FLAVOUR[library] == "pyg"
    if layer == "GAT":
        if pyg:
            return module.GATConv(in_width, out_width // heads, heads=heads)
        return module.GATConv(in_width, out_width // heads, heads, allow_zero_in_degree=zero_in_degree_ok)
    if layer == "GCN":
        if pyg:
            return module.GCNConv(in_width, out_width)
        return module.GraphConv(in_width, out_width, allow_zero_in_degree=zero_in_degree_ok)
    if layer == "APPNP":
        return module.APPNP(K=10, alpha=0.1) if pyg else module.APPNPConv(10, 0.1)
    if layer == "SAGE":
        return module.SAGEConv(in_width, out_width) if pyg else module.SAGEConv(in_width, out_width, "mean")
    if layer == "GIN":
        return module.GINConv(torch.nn.Linear(in_width, out_width)) if pyg else \
            module.GINConv(torch.nn.Linear(in_width, out_width), "sum")
    raise ValueError(f"unknown layer {layer!r}; expected GAT, GCN, APPNP, SAGE or GIN")


class TwoLayers(torch.nn.Module):
    """Two layers of GAT (8 heads x 8 channels, then one head per class) or GCN (64 channels, then
    the classes), called the way `library` calls its layers: PyG's on an edge_index (a sampled
    block as a bipartite graph, GCN on its source vertices), DGL's on a DGLGraph or block."""

    def __init__(self, layer: str, library: str, in_width: int, classes: int):
        super().__init__()
        self.layer, self.pyg = layer, FLAVOUR[library] == "pyg"
        self.conv1 = make_layer(layer, library, in_width, zero_in_degree_ok=True)
        self.conv2 = make_layer(layer, library, HIDDEN, classes, heads=1, zero_in_degree_ok=True)

    def forward(self, graphs, x):
        hidden = self._call(self.conv1, graphs[0], x).flatten(1)
        hidden = F.elu(hidden) if self.layer == "GAT" else F.relu(hidden)
        out = self._call(self.conv2, graphs[1], hidden)
        return out.mean(1) if self.layer == "GAT" and not self.pyg else out  # DGL's GAT: (N, 1 head, classes)

    def _call(self, conv, graph, x):
        if not self.pyg:
            return conv(graph, x)
        edge_index, size = graph
        if size is None:  # the whole graph
            return conv(x, edge_index)
        if self.layer == "GAT":  # a block: its destinations are the first of its sources, as in DGL
            return conv((x, x[: size[1]]), edge_index, size=size)
        return conv(x, edge_index)[: size[1]]  # GCNConv is not bipartite: PyG runs it over the block's sources


# --- measuring ---------------------------------------------------------------------------------------

@dataclass
class Measured:
    """What a workload's setup hands to the measurement: the step, what makes each step's inputs
    (untimed), what of the first step's result goes back for the cross-check, and more figures."""
    step: Callable
    prepare: Callable = tuple
    check: Callable = lambda first: [first]
    memory: bool = True
    extra: Callable = dict


MAX_STEPS = 100  # measure: the most steps a measurement takes to fill its min_s


def measure(step, prepare=tuple, repeat: int = 5, budget_s: float = 60.0, memory: bool = True,
            min_s: float = 0.0) -> dict:
    """One first step (timed on its own: it builds each library's caches), then timed steps until
    `repeat` of them or until they have taken `budget_s` (at least one), and on past `repeat` while
    they have taken under `min_s` (at most MAX_STEPS): a median of three 20 ms steps on a shared
    machine swung Cora's comparisons by 10%. prepare() makes a step's inputs, untimed. The peak is
    the most resident memory any step added over what the process held just before it (so the
    first step's caches count), in MB; the steady peak leaves the first step out (what a step
    needs once the caches exist)."""

    def one():
        args = prepare()
        if memory:
            before = resident_mb()
            reset_peak_resident()
        start = time.perf_counter()
        result = step(*args)
        seconds = time.perf_counter() - start
        return seconds, result, peak_resident_mb() - before if memory else 0.0

    first_s, first, first_peak = one()
    times, peaks = [], []
    while ((len(times) < repeat and (not times or sum(times) < budget_s))
           or (sum(times) < min_s and len(times) < MAX_STEPS)):
        seconds, _, peak = one()
        times.append(seconds)
        peaks.append(peak)
    out = {"first_call_s": first_s, "step_s": statistics.median(times), "steps": len(times), "first": first}
    if memory:
        out.update(peak_mb=max(first_peak, *peaks), steady_peak_mb=max(peaks))
    return out


def sample_rows(out: torch.Tensor) -> list:
    rows = torch.randperm(out.shape[0], generator=torch.Generator().manual_seed(1))[:CHECK_ROWS]
    return out.reshape(out.shape[0], -1)[rows].tolist()


def layer_workload(spec: dict, data: dict) -> Measured:
    """Forward and backward of one layer over the whole graph; the input needs gradients (as a
    layer inside a network), the output's gradient is fixed random."""
    n, pyg = data["x"].shape[0], FLAVOUR[spec["library"]] == "pyg"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, APPNP_WIDTH, generator=gen) if spec["layer"] == "APPNP" else data["x"]
    x = x.requires_grad_()
    grad = torch.randn(n, HIDDEN, generator=gen)
    torch.manual_seed(0)
    layer = make_layer(spec["layer"], spec["library"], x.shape[1])
    graph = data["edge_index"] if pyg else dgl_graph(data["edge_index"], n)

    def step():
        out = layer(x, graph) if pyg else layer(graph, x)
        out.backward(grad.view(out.shape))
        x.grad = None
        layer.zero_grad(set_to_none=True)
        return out.detach()

    return Measured(step, check=sample_rows)


def training_step(model, optimizer, graphs, x, y, rows=slice(None)):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(graphs, x)[rows], y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def train_workload(spec: dict, data: dict) -> Measured:
    """A full-batch training step of a 2-layer GAT: forward, loss on the training vertices, backward, Adam."""
    n, pyg = data["x"].shape[0], FLAVOUR[spec["library"]] == "pyg"
    torch.manual_seed(0)
    model = TwoLayers("GAT", spec["library"], data["x"].shape[1], data["num_classes"])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    graph = (data["edge_index"], None) if pyg else dgl_graph(data["edge_index"], n)
    x, mask = data["x"], data["train_mask"]
    y = data["y"][mask]
    return Measured(lambda: training_step(model, optimizer, (graph, graph), x, y, mask))


def sampled_workload(spec: dict, data: dict) -> Measured:
    """A training step of a 2-layer model on a mini-batch drawn by DGL's neighbour sampler (the
    run's batches, drawn once: see sample_batches); making the block and gathering the features
    are not timed."""
    pyg = FLAVOUR[spec["library"]] == "pyg"
    batches = torch.load(spec["batches"], weights_only=True)
    torch.manual_seed(0)
    model = TwoLayers(spec["layer"], spec["library"], data["x"].shape[1], data["num_classes"])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    x, y = data["x"], data["y"]
    taken = 0

    def prepare():
        nonlocal taken
        batch = batches[taken % len(batches)]
        taken += 1
        if pyg:
            graphs = [(torch.stack([src, dst]), (num_src, num_dst)) for src, dst, num_src, num_dst in batch["blocks"]]
        else:
            graphs = [dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=num_dst)
                      for src, dst, num_src, num_dst in batch["blocks"]]
        return model, optimizer, graphs, x[batch["input_ids"]], y[batch["output_ids"]]

    return Measured(training_step, prepare)


def sample_batches(spec: dict) -> dict:
    """Draw the mini-batches that every sampled measurement of a graph trains on, and save them:
    DGL's sampler draws differently in each process when it runs on several threads, and every
    library must train on the same batches. Fanouts 10, 25; BATCH_SIZE training vertices a batch,
    shuffled; the epoch restarts when it runs out."""
    data = load_graph(spec["graph"])
    g = dgl.graph((data["edge_index"][0], data["edge_index"][1]), num_nodes=data["x"].shape[0])
    g.create_formats_()
    dgl.seed(0)
    loader = dgl.dataloading.DataLoader(g, data["train_mask"].nonzero().flatten(),
                                        dgl.dataloading.NeighborSampler(list(FANOUTS)), batch_size=BATCH_SIZE,
                                        shuffle=True, generator=torch.Generator().manual_seed(0))
    batches = []
    while len(batches) < spec["count"]:
        for input_ids, output_ids, blocks in loader:
            batches.append({"input_ids": input_ids, "output_ids": output_ids,
                            "blocks": [(*b.edges(), b.num_src_nodes(), b.num_dst_nodes()) for b in blocks]})
            if len(batches) == spec["count"]:
                break
    torch.save(batches, spec["path"])
    edges = [sum(block[0].numel() for block in b["blocks"]) for b in batches]
    return {"status": "ok", "batches": len(batches), "mean_edges": statistics.mean(edges),
            "mean_seeds": statistics.mean(b["output_ids"].numel() for b in batches)}


def overhead_workload(spec: dict, data: None) -> Measured:
    """A layer on a 10-vertex graph, a new graph object every call (as with sampled blocks): the
    time is what a call costs beyond its (here negligible) arithmetic. The graphs are built ahead of
    the timed calls, as a sampler's blocks are before a training step reads them: a DGL graph's
    construction (self-loops, formats) pushes code and data out of the caches, an edge_index clone
    does not, and building each just before its call timed that for the DGL flavours alone.
    Forward and backward timed as the step; forward alone as `forward_s`, and as
    `forward_after_dgl_graph_s` for every flavour with a DGL graph built right before each call."""
    edge_index, n, pyg = ring_graph(), 10, FLAVOUR[spec["library"]] == "pyg"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, HIDDEN, generator=gen).requires_grad_()
    grad = torch.randn(n, HIDDEN, generator=gen)
    torch.manual_seed(0)
    layer = make_layer(spec["layer"], spec["library"], HIDDEN)

    def new_graph():
        return edge_index.clone() if pyg else dgl_graph(edge_index, n)

    def built_ahead():
        """prepare() for measure(): a graph from a pool built now, one per call it makes (the first
        call's included): each call converts a graph no call has seen."""
        graphs = iter([new_graph() for _ in range(spec["repeat"] + 1)])
        return lambda: (next(graphs),)

    def forward(graph):
        return layer(x, graph) if pyg else layer(graph, x)

    def step(graph):
        out = forward(graph)
        out.backward(grad.view(out.shape))
        x.grad = None
        layer.zero_grad(set_to_none=True)

    def after_dgl_graph():
        graph = new_graph()
        return (graph,) if not pyg else (graph, dgl_graph(edge_index, n))  # its construction is what counts here

    def forward_alone():
        return {"forward_s": measure(forward, built_ahead(), spec["repeat"], spec["budget_s"],
                                     memory=False)["step_s"],
                "forward_after_dgl_graph_s": measure(lambda graph, *_: forward(graph), after_dgl_graph,
                                                     spec["repeat"], spec["budget_s"], memory=False)["step_s"]}

    return Measured(step, built_ahead(), check=lambda first: [], memory=False, extra=forward_alone)


WORKLOADS = {"layer": layer_workload, "train": train_workload, "sampled": sampled_workload,
             "overhead": overhead_workload}


def measure_one(spec: dict) -> dict:
    """Set up the workload (load the graph, build the library's graph object and model), then measure it."""
    start = time.perf_counter()
    imports_mb = resident_mb()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = None if spec["workload"] == "overhead" else load_graph(spec["graph"])
        size = {} if graph is None else {"vertices": graph["x"].shape[0], "edges": graph["edge_index"].shape[1],
                                         "note": graph["note"]}
        measured = WORKLOADS[spec["workload"]](spec, graph)
        del graph  # what the workload did not keep is freed before the baseline
        release_free_memory()
        setup_s, setup_mb = time.perf_counter() - start, resident_mb()
        result = measure(measured.step, measured.prepare, spec["repeat"], spec["budget_s"], measured.memory,
                         spec["min_s"])
        result["check"] = measured.check(result.pop("first"))
        result.update(measured.extra())
    seen = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    return {"status": "ok", **result, "graph_size": size, "setup_s": setup_s, "imports_mb": imports_mb, "setup_mb": setup_mb,
            "wall_s": time.perf_counter() - start, "warnings": seen}


TASKS = {"generate": generate, "sample": sample_batches}  # what a child can do besides measuring


def run_child(spec: dict, conn) -> None:
    """The child's entry point: measure (or do a task) as `spec` says, send the result, exit."""
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")  # if memory runs out, the kernel takes this child first
    except OSError:
        pass  # not permitted here: the parent's memory guard still stops the child first
    torch.set_num_threads(spec["threads"])
    try:
        result = TASKS[spec["workload"]](spec) if spec["workload"] in TASKS else measure_one(spec)
    except Exception as e:  # noqa: BLE001 - a failure is a recorded result, not the end of the benchmark
        tail = "".join(traceback.format_exception(e)[-3:]).strip()
        result = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": tail}
    conn.send(result)
    conn.close()
