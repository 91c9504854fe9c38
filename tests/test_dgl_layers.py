"""Parity of seastar_layers.dgl.{GATConv, GraphConv, APPNPConv, SAGEConv, GINConv} with dgl.nn, on graphs and
sampled blocks."""
import copy

import pytest
import torch

from seastar_layers.compat import import_dgl

dgl = import_dgl()
import seastar_layers.dgl as sd  # noqa: E402
from seastar_layers.graph import Graph  # noqa: E402
from helpers import LEADING_ROWS_CASES, RecordingOp, leading_rows_cases, options_id  # noqa: E402

N, F_IN = 31, 10


def graph(self_loops=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, N, (120,), generator=gen), torch.randint(0, N, (120,), generator=gen)
    g = dgl.graph((src, dst), num_nodes=N)
    return dgl.add_self_loop(g) if self_loops else g


def pair(name, **kwargs):
    torch.manual_seed(0)
    ref = getattr(dgl.nn, name)(**kwargs)
    ours = getattr(sd, name)(**kwargs)
    ours.load_state_dict(ref.state_dict(), strict=True)
    ref.eval()
    ours.eval()
    return ref, ours


def check(ref, ours, g, feat, seed=None, **kwargs):
    """Same outputs and gradients (with a seed, torch's generator is seeded before each layer's call)."""
    feats = feat if isinstance(feat, tuple) else (feat,)
    results = []
    for layer in (ref, ours):
        leaves = [f.detach().clone().requires_grad_() for f in feats]
        layer.zero_grad()
        if seed is not None:
            torch.manual_seed(seed)
        out = layer(g, tuple(leaves) if isinstance(feat, tuple) else leaves[0], **kwargs)
        gen = torch.Generator().manual_seed(5)
        (out * torch.randn(out.shape, generator=gen)).sum().backward()
        results.append((out.detach(), [t.grad for t in leaves],
                        {k: p.grad for k, p in layer.named_parameters() if p.grad is not None}))
    (a, ga, pa), (b, gb, pb) = results
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5)
    assert pa.keys() == pb.keys()
    for k in pa:
        torch.testing.assert_close(pb[k], pa[k], atol=1e-5, rtol=1e-4, msg=k)


def x(n=N, width=F_IN, seed=1):
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed))


LAYERS = [("GATConv", dict(in_feats=F_IN, out_feats=3, num_heads=2)), ("GraphConv", dict(in_feats=F_IN, out_feats=3)),
          ("APPNPConv", dict(k=2, alpha=0.1))]


GAT_OPTIONS = [dict(num_heads=1), dict(num_heads=4), dict(num_heads=2, negative_slope=0.1),
               dict(num_heads=2, residual=True), dict(num_heads=2, bias=False),
               dict(num_heads=2, activation=torch.nn.functional.elu), dict(num_heads=2, feat_drop=0.3, attn_drop=0.3)]


@pytest.mark.parametrize("options", GAT_OPTIONS, ids=options_id)
def test_gat_options(options):
    ref, ours = pair("GATConv", in_feats=F_IN, out_feats=4, **options)
    check(ref, ours, graph(), x())
    check(ref, ours, graph(), x(), edge_weight=torch.rand(graph().num_edges()))


def test_gat_feature_dropout_runs_wherever_it_would_do_something():
    """GATConv skips calling feat_drop only where it would return its input as is (nn/modules.py:
    passes_through): in training with p > 0 it drops as DGL's layer does on the same seed, and a
    hook on it runs, whatever its mode."""
    ref, ours = pair("GATConv", in_feats=F_IN, out_feats=4, num_heads=2, feat_drop=0.5)
    ref.train()
    ours.train()
    check(ref, ours, graph(), x(), seed=3)
    ours.eval()
    calls = []
    ours.feat_drop.register_forward_hook(lambda module, args, out: calls.append(module.training))
    ours(graph(), x())
    ours.feat_drop.p = 0.0
    ours.train()
    ours(graph(), x())
    assert calls == [False, True]


def test_gat_bipartite_features():
    ref, ours = pair("GATConv", in_feats=(F_IN, 6), out_feats=3, num_heads=2, allow_zero_in_degree=True)
    gen = torch.Generator().manual_seed(2)
    g = dgl.heterograph({("a", "r", "b"): (torch.randint(0, 15, (40,), generator=gen),
                                           torch.randint(0, 9, (40,), generator=gen))}, {"a": 15, "b": 9})
    check(ref, ours, g, (x(15, F_IN), x(9, 6)))


