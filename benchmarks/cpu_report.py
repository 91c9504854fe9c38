"""bench_cpu.py's report: progress lines, the tables, the cross-checks against the libraries, the
issue's targets with pass or fail, and the plot. Works on the results as measured (a dict from
bench_cpu.Measurement to a child's result); imports no torch."""
from __future__ import annotations

from common import table

LIBRARY_NAMES = {"pyg": "PyG", "dgl": "DGL", "seastar-pyg": "ours, PyG drop-in", "seastar-dgl": "ours, DGL drop-in"}
REPLACES = {"seastar-pyg": "pyg", "seastar-dgl": "dgl"}  # the library whose layers each drop-in replaces
OURS = tuple(REPLACES)
PEERS = ("pyg", "dgl")
ISSUE_GRAPHS = ("reddit-eighth", "reddit")  # the issue's ratio targets are about the Reddit-scale graphs
SMALL_GRAPHS = ("cora", "pubmed")
FULL_GRAPH = "reddit"
OVERHEAD_LIMIT_S = 50e-6
LAYERS = ("GAT", "GCN", "APPNP", "SAGE", "GIN")  # as bench_cpu.py's
CHECK_ATOL, CHECK_RTOL = 1e-4, 1e-3


def seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.1f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"


def megabytes(mb: float) -> str:
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def cell(result: dict | None, memory: bool = True) -> str:
    """One table cell: time and peak memory, or what happened instead."""
    if result is None:
        return ""
    if result["status"] != "ok":
        return result["status"]
    text = seconds(result["step_s"])
    return f"{text}, {megabytes(result['peak_mb'])}" if memory else text


def is_ours(warning: str) -> bool:
    """A warning our layers raise (such as running the library's own code for an option not fused)."""
    return "seastar_layers" in warning


def progress_line(m, result: dict, graphs: dict) -> str:
    label = graphs.get(m.graph, {}).get("label", m.graph) if m.graph else "10-vertex graph"
    what = f"{m.workload:8s} {label:28s} {m.layer:5s} {LIBRARY_NAMES[m.library]:18s}"
    if result["status"] != "ok":
        return f"{what} {result['status']}: {result.get('error', '')}"
    line = f"{what} {cell(result, 'peak_mb' in result)} (first step {seconds(result['first_call_s'])}, " \
           f"{result['steps']} timed)"
    return line + "".join(f"\n    warning: {w}" for w in result.get("warnings", []) if is_ours(w))


# --- comparisons --------------------------------------------------------------------------------------

def _flat(values) -> list[float]:
    return [v for row in values for v in _flat(row)] if isinstance(values, list) else [values]


def cross_checks(results: dict) -> list[dict]:
    """Each drop-in's first output (a layer's rows, a training step's loss) against the library it
    replaces, same weights, same inputs: 'ok' or by how much it differs."""
    checks = []
    for m, ours in results.items():
        if m.library not in REPLACES or ours["status"] != "ok" or not ours.get("check"):
            continue
        theirs = results.get(type(m)(m.workload, m.graph, m.layer, REPLACES[m.library]))
        if theirs is None or theirs["status"] != "ok":
            continue
        a, b = _flat(ours["check"]), _flat(theirs["check"])
        worst = max((abs(x - y) - CHECK_ATOL - CHECK_RTOL * abs(y), abs(x - y)) for x, y in zip(a, b))
        verdict = "ok" if len(a) == len(b) and worst[0] <= 0 else f"MISMATCH (max |difference| {worst[1]:.3g})"
        checks.append({"workload": m.workload, "graph": m.graph, "layer": m.layer, "library": m.library,
                       "against": REPLACES[m.library], "verdict": verdict})
    return checks


def _get(results, workload, graph, layer, library):
    for m, r in results.items():
        if (m.workload, m.graph, m.layer, m.library) == (workload, graph, layer, library):
            return r
    return None


def _ratio(numerator: dict | None, denominator: dict | None, key: str) -> float | str:
    """numerator[key] / denominator[key], or why there is none."""
    for r in (numerator, denominator):
        if r is None:
            return "not measured"
        if r["status"] != "ok":
            return r["status"]
    return numerator[key] / denominator[key]


def _fastest(results, workload, graph, layer) -> dict | None:
    """The faster of PyG's and DGL's results (both must have run: a skipped peer is not beaten)."""
    peers = [_get(results, workload, graph, layer, lib) for lib in PEERS]
    if any(r is None or r["status"] != "ok" for r in peers):
        return next((r for r in peers if r is not None and r["status"] != "ok"), None)
    return min(peers, key=lambda r: r["step_s"])


