"""The CPU benchmark of issue 8: PyG, DGL and ours (the PyG and the DGL drop-ins) side by side,
each measurement in a process of its own, with the issue's targets.

    python benchmarks/bench_cpu.py --quick            # Cora and PubMed's graph: a few minutes
    python benchmarks/bench_cpu.py                    # everything (hours: see docs/benchmarks.md)
    python benchmarks/bench_cpu.py --graphs reddit-eighth --layers GAT GCN --workloads layer

Workloads, each for PyG's layers, DGL's, and our drop-ins for both:
  layer     one layer, forward and backward over the whole graph: GAT 8 heads x 8 channels,
            GCN, SAGE (mean) and GIN (sum, then a linear layer) to 64 channels on the graph's
            features (Reddit's: 602), APPNP K=10 on 64 features
  train     a full-batch training step (forward, loss, backward, Adam) of a 2-layer GAT
  sampled   a training step of a 2-layer GAT or GCN on a mini-batch of DGL's neighbour sampler
            (fanouts 10, 25; 1024 seeds; PyG's layers get the blocks as bipartite edge_index)
  overhead  a layer on a 10-vertex graph, a new graph object each call, the graphs built ahead of the
            calls: the per-call overhead; also every flavour's forward with a DGL graph built right
            before each call (whose construction evicts the caches)
Graphs: cora, pubmed (its real graph; features generated when the feature files are missing),
reddit-eighth and reddit: GENERATED graphs with Reddit's mean degree and skew (examples/data.py),
1/8 of its vertices (29,120 vertices, 14.3M edges) and all of them (232,965 vertices, 114.6M
edges), cached under ROOT/generated once generated (the first time takes minutes).

Every measurement runs in a child forked from a server process that has imported the libraries
and run nothing, so a child's memory is its library's alone; its peak is the resident memory a
step adds over what the child held just before it (its setup: graph, features, the library's
graph object and model). Time: the first step alone, then the median of --repeat steps (fewer
when they take over --budget seconds; more, up to 100, while they take under --min-time). A
child runs at most --timeout seconds and is stopped when its resident memory would pass what the
machine has available: both are recorded results, as is a child that dies. On the Reddit-scale
graphs a measurement first estimates its memory and time from the same measurement on a graph
with 1/8 of the edges (run first when it is not part of the run), and is recorded as skipped
where they would not fit.

Writes benchmarks/results/cpu.json (rewritten after every measurement, so an interrupted run keeps
what it measured) and cpu.png (time and peak memory, log scale), prints the tables and the
issue's targets with pass or fail. Figures from a busy machine are noise: compare ratios of one run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import DEFAULT_ROOT, RESULTS, machine  # noqa: E402

import cpu_report  # noqa: E402

LIBRARIES = ("pyg", "dgl", "seastar-pyg", "seastar-dgl")
LAYERS = ("GAT", "GCN", "APPNP", "SAGE", "GIN")
WORKLOADS = ("overhead", "layer", "train", "sampled")
SAMPLED_LAYERS = ("GAT", "GCN")  # APPNP propagates K steps over one graph; a sampled block is one hop
MEMORY_MARGIN_MB = 1024  # left to the rest of the machine when a child's memory budget is set
DATA_GENERATOR = HERE.parent / "examples" / "data.py"


@dataclass(frozen=True)
class Graph:
    key: str
    label: str
    dataset: str = ""  # a Planetoid dataset, or
    scale: float = 0.0  # the scale of a generated Reddit-scale graph
    probe: str = ""  # the graph with 1/8 of the edges that memory and time are estimated from

    @property
    def generated(self) -> bool:
        return self.scale > 0


GRAPHS = {g.key: g for g in (
    Graph("cora", "Cora", dataset="Cora"),
    Graph("pubmed", "PubMed graph", dataset="PubMed"),
    Graph("reddit-64th", "Reddit-scale/64 (GENERATED)", scale=1 / 64),  # only a probe for reddit-eighth
    Graph("reddit-eighth", "Reddit-scale/8 (GENERATED)", scale=1 / 8, probe="reddit-64th"),
    Graph("reddit", "Reddit-scale (GENERATED)", scale=1.0, probe="reddit-eighth"),
)}
SELECTABLE = ("cora", "pubmed", "reddit-eighth", "reddit")


@dataclass(frozen=True)
class Measurement:
    workload: str
    graph: str  # "" for the overhead, which brings its own 10-vertex graph
    layer: str
    library: str

    def __str__(self):
        return " ".join(p for p in (self.workload, self.graph, self.layer, self.library) if p)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", nargs="+", choices=SELECTABLE, help="default: all (--quick: cora pubmed)")
    p.add_argument("--layers", nargs="+", choices=LAYERS, default=list(LAYERS))
    p.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--quick", action="store_true",
                   help="the small graphs, fewer steps, shorter limits: proves the script in a few minutes")
    p.add_argument("--repeat", type=int, help="timed steps per measurement (default 5, --quick 3)")
    p.add_argument("--budget", type=float, help="seconds of timed steps after which a measurement stops "
                                                "repeating (default 60, --quick 10)")
    p.add_argument("--min-time", type=float, help="seconds of timed steps a measurement fills past --repeat when its "
                                                  "steps are short, 100 steps at most (default 2, --quick 0.5)")
    p.add_argument("--calls", type=int, help="calls timed for the overhead (default 1000, --quick 100)")
    p.add_argument("--timeout", type=float, help="seconds a child may run (default 1800, --quick 300)")
    p.add_argument("--max-memory", type=float, help="GB a child may hold (default: what the machine has available "
                                                    f"when it starts, less {MEMORY_MARGIN_MB} MB)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--root", default=str(DEFAULT_ROOT), help="datasets; generated graphs are cached in ROOT/generated")
    p.add_argument("--out", default=str(RESULTS / "cpu.json"), help="the JSON record; the plot goes beside it")
    args = p.parse_args(argv)
    quick = args.quick
    defaults = {"graphs": ["cora", "pubmed"] if quick else list(SELECTABLE), "repeat": 3 if quick else 5,
                "budget": 10.0 if quick else 60.0, "min_time": 0.5 if quick else 2.0, "calls": 100 if quick else 1000,
                "timeout": 300.0 if quick else 1800.0}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("repeat", "calls", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.min_time < 0:
        p.error(f"--min-time must not be negative, got {args.min_time}")
    for name in ("budget", "timeout", "max_memory"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    args.graphs = sorted(set(args.graphs), key=SELECTABLE.index)  # small to large: probes come first
    return args


def available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line: the benchmark needs Linux 3.14 or newer")


def resident_mb(pid: int) -> float:
    """Resident memory of a process, 0 once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