@pytest.mark.parametrize("formats", [["csc"], ["csr"], ["csc", "csr"], ["coo", "csc"], "created"], ids=str)
@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_feats=F_IN, out_feats=3, num_heads=2)),
                                         ("GraphConv", dict(in_feats=F_IN, out_feats=3)),
                                         ("APPNPConv", dict(k=3, alpha=0.1))])
@pytest.mark.parametrize("shared_from", [0, None], ids=["shared", "small"])
def test_graphs_restricted_to_sparse_formats(formats, name, kwargs, shared_from, monkeypatch):
    """A DGLGraph restricted to CSC or CSR, without an edge list, converts with DGL's edge ids, and
    one whose CSC and CSR DGL already built shares them ("created") where it has at least
    SHARED_LAYOUT_EDGES edges (here 0: "shared"); a smaller one ("small") is built from its edge
    list, which costs less than reading DGL's layouts. DGL's own layers refuse most restricted
    graphs, so the reference runs on the unrestricted graph."""
    if shared_from is not None:
        monkeypatch.setattr("seastar_layers.graph.SHARED_LAYOUT_EDGES", shared_from)
    ref, ours = pair(name, **kwargs)
    g = graph()
    weight = torch.rand(g.num_edges(), generator=torch.Generator().manual_seed(4))
    if formats == "created":
        ours_g = graph()
        ours_g.create_formats_()
    else:
        ours_g = g.formats(formats)
    for edge_weight in (None, weight):
        expected = ref(g, x(), edge_weight=edge_weight)
        torch.testing.assert_close(ours(ours_g, x(), edge_weight=edge_weight), expected, atol=1e-5, rtol=1e-5)
    if formats == "created":  # no copies where shared: the layouts are DGL's own arrays
        converted = sd._converted(ours_g).graph
        indptr, indices, _ = ours_g.adj_tensors("csc")
        assert (converted.in_indptr.data_ptr() == indptr.data_ptr()) == (shared_from is not None)
        assert (converted.in_src.data_ptr() == indices.data_ptr()) == (shared_from is not None)


def sampled_blocks(fanouts=(4, 3)):
    """DGL's own neighbour sampler, made reproducible: dgl.seed alone does not fix its draws, since
    each of its threads draws from its own generator, so it samples on one thread."""
    g = graph()
    sampler = dgl.dataloading.NeighborSampler(list(fanouts))
    seeds = torch.arange(0, N, 3)
    threads = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)
    try:
        dgl.seed(0)
        _, _, blocks = sampler.sample_blocks(g, seeds)
    finally:
        dgl.utils.set_num_threads(threads)
    return blocks


@pytest.mark.parametrize("name,kwargs", LAYERS[:2])  # GAT and GraphConv
def test_sampled_blocks(name, kwargs):
    ref, ours = pair(name, allow_zero_in_degree=True, **kwargs)
    for block in sampled_blocks():
        assert block.is_block and block.num_src_nodes() != block.num_dst_nodes()
        check(ref, ours, block, x(block.num_src_nodes(), F_IN))


@pytest.mark.parametrize("case", LEADING_ROWS_CASES)
def test_gat_block_destinations_as_leading_rows(case, monkeypatch):
    """A block's destination features passed as h[:num_dst] (as DGL's sampler examples pass them)
    are projected once, as the sources' first rows (the op gets no destination features); outputs
    and every gradient equal DGL's, h[:num_dst]'s own where it retains its gradient or has a hook
    (projected apart then), and rows that only hold h's values (detached, copied) are projected apart."""
    block = sampled_blocks()[0]
    n_src, n_dst = block.num_src_nodes(), block.num_dst_nodes()
    ref, ours = pair("GATConv", in_feats=F_IN, out_feats=3, num_heads=2, allow_zero_in_degree=True)
    op = RecordingOp("gat_conv")
    monkeypatch.setattr(torch.ops.seastar_layers, "gat_conv", op)
    results = []
    for layer in (ref, ours):
        leaf, h, h_dst, hooked = leading_rows_cases(n_src, n_dst, F_IN, case)
        out = layer(block, (h, h_dst))
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(3)))
        results.append([out, leaf.grad, h_dst.grad if case == "retained" else None, *hooked,
                        *(p.grad for p in layer.parameters())])
    for theirs, ours_ in zip(*results, strict=True):
        torch.testing.assert_close(ours_, theirs, atol=1e-5, rtol=1e-5)
    assert (op.calls[0][2] is None) == (case in ("leaf", "computed", "no-grad")), case