def _fastest_that_ran(results, workload, graph, layer) -> dict | None:
    """The faster of PyG's and DGL's results among those that ran (PyG's SAGE and GIN need the
    edges x features messages: on the Reddit-scale graphs more memory than the machine has)."""
    ran = [r for r in (_get(results, workload, graph, layer, lib) for lib in PEERS) if r is not None and
           r["status"] == "ok"]
    return min(ran, key=lambda r: r["step_s"]) if ran else _fastest(results, workload, graph, layer)


def _verdict(value: float, required: float, at_least: bool, applies: bool, shown: str) -> str:
    if not applies:
        return f"{shown} (ratio only)"
    met = value >= required if at_least else value <= required
    return f"{shown} {'pass' if met else 'FAIL'}"


def targets(results: dict) -> list[dict]:
    """The issue's targets, one row per (target, graph, layer), a verdict per drop-in. Ratios are
    computed on every graph measured; pass or fail only where the target is about that graph."""
    order = ("cora", "pubmed", "reddit-eighth", "reddit")
    graphs = sorted({m.graph for m in results if m.graph in order}, key=order.index)
    rows = []

    def ratio_row(target, graph, layer, value_of, required, at_least=True, applies=True):
        values = {ours: value_of(ours) for ours in OURS}
        if all(v == "not measured" for v in values.values()):
            return
        entry = {"target": target, "graph": graph, "layer": layer, "required": f"{required:g}x"}
        for ours, value in values.items():
            entry[ours] = f"n/a ({value})" if isinstance(value, str) else \
                _verdict(value, required, at_least, applies, f"{value:.2f}x")
        rows.append(entry)

    def peer_over_ours(workload, graph, layer, peer, key="step_s"):
        def value_of(ours):
            theirs = _fastest(results, workload, graph, layer) if peer == "fastest" else \
                _fastest_that_ran(results, workload, graph, layer) if peer == "fastest that ran" else \
                _get(results, workload, graph, layer, peer)
            return _ratio(theirs, _get(results, workload, graph, layer, ours), key)
        return value_of

    for g in graphs:
        large = g in ISSUE_GRAPHS
        ratio_row("GAT at least 5x faster than DGL's GATConv", g, "GAT", peer_over_ours("layer", g, "GAT", "dgl"), 5,
                  applies=large)
        ratio_row("GAT within 3x of our GCN (our GAT time / our GCN time)", g, "GAT",
                  lambda ours, g=g: _ratio(_get(results, "layer", g, "GAT", ours),
                                           _get(results, "layer", g, "GCN", ours), "step_s"), 3, at_least=False,
                  applies=large)
        ratio_row("GCN at least 1.3x faster than DGL's GraphConv", g, "GCN", peer_over_ours("layer", g, "GCN", "dgl"),
                  1.3, applies=large)
        ratio_row("APPNP at least 10x faster than DGL's APPNPConv", g, "APPNP",
                  peer_over_ours("layer", g, "APPNP", "dgl"), 10, applies=large)
        for layer in ("SAGE", "GIN"):
            ratio_row(f"{layer} at least 1.3x faster than the faster library that runs (its time / ours)", g, layer,
                      peer_over_ours("layer", g, layer, "fastest that ran"), 1.3, applies=large)
        for layer in ("GAT", "GCN", "APPNP"):
            ratio_row("peak memory at most half of DGL's (DGL's / ours)", g, layer,
                      peer_over_ours("layer", g, layer, "dgl", "peak_mb"), 2, applies=large)
        for layer in LAYERS if g in SMALL_GRAPHS else ():
            ratio_row("small graphs: not slower than the faster peer (its time / ours)", g, layer,
                      peer_over_ours("layer", g, layer, "fastest"), 1)
        for layer in ("GAT", "GCN"):
            ratio_row("sampled training step at least as fast as with the faster peer's layers (its time / ours)", g,
                      layer, peer_over_ours("sampled", g, layer, "fastest"), 1, applies=large)
        train = {ours: _get(results, "train", g, "GAT", ours) for ours in OURS}
        if any(train.values()):
            entry = {"target": "2-layer GAT full-batch training step runs on this machine", "graph": g, "layer": "GAT",
                     "required": "runs"}
            for ours, r in train.items():
                shown = "not measured" if r is None else cell(r) if r["status"] == "ok" else r["status"]
                entry[ours] = f"{shown} " + (("pass" if r is not None and r["status"] == "ok" else "FAIL")
                                             if g == FULL_GRAPH else "(not the full graph)")
            rows.append(entry)
    for layer in LAYERS:
        measured = {ours: _get(results, "overhead", "", layer, ours) for ours in OURS}
        if not any(measured.values()):
            continue
        entry = {"target": "per-call overhead under 50 us (forward on a new 10-vertex graph)", "graph": "",
                 "layer": layer, "required": "50 us"}
        for ours, r in measured.items():
            if r is None or r["status"] != "ok":
                entry[ours] = f"n/a ({'not measured' if r is None else r['status']})"
            else:
                entry[ours] = f"{seconds(r['forward_s'])} {'pass' if r['forward_s'] < OVERHEAD_LIMIT_S else 'FAIL'}"
        rows.append(entry)
    return rows


