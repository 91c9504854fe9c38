"""The layers' programs as registered torch ops (torch.ops.seastar_layers.*): every specialisation the
extension holds against the same program run through the compiler's own path, opcheck on every op,
the checks of the C++ entry points, and calls from TorchScript and a fresh process."""
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import random_graph

import seastar_layers as sl
from seastar_layers.codegen.torch_entry import variant_key
from seastar_layers.graph import csr_layouts
from seastar_layers.nn.programs import FAMILIES, WEIGHTED_SUM
from seastar_layers.runtime.executor import COMPUTE_DTYPE

N = 9
EI = random_graph(N, N, 30, seed=3)
GRAPH = sl.Graph.from_edge_index(EI, N)
OPS = torch.ops.seastar_layers


def random_inputs(family, features, seed):
    """Random features of the variant's shapes on GRAPH, and random parameters."""
    gen = torch.Generator().manual_seed(seed)
    rows = {3: N, 4: GRAPH.num_edges}  # the examples' rows: 3 per vertex, 4 per edge
    tensors = {}
    for name, t in features.items():
        tensors[name] = torch.randn(rows[t.shape[0]], *t.shape[1:], generator=gen, dtype=t.dtype)
    dtype = next(iter(features.values())).dtype
    for p in family.params:
        tensors[p] = torch.rand((), generator=gen, dtype=COMPUTE_DTYPE[dtype])
    return tensors


def program_of(family, tensors):
    flags = {flag: feature in tensors for feature, flag in family.optional}
    return family.build(**flags, **{p: tensors[p] for p in family.params})


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_variant_equals_its_program(family):
    """The entry point chooses the variant and wires its buffers: results and gradients equal the
    program's through the compiler's path, for every specialisation compiled into the extension."""
    for k, (_, features) in enumerate(family.variants()):
        tensors = {n: t.requires_grad_() for n, t in random_inputs(family, features, seed=k).items()}
        params = {p: tensors[p] for p in family.params}
        feats = {n: t for n, t in tensors.items() if n not in params}
        ours = family(GRAPH, **tensors)[0]
        theirs = program_of(family, tensors)(GRAPH, **feats)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        projection = torch.randn_like(ours)
        got = torch.autograd.grad((ours * projection).sum(), list(tensors.values()), allow_unused=True)
        want = torch.autograd.grad((theirs * projection).sum(), list(tensors.values()), allow_unused=True)
        for name, g, w in zip(tensors, got, want, strict=True):
            if w is None:  # a parameter the program reads only through others
                w = torch.zeros_like(tensors[name])
            torch.testing.assert_close(g, w, msg=lambda m, name=name: f"{family.name} {features.keys()} {name}: {m}")


def opcheck_cases():
    cases = []
    for family in FAMILIES:
        seen = set()
        for _, features in family.variants():
            present = frozenset(features)
            dtype = next(iter(features.values())).dtype
            if (present, dtype) in seen:
                continue
            seen.add((present, dtype))
            cases.append(pytest.param(family, features, id=f"{family.name}-{'-'.join(sorted(present))}-{dtype}"))
    return cases


@pytest.mark.parametrize("family,features", opcheck_cases())
def test_opcheck(family, features):
    """Schema, fake implementation, autograd registration and AOT dispatch of the forward op, then
    of the backward op, for each set of options and dtype."""
    tensors = random_inputs(family, features, seed=1)
    args = [GRAPH.tensors()] + [tensors[name].requires_grad_() if name in tensors else None
                                for name in family.arguments]
    forward = getattr(OPS, family.name)
    torch.library.opcheck(forward, tuple(args))
    results, saved = forward(*[[t.detach() for t in args[0]]] + [a.detach() if a is not None else None
                                                                 for a in args[1:]])
    grads = [torch.randn_like(r) for r in results]
    backward_args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args] + [saved, grads]
    torch.library.opcheck(getattr(OPS, f"{family.name}_backward"), tuple(backward_args))


def gat_args(**overrides):
    gen = torch.Generator().manual_seed(0)
    args = {"a_src": torch.randn(N, 2, 1, generator=gen), "x": torch.randn(N, 2, 5, generator=gen),
            "slope": torch.tensor(0.2), "a_dst": torch.randn(N, 2, 1, generator=gen)}
    args.update(overrides)
    return args


def call_gat(graph=None, **overrides):
    args = gat_args(**overrides)
    return OPS.gat_attention(GRAPH.tensors() if graph is None else graph, args.pop("a_src"), args.pop("x"),
                             args.pop("slope"), **args)