@pytest.mark.parametrize("name,kwargs", LAYERS)
def test_one_relation_among_other_node_types(name, kwargs):
    """A graph of one relation whose node types are not all in it (DGL's own layers refuse it: its
    data views have several node types) runs over that relation's vertices: as DGL's layer on the
    same edges as a homogeneous graph. Two relations are refused by name."""
    homogeneous = graph()
    src, dst = homogeneous.edges()
    typed = dgl.heterograph({("user", "follows", "user"): (src, dst)}, num_nodes_dict={"user": N, "item": 4})
    ref, ours = pair(name, **kwargs)
    torch.testing.assert_close(ours(typed, x()), ref(homogeneous, x()), atol=1e-5, rtol=1e-5)
    two = dgl.heterograph({("user", "follows", "user"): (src, dst), ("user", "likes", "item"): (src[:3], src[:3] % 4)})
    with pytest.raises(ValueError, match="heterogeneous DGL graphs are not supported"):
        ours(two, x())


@pytest.mark.parametrize("norm", ["both", "left", "right", "none"])
def test_graphconv_norms(norm):
    ref, ours = pair("GraphConv", in_feats=F_IN, out_feats=6, norm=norm)
    check(ref, ours, graph(), x())
    check(ref, ours, graph(), x(), edge_weight=torch.rand(graph().num_edges()))
    wide, wide_ours = pair("GraphConv", in_feats=F_IN, out_feats=20, norm=norm)  # multiply after aggregating
    check(wide, wide_ours, graph(), x())
    square, square_ours = pair("GraphConv", in_feats=F_IN, out_feats=F_IN, norm=norm)  # DGL aggregates first, we not
    check(square, square_ours, graph(), x())
    check(square, square_ours, graph(), x(), edge_weight=torch.rand(graph().num_edges(), 1))


def test_small_graphconv_is_one_node():
    """GraphConv on (N, D) features is one gcn_conv op, which on a small graph runs in plain loops
    recorded as one autograd node (the weight, held as (in, out), passed transposed), whichever width
    is larger, with or without a weight of its own."""
    for kwargs, weight in [(dict(out_feats=6), None), (dict(out_feats=F_IN), None), (dict(out_feats=20), None),
                           (dict(out_feats=4, weight=False), torch.randn(F_IN, 4).requires_grad_()),
                           (dict(out_feats=F_IN, weight=False), None)]:
        layer = sd.GraphConv(in_feats=F_IN, **kwargs)
        out = layer(graph(), x().requires_grad_(), weight=weight)
        assert out.grad_fn.name() == "seastar_layers::gcn_conv_backward", kwargs


@pytest.mark.parametrize("norm", ["both", "left", "right", "none"])
@pytest.mark.parametrize("in_feats,out_feats", [(6, 40), (40, 6)])
def test_graphconv_past_the_plain_loops(norm, in_feats, out_feats):
    """On a graph too large for the plain loops, gcn_conv sums first where the projection widens the
    rows, as DGL does, and projects first where it narrows them: DGL's outputs and gradients either
    way, with and without edge weights."""
    gen = torch.Generator().manual_seed(6)
    g = dgl.add_self_loop(dgl.graph(tuple(torch.randint(0, 400, (2, 8000), generator=gen)), num_nodes=400))
    ref, ours = pair("GraphConv", in_feats=in_feats, out_feats=out_feats, norm=norm)
    check(ref, ours, g, x(400, in_feats))
    check(ref, ours, g, x(400, in_feats), edge_weight=torch.rand(g.num_edges(), generator=gen) + 0.1)


def test_graphconv_external_weight_and_no_bias():
    ref, ours = pair("GraphConv", in_feats=F_IN, out_feats=4, weight=False, bias=False)
    w = torch.randn(F_IN, 4)
    torch.testing.assert_close(ours(graph(), x(), weight=w), ref(graph(), x(), weight=w))
    _, with_weight = pair("GraphConv", in_feats=F_IN, out_feats=4)
    with pytest.raises(dgl.DGLError, match="External weight"):
        with_weight(graph(), x(), weight=w)