# --- printed report ------------------------------------------------------------------------------------

def _graph_line(key: str, info: dict) -> str:
    size = f"{info['vertices']:,} vertices, {info['edges']:,} edges" if "edges" in info else "size unknown"
    made = ""
    if "generated_s" in info:
        made = f"; generating took {info['generated_s']:.0f} s" + (" (cached)" if info.get("cached") else "")
    batches = info.get("batches", {})
    if batches.get("status") == "ok":
        made += (f"; {batches['batches']} sampled mini-batches of {batches['mean_seeds']:.0f} seeds and "
                 f"{batches['mean_edges']:,.0f} edges on average")
    note = f"; {info['note']}" if info.get("note") else ""
    return f"  {key}: {info['label']}, {size}{made}{note}"


def _pivot(results, rows: list[tuple], columns=LIBRARY_NAMES, memory=True) -> str:
    """rows: (label dict, workload, graph, layer); one column per library."""
    lines = []
    for labels, workload, graph, layer in rows:
        line = dict(labels)
        for lib, name in columns.items():
            line[name] = cell(_get(results, workload, graph, layer, lib), memory)
        lines.append(line)
    return table(lines, list(rows[0][0]) + list(columns.values())) if lines else ""


def report(results: dict, graphs: dict, args) -> str:
    shown = [g for g in ("cora", "pubmed", "reddit-eighth", "reddit") if g in graphs]
    out = [(f"\nCPU benchmark: float32, {args.threads} threads, each measurement in its own process; time is the "
            "median step, memory the peak resident memory a step adds over its setup")]
    out += ["graphs:"] + [_graph_line(g, graphs[g]) for g in shown]
    measured = {(m.workload, m.graph, m.layer) for m in results}
    for g in shown:
        rows = [({"layer": layer}, "layer", g, layer) for layer in LAYERS
                if ("layer", g, layer) in measured]
        if rows:
            out += [f"\none layer, forward+backward, {graphs[g]['label']}:", _pivot(results, rows)]
    rows = [({"graph": graphs[g]["label"]}, "train", g, "GAT") for g in shown if ("train", g, "GAT") in measured]
    if rows:
        out += ["\n2-layer GAT, full-batch training step:", _pivot(results, rows)]
    rows = [({"graph": graphs[g]["label"], "model": f"2-layer {layer}"}, "sampled", g, layer) for g in shown
            for layer in ("GAT", "GCN") if ("sampled", g, layer) in measured]
    if rows:
        out += ["\nsampled mini-batch training step (DGL's neighbour sampler, fanouts 10, 25, up to 1024 seeds):",
                _pivot(results, rows)]
    overhead = [m for m in results if m.workload == "overhead"]
    if overhead:
        def per_layer(libraries, cell):
            """A row per layer of cell(result) for each of `libraries` measured (where cell gives one)."""
            lines = []
            for layer in LAYERS:
                cells = {}
                for lib in libraries:
                    r = _get(results, "overhead", "", layer, lib)
                    text = None if r is None else cell(r)
                    if text is not None:
                        cells[LIBRARY_NAMES[lib]] = text
                if cells:
                    lines.append({"layer": layer, **cells})
            return lines

        lines = per_layer(LIBRARY_NAMES, lambda r: r["status"] if r["status"] != "ok" else
                          f"{seconds(r['forward_s'])} / {seconds(r['step_s'])}")
        out += ["\nper call on a 10-vertex graph, a new graph each call, built ahead of the calls (forward / "
                "forward+backward):", table(lines, ["layer", *LIBRARY_NAMES.values()])]
        # a DGL graph's construction pushes code and data out of the caches: every flavour's forward
        # called right after one, as a training step right after its sampler
        lines = per_layer(LIBRARY_NAMES, lambda r: seconds(r["forward_after_dgl_graph_s"])
                          if "forward_after_dgl_graph_s" in r else None)
        if lines:
            out += ["forward with a DGL graph built right before each call (its construction evicts the caches):",
                    table(lines, ["layer", *LIBRARY_NAMES.values()])]
    checks = cross_checks(results)
    wrong = [c for c in checks if c["verdict"] != "ok"]
    out.append(f"\ncross-checks against the library each drop-in replaces: {len(checks) - len(wrong)} of {len(checks)} "
               "agree" + "".join(f"\n  {c['workload']} {c['graph']} {c['layer']} {c['library']}: {c['verdict']}"
                                 for c in wrong))
    problems = [f"  {m}: {r['status']}: {r.get('error', '')}" for m, r in results.items() if r["status"] != "ok"]
    if problems:
        out += ["\nnot measured:"] + problems
    warned = sorted({w for r in results.values() for w in r.get("warnings", []) if is_ours(w)})
    if warned:
        out += ["\nwarnings from our layers (a fallback to the library's code means the figure is not ours):"] + \
               [f"  {w}" for w in warned]
    rows = targets(results)
    if rows:
        out += ["\nissue 8's targets (pass/FAIL where the target is about the graph; ratios elsewhere):",
                table(rows, ["target", "graph", "layer", "required", *OURS])]
    return "\n".join(out)