@pytest.mark.parametrize("overrides,error,words", [
    ({"x": torch.randn(N + 1, 2, 5)}, ValueError, ["'x'", "source vertex", "10"]),
    ({"a_dst": torch.randn(N, 3, 1)}, ValueError, ["no kernel for the feature shapes", "a_dst[3, 1]", "a_src:s0,1"]),
    ({"x": torch.randn(N, 2, 5).double()}, TypeError, ["share one dtype", "'x'", "torch.float64"]),
    ({"a_src": torch.randn(N, 2, 1).half(), "x": torch.randn(N, 2, 5).half(), "a_dst": torch.randn(N, 2, 1).half()},
     TypeError, ["dtype torch.float16", "float32 or float64"]),
    ({"x": torch.randn(N, 5, 2).transpose(1, 2)}, ValueError, ["'x' must be contiguous", "x.contiguous()"]),
    ({"slope": torch.tensor([0.2])}, ValueError, ["parameter 'slope'", "shape []"]),
    ({"slope": torch.tensor(0.2, dtype=torch.float64)}, TypeError, ["parameter 'slope' must be torch.float32"]),
    ({"x": torch.randn(N)}, ValueError, ["no kernel for the feature shapes"]),
], ids=["rows", "shapes", "mixed dtypes", "dtype", "contiguity", "param shape", "param dtype", "rank"])
def test_entry_point_refuses_bad_arguments(overrides, error, words):
    with pytest.raises(error) as info:
        call_gat(**overrides)
    for word in words:
        assert word in str(info.value), str(info.value)


def bad_graph(slot, value):
    graph = [t.clone() for t in GRAPH.tensors()]
    graph[slot][0] = value
    return graph


@pytest.mark.parametrize("graph,words", [
    (bad_graph(1, N), ["graph[1] (in_src)", "outside [0, 9)"]),
    (bad_graph(1, -1), ["graph[1] (in_src)", "-1"]),
    (bad_graph(2, 10**6), ["graph[2] (in_eid)"]),
    (bad_graph(4, N + 5), ["graph[4] (out_dst)"]),
    (bad_graph(0, 1), ["graph[0] (in_indptr)", "must start at 0"]),
    (GRAPH.tensors()[:5], ["'graph' must hold the 6 CSR arrays"]),
    ([t.int() for t in GRAPH.tensors()], ["graph[0] (in_indptr) must hold int64 indices"]),
    ([torch.where(GRAPH.in_indptr == GRAPH.num_edges, GRAPH.num_edges - 1, GRAPH.in_indptr)] + GRAPH.tensors()[1:],
     ["the two layouts", "same number of edges"]),
], ids=["source", "negative", "edge id", "destination", "indptr", "count", "int32", "layouts"])
def test_entry_point_refuses_bad_graphs(graph, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call_gat(graph)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_unlisted_edges_are_absent_and_get_zero_gradients():
    """A graph may hold edges in no row (the layers drop self-loops this way, with static sizes):
    the result is the graph without them, and their per-edge gradients are zero."""
    listed = EI[0] != EI[1]
    partial = sl.Graph._from_checked(csr_layouts(EI[0], EI[1], N, N, listed), N, N)
    reduced = sl.Graph.from_edge_index(EI[:, listed], N)
    x = torch.randn(N, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(EI.shape[1], dtype=torch.float64, requires_grad=True)
    out = WEIGHTED_SUM(partial, x=x, w=w)[0]
    torch.testing.assert_close(out, WEIGHTED_SUM(reduced, x=x, w=w[listed])[0])
    grad_w, = torch.autograd.grad(out.sum(), [w])
    assert bool((grad_w[~listed] == 0).all()) and bool((grad_w[listed] != 0).any())


def test_variant_keys_follow_the_shape_pattern():
    assert variant_key(torch.float32, {"x": (4, 7), "a_src": (4, 1)}) == "float32|a_src:s0,1|x:s0,s1"
    assert variant_key(torch.float64, {"x": (3,), "w": ()}) == "float64|w:|x:s0"
    assert variant_key(torch.float32, {"x": (1, 5), "h": (5, 5)}) == "float32|h:s0,s0|x:1,s0"


def test_torchscript_calls_a_registered_op():
    @torch.jit.script
    def propagate(graph: list[torch.Tensor], x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.ops.seastar_layers.weighted_sum(graph, x, w)[0][0]

    x, w = torch.randn(N, 4), torch.rand(GRAPH.num_edges)
    torch.testing.assert_close(propagate(GRAPH.tensors(), x, w), WEIGHTED_SUM(GRAPH, x=x, w=w)[0])


def test_ops_exist_right_after_import():
    script = textwrap.dedent("""
        import torch, seastar_layers
        for name in ("gat_attention", "weighted_sum", "appnp_step"):
            for op in (name, name + "_backward"):
                print(getattr(torch.ops.seastar_layers, op).default._schema)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "seastar_layers::gat_attention(Tensor[] graph, Tensor a_src, Tensor x, Tensor slope, Tensor? a_dst=None, " \
           "Tensor? a_edge=None, Tensor? mask=None) -> (Tensor[], Tensor[])" in result.stdout
    assert result.stdout.count("seastar_layers::") == 6


def test_a_graph_built_in_inference_mode_serves_training_later():
    """The ops save the graph for backward, and tensors made in inference mode cannot be saved:
    evaluating a layer under torch.inference_mode() must not break training on the same graph."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from seastar_layers.compat import import_dgl

        dgl = import_dgl()
        import seastar_layers.dgl as sd
    x = torch.randn(N, 6)
    g = dgl.add_self_loop(dgl.graph((EI[0], EI[1]), num_nodes=N))
    for layer, args in [(sl.GCNConv(6, 3), (x, EI)), (sl.GATConv(6, 3), (x, EI)), (sd.GraphConv(6, 3), (g, x))]:
        with torch.inference_mode():
            layer(*args)
        layer(*args).sum().backward()
        assert all(p.grad is not None for p in layer.parameters())