@pytest.mark.parametrize("options", [dict(k=1, alpha=0.1), dict(k=4, alpha=0.3)], ids=str)
def test_appnp(options):
    ref, ours = pair("APPNPConv", **options)
    check(ref, ours, graph(), x())
    check(ref, ours, graph(), x(), edge_weight=torch.rand(graph().num_edges()))


def test_appnp_edge_drop_runs_in_training():
    _, ours = pair("APPNPConv", k=3, alpha=0.1, edge_drop=0.5)
    ours.train()
    out = ours(graph(), x())
    assert out.shape == (N, F_IN) and torch.isfinite(out).all()


@pytest.mark.parametrize("name,kwargs", LAYERS[:2])  # GAT and GraphConv
def test_zero_in_degree(name, kwargs):
    g = graph(self_loops=False)
    assert (g.in_degrees() == 0).any()
    _, ours = pair(name, **kwargs)
    with pytest.raises(dgl.DGLError, match="0-in-degree"):
        ours(g, x())
    ref, ours = pair(name, allow_zero_in_degree=True, **kwargs)
    check(ref, ours, g, x())


@pytest.mark.parametrize("num_nodes", [12, 300])  # row pointers read as Python ints, and through numpy
@pytest.mark.parametrize("empty_row", [None, 0, 5, "last"])
def test_zero_in_degree_found_on_small_and_large_graphs(num_nodes, empty_row):
    """The 0-in-degree refusal finds a destination without in-edges wherever it is, and only then."""
    v = torch.arange(num_nodes)
    src, dst = torch.cat([v, v]), torch.cat([(v + 1) % num_nodes, (v + 2) % num_nodes])
    if empty_row is not None:
        lonely = num_nodes - 1 if empty_row == "last" else empty_row
        src, dst = src[dst != lonely], dst[dst != lonely]
    g = dgl.graph((src, dst), num_nodes=num_nodes)
    assert bool((g.in_degrees() == 0).any()) == (empty_row is not None)
    features = torch.randn(num_nodes, F_IN)
    for name, kwargs in LAYERS[:2]:
        ref, ours = pair(name, **kwargs)
        if empty_row is None:
            check(ref, ours, g, features)
        else:
            with pytest.raises(dgl.DGLError, match="0-in-degree"):
                ours(g, features)


def test_state_dicts_load_both_ways_and_repr():
    for name, kwargs in [("GATConv", dict(in_feats=F_IN, out_feats=3, num_heads=4, residual=True)),
                         ("GraphConv", dict(in_feats=F_IN, out_feats=3)), ("APPNPConv", dict(k=2, alpha=0.1))]:
        ref, ours = pair(name, **kwargs)
        getattr(dgl.nn, name)(**kwargs).load_state_dict(ours.state_dict(), strict=True)
        assert repr(ours).split("(", 1)[1] == repr(ref).split("(", 1)[1]
        ours.reset_parameters() if hasattr(ours, "reset_parameters") else None


def test_dgl_graph_converted_once(monkeypatch):
    """A DGLGraph is converted on its first call, then read from the graph object by every layer;
    a graph whose edges change in place (DGL gives it a new graph index) is converted again."""
    conversions = []
    convert = Graph.from_dgl.__func__
    monkeypatch.setattr(Graph, "from_dgl", classmethod(lambda cls, g, *a: conversions.append(g) or convert(cls, g, *a)))
    pairs = [pair(name, **kwargs) for name, kwargs in LAYERS]
    g = graph()
    for _, ours in pairs * 2:
        ours(g, x())
    assert conversions == [g]
    g.add_edges([0], [1])
    for ref, ours in pairs:
        torch.testing.assert_close(ours(g, x()), ref(g, x()), atol=1e-5, rtol=1e-5)
    assert conversions == [g, g]


@pytest.mark.parametrize("name,kwargs", LAYERS)
def test_no_edges_and_int32_graphs(name, kwargs):
    kwargs = dict(kwargs, allow_zero_in_degree=True) if name != "APPNPConv" else kwargs
    ref, ours = pair(name, **kwargs)
    empty = dgl.graph((torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)), num_nodes=N)
    check(ref, ours, empty, x())
    check(ref, ours, graph().int(), x())


def dgl_graphs_of_every_kind():
    ring = (torch.tensor([0, 2, 1, 3]), torch.tensor([1, 1, 0, 2]))
    return {"empty": dgl.graph(([], []), num_nodes=3), "int64": dgl.graph(ring, num_nodes=4),
            "int32": dgl.graph(ring, num_nodes=4).int(),
            "block": dgl.to_block(dgl.graph(ring, num_nodes=4), dst_nodes=torch.tensor([1, 0]))}