# --- plot ---------------------------------------------------------------------------------------------

PLOT_GROUPS = (("layer", "GAT", "GAT"), ("layer", "GCN", "GCN"), ("layer", "APPNP", "APPNP"), ("layer", "SAGE", "SAGE"),
               ("layer", "GIN", "GIN"),
               ("train", "GAT", "train\n2-layer GAT"), ("sampled", "GAT", "sampled\nGAT"),
               ("sampled", "GCN", "sampled\nGCN"))
COLOURS = {"pyg": "#4c72b0", "dgl": "#dd8452", "seastar-pyg": "#55a868", "seastar-dgl": "#8172b3"}


def plot(results: dict, graphs: dict, args, path) -> None:
    """Time and peak memory per workload and library, one column per graph (and one for the
    per-call overhead), log scale; what did not run is marked by its status."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [g for g in ("cora", "pubmed", "reddit-eighth", "reddit") if any(m.graph == g for m in results)]
    overhead = any(m.workload == "overhead" for m in results)
    width = len(columns) + overhead
    if not width:
        return
    # one column alone is widened so that the title and the four-entry legend fit in it
    fig, axes = plt.subplots(2, width, figsize=(max(4.2 * width, 6.8), 7.5), squeeze=False)
    for col, g in enumerate(columns):
        groups = [grp for grp in PLOT_GROUPS if any((m.workload, m.graph, m.layer) == (grp[0], g, grp[1])
                                                    for m in results)]
        for row, (key, label) in enumerate((("step_s", "seconds per step"), ("peak_mb", "peak MB over setup"))):
            _bars(axes[row][col], results, [(w, g, layer) for w, layer, _ in groups],
                  [name for _, _, name in groups], key, label)
        axes[0][col].set_title(graphs[g]["label"], fontsize=10)
    if overhead:
        layers = [layer for layer in LAYERS if any(m.workload == "overhead" and m.layer == layer for m in results)]
        _bars(axes[0][-1], results, [("overhead", "", layer) for layer in layers], layers, "forward_s",
              "seconds per forward call")
        axes[0][-1].set_title("10-vertex graph (per call)", fontsize=10)
        axes[1][-1].axis("off")
    handles = [matplotlib.patches.Patch(color=COLOURS[lib], label=name) for lib, name in LIBRARY_NAMES.items()]
    if overhead:  # the overhead's column has no memory panel: the legend goes there
        axes[1][-1].legend(handles=handles, loc="center", fontsize=10)
    else:
        fig.legend(handles=handles, loc="lower right", ncol=4, fontsize=9)
    fig.suptitle(f"CPU, {args.threads} threads, float32: one process per measurement (lower is better)", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(ax, results, keys: list[tuple], names: list[str], value: str, label: str) -> None:
    step = 1 / (len(LIBRARY_NAMES) + 1)
    heights = []
    for i, key in enumerate(keys):
        for j, lib in enumerate(LIBRARY_NAMES):
            r = _get(results, *key, lib)
            x = i + (j - 1.5) * step
            if r is not None and r["status"] == "ok" and r.get(value, 0) > 0:
                ax.bar(x, r[value], width=step, color=COLOURS[lib])
                heights.append(r[value])
            elif r is not None:
                ax.text(x, 0, r["status"], rotation=90, ha="center", va="bottom", fontsize=7,
                        transform=ax.get_xaxis_transform())
    ax.set_yscale("log")
    if heights:
        ax.set_ylim(min(heights) / 3, max(heights) * 3)
    ax.set_xticks(range(len(keys)), names, fontsize=8)
    ax.set_ylabel(label, fontsize=9)
    ax.grid(axis="y", which="major", alpha=0.3)