class Children:
    """Runs one child at a time, forked from a server that has imported cpu_child (torch, PyG, DGL,
    seastar_layers) and done nothing else, so no OpenMP pool exists before a fork."""

    def __init__(self, threads: int):
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by the OpenMP runtimes as they load, in the server
        # the server imports its preloads before it applies our sys.path (and ignores an ImportError)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(["cpu_child"])
        import cpu_child  # the parent names the children's entry point; it runs nothing here

        self.entry = cpu_child.run_child

    def run(self, spec: dict, timeout_s: float, limit_mb: float) -> dict:
        """The child's result, or what stopped it: its time limit, its memory budget, or its death."""
        receive, send = self.context.Pipe(duplex=False)
        child = self.context.Process(target=self.entry, args=(spec, send), daemon=True)
        child.start()
        send.close()
        try:
            result, most = self._watch(child, receive, timeout_s, limit_mb)
        finally:  # a child that has answered gets time to exit; one interrupted or stuck goes
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
            receive.close()
        result["observed_peak_mb"] = most  # the parent's own sampling of the child's resident memory
        return result

    @staticmethod
    def _watch(child, receive, timeout_s: float, limit_mb: float) -> tuple[dict, float]:
        start, most = time.monotonic(), 0.0
        while True:
            if receive.poll(0.05):
                try:
                    return receive.recv(), most
                except EOFError:  # it exited without a word
                    child.join()
                    return died(child.exitcode), most
            rss = resident_mb(child.pid)
            most = max(most, rss)
            if rss > limit_mb:
                child.kill()
                return {"status": "killed", "error": f"stopped at {rss / 1024:.1f} GB resident, over the "
                                                     f"{limit_mb / 1024:.1f} GB it may hold"}, most
            if time.monotonic() - start > timeout_s:
                child.kill()
                return {"status": "timeout", "error": f"stopped after the {timeout_s:.0f} s limit"}, most