@pytest.mark.parametrize("without_c_entry", [False, True], ids=["dgl_c_library", "dgl_python_call"])
def test_dgl_edge_lists_read_as_dgl_lists_them(without_c_entry, monkeypatch):
    """Graph.from_dgl reads a graph's edge list from DGL's C library, past DGL's Python wrapping
    (26 of 30 us on a small graph); it must give what g.edges(order="eid") gives, ids, dtypes and
    all, and fall back to that call where a DGL version has no such entry point."""
    from seastar_layers import graph
    from seastar_layers.graph import _dgl_edges_by_id

    if without_c_entry:
        monkeypatch.setattr(graph, "_DGL_EDGES_ENTRY", "_CAPI_NotInThisDGL")
    for name, g in dgl_graphs_of_every_kind().items():
        ours, theirs = _dgl_edges_by_id(g), g.edges(order="eid")
        for a, b in zip(ours, theirs, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b), name


SAGE = [dict(in_feats=F_IN, out_feats=out, aggregator_type=kind) for kind in ("mean", "gcn", "pool") for out in (4, 16)]


def gin_pair(**kwargs):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(F_IN, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5))
    ref, ours = dgl.nn.GINConv(copy.deepcopy(mlp), **kwargs), sd.GINConv(copy.deepcopy(mlp), **kwargs)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref.eval(), ours.eval()


def sage_and_gin_pairs():
    for kwargs in SAGE:
        yield pair("SAGEConv", **kwargs)
    for kind in ("sum", "mean", "max"):
        yield gin_pair(aggregator_type=kind, init_eps=0.2, learn_eps=True)


@pytest.mark.parametrize("index", range(len(SAGE) + 3), ids=[options_id(o) for o in SAGE] +
                         [f"GIN-{kind}" for kind in ("sum", "mean", "max")])
def test_sage_and_gin(index):
    """Every aggregator, projected before the sweep (out_feats < in_feats, as DGL orders it) or after,
    on a graph with and without zero-in-degree vertices, with edge weights, on DGL's sampled blocks
    and with a pair of features."""
    ref, ours = list(sage_and_gin_pairs())[index]
    for g in (graph(), graph(self_loops=False)):
        check(ref, ours, g, x())
        check(ref, ours, g, x(), edge_weight=torch.rand(g.num_edges()))
        check(ref, ours, g, (x(), x(seed=2)))
    for block in sampled_blocks():
        check(ref, ours, block, x(block.num_src_nodes(), F_IN))


def test_sage_options_and_feature_dropout():
    ref, ours = pair("SAGEConv", in_feats=F_IN, out_feats=4, aggregator_type="mean", bias=False,
                     activation=torch.relu, norm=torch.nn.LayerNorm(4))
    check(ref, ours, graph(), x())
    ref, ours = pair("SAGEConv", in_feats=F_IN, out_feats=4, aggregator_type="pool", feat_drop=0.5)
    ref.train()
    ours.train()
    check(ref, ours, graph(), x(), seed=7)  # the same draws: DGL's dropout module, called as DGL calls it


def test_sage_and_gin_edge_weights_of_other_shapes():
    """Per-edge weights of any shape that broadcasts against the features (DGL's u_mul_e): the same
    programs, compiled for them on first use."""
    g = graph()
    for ref, ours in (pair("SAGEConv", in_feats=F_IN, out_feats=16, aggregator_type="mean"),
                      gin_pair(aggregator_type="max"), gin_pair(aggregator_type="sum")):
        check(ref, ours, g, x(), edge_weight=torch.rand(g.num_edges(), F_IN))
    _, ours = gin_pair()
    with pytest.raises(ValueError, match=r"'edge_weight' must have one value per edge \(151\), got shape \(3,\)"):
        ours(g, x(), edge_weight=torch.rand(3))


def test_sage_lstm_runs_dgls_own_layer():
    ref, ours = pair("SAGEConv", in_feats=F_IN, out_feats=4, aggregator_type="lstm")
    with pytest.warns(RuntimeWarning, match="aggregator_type='lstm' is not fused; running DGL's own SAGEConv"):
        torch.testing.assert_close(ours(graph(), x()), ref(graph(), x()))