def died(exitcode: int) -> dict:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = " (most likely the kernel's out-of-memory killer)" if name == "SIGKILL" else ""
        return {"status": "died", "error": f"killed by {name}{why}"}
    return {"status": "died", "error": f"exited with status {exitcode} without a result"}


class Bench:
    def __init__(self, args):
        self.args = args
        self.children = Children(args.threads)
        self.results: dict[Measurement, dict] = {}
        self.graphs: dict[str, dict] = {}
        self.out = Path(args.out)
        self.scratch = tempfile.TemporaryDirectory(prefix="bench_cpu-")  # the run's sampled mini-batches
        self.started = time.time()

    # --- graphs -------------------------------------------------------------------------------

    def graph_spec(self, graph: Graph) -> dict:
        if not graph.generated:
            return {"kind": "planetoid", "dataset": graph.dataset, "root": self.args.root}
        digest = hashlib.sha256(DATA_GENERATOR.read_bytes()).hexdigest()[:12]  # a new generator, a new cache
        path = Path(self.args.root) / "generated" / f"reddit-generated-scale{graph.scale:g}-seed0-{digest}.pt"
        return {"kind": "generated", "scale": graph.scale, "seed": 0, "path": str(path)}

    def ensure_graph(self, graph: Graph) -> dict:
        """The graph's size and provenance; a generated graph is generated into the cache first if needed."""
        if graph.key in self.graphs:
            return self.graphs[graph.key]
        info = {"label": graph.label}
        spec = self.graph_spec(graph)
        if graph.generated:
            about = Path(spec["path"]).with_suffix(".json")
            if Path(spec["path"]).exists() and about.exists():
                info.update(json.loads(about.read_text()), cached=True)
            else:
                print(f"generating {graph.label} into {spec['path']} ...", flush=True)
                made = self.children.run({"workload": "generate", "graph": spec, "threads": self.args.threads},
                                         timeout_s=max(self.args.timeout, 3600), limit_mb=self.memory_limit_mb())
                made.pop("observed_peak_mb")
                if made["status"] == "ok":
                    about.write_text(json.dumps(made, indent=2))
                    print(f"generated {graph.label} in {made['generated_s']:.0f} s", flush=True)
                info.update(made, cached=False)
        self.graphs[graph.key] = info
        return info

    def ensure_batches(self, graph: Graph) -> dict:
        """The sampled mini-batches of this run on `graph`, drawn once so that every library trains on them."""
        info = self.ensure_graph(graph)
        if "batches" not in info:
            path = Path(self.scratch.name) / f"{graph.key}-batches.pt"
            spec = {"workload": "sample", "graph": self.graph_spec(graph), "path": str(path),
                    "count": self.args.repeat + 1, "threads": self.args.threads}
            drawn = self.children.run(spec, self.args.timeout, self.memory_limit_mb())
            drawn.pop("observed_peak_mb")
            info["batches"] = {**drawn, "path": str(path)}
        return info["batches"]

    def memory_limit_mb(self) -> float:
        limit = available_mb() - MEMORY_MARGIN_MB
        return limit if self.args.max_memory is None else min(limit, self.args.max_memory * 1024)

    # --- measurements ---------------------------------------------------------------------------

    def plan(self) -> list[Measurement]:
        a = self.args
        todo = []
        if "overhead" in a.workloads:
            todo += [Measurement("overhead", "", layer, lib) for layer in a.layers for lib in a.libraries]
        for graph in a.graphs:
            if "layer" in a.workloads:
                todo += [Measurement("layer", graph, layer, lib) for layer in a.layers for lib in a.libraries]
            if "train" in a.workloads and "GAT" in a.layers:
                todo += [Measurement("train", graph, "GAT", lib) for lib in a.libraries]
            if "sampled" in a.workloads:
                todo += [Measurement("sampled", graph, layer, lib) for layer in a.layers if layer in SAMPLED_LAYERS
                         for lib in a.libraries]
        return todo

    def result(self, m: Measurement) -> dict:
        if m not in self.results:
            self.results[m] = self.measure(m)
            self.save()
            print(cpu_report.progress_line(m, self.results[m], self.graphs), flush=True)
        return self.results[m]

    def measure(self, m: Measurement) -> dict:
        a = self.args
        probe_only = m.graph and m.graph not in a.graphs  # measured for an estimate: one timed step is enough
        spec = {"workload": m.workload, "layer": m.layer, "library": m.library, "threads": a.threads,
                "repeat": a.calls if m.workload == "overhead" else 1 if probe_only else a.repeat, "budget_s": a.budget,
                "min_s": 0.0 if probe_only or m.workload == "overhead" else a.min_time}
        if m.graph:
            graph = GRAPHS[m.graph]
            info = self.ensure_graph(graph)
            if info.get("status", "ok") != "ok":
                return {"status": "skipped", "error": f"{graph.label} could not be generated: {info['error']}"}
            spec["graph"] = self.graph_spec(graph)
            if m.workload == "sampled":
                batches = self.ensure_batches(graph)
                if batches["status"] != "ok":
                    return {"status": "skipped", "error": f"no mini-batches: {batches['error']}"}
                spec["batches"] = batches["path"]
        estimate = self.estimate(m, GRAPHS[m.graph]) if m.graph and GRAPHS[m.graph].probe else None
        limit = self.memory_limit_mb()  # after the probe has run
        if estimate is not None:
            if "error" in estimate:
                return {"status": "skipped", **estimate}
            if estimate["memory_mb"] > limit:
                return {"status": "skipped", "estimate": estimate,
                        "error": f"needs about {estimate['memory_mb'] / 1024:.1f} GB ({estimate['basis']}); "
                                 f"{limit / 1024:.1f} GB available"}
            if estimate["wall_s"] > a.timeout:
                return {"status": "skipped", "estimate": estimate,
                        "error": f"would take about {estimate['wall_s']:.0f} s ({estimate['basis']}), over the "
                                 f"{a.timeout:.0f} s limit (--timeout)"}
        result = self.children.run(spec, a.timeout, limit)
        result["memory_budget_mb"] = limit
        if m.graph and "graph_size" in result:
            self.graphs[m.graph].update(result.pop("graph_size"))
        return result

    def estimate(self, m: Measurement, graph: Graph) -> dict:
        """Memory and time of `m` from the same measurement on the graph with 1/8 of the edges, scaled
        by the edge count (what grows with the graph: its data and every edge-sized tensor)."""
        probe = GRAPHS[graph.probe]
        measured = self.result(replace(m, graph=probe.key))
        ratio = self.ensure_graph(graph)["edges"] / self.ensure_graph(probe)["edges"]
        if measured["status"] == "ok":
            base = measured["imports_mb"]
            grows = measured["setup_mb"] - base + measured["peak_mb"]
            wall = measured["setup_s"] + measured["first_call_s"] + measured["step_s"]
        elif "estimate" in measured:
            base, grows, wall = (measured["estimate"][k] for k in ("imports_mb", "grows_mb", "wall_s"))
        else:
            return {"error": f"not run: the same measurement on {probe.label} ended {measured['status']} "
                             f"({measured.get('error', '')})"}
        return {"imports_mb": base, "grows_mb": grows * ratio, "memory_mb": base + grows * ratio,
                "wall_s": wall * ratio, "basis": f"scaled {ratio:.1f}x from {probe.label}"}

    def run(self):
        for m in self.plan():
            self.result(m)
        self.save()

    def record(self) -> dict:
        return {"machine": machine(), "args": vars(self.args), "started": time.ctime(self.started),
                "duration_s": time.time() - self.started, "graphs": self.graphs,
                "results": [{**asdict(m), **{k: v for k, v in r.items() if k != "check"}}
                            for m, r in self.results.items()],
                "cross_checks": cpu_report.cross_checks(self.results),
                "targets": cpu_report.targets(self.results)}

    def save(self):
        self.out.parent.mkdir(parents=True, exist_ok=True)
        partial = self.out.with_suffix(".tmp")
        partial.write_text(json.dumps(self.record(), indent=2, default=str))
        partial.replace(self.out)


def main(argv=None):
    args = parse_args(argv)
    bench = Bench(args)
    print(f"{args.threads} threads; graphs {', '.join(args.graphs)}; workloads {', '.join(args.workloads)}; "
          f"{available_mb() / 1024:.1f} GB available", flush=True)
    try:
        bench.run()
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", flush=True)
    bench.save()
    print(cpu_report.report(bench.results, bench.graphs, args))
    plot = Path(args.out).with_suffix(".png")
    cpu_report.plot(bench.results, bench.graphs, args, plot)
    print(f"wrote {args.out} and {plot} ({(time.time() - bench.started) / 60:.1f} minutes)")


if __name__ == "__main__":
    main()
