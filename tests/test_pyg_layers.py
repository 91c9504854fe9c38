"""Parity of seastar_layers.{GATConv, GCNConv, APPNP, SAGEConv, GINConv} with PyG's layers: outputs, gradients,
state_dicts."""
import copy
import warnings

import pytest
import torch
import torch_geometric.nn as pyg_nn
from helpers import LEADING_ROWS_CASES, RecordingOp, assert_unbiased, draws, leading_rows_cases, random_graph

import seastar_layers as sl
from seastar_layers.graph import graph_cache

N, F_IN = 29, 12


def data(num_edges=110, seed=0, n=N):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, F_IN, generator=gen), random_graph(n, n, num_edges, seed=seed)


def pair(name, **kwargs):
    torch.manual_seed(0)
    ref = getattr(pyg_nn, name)(**kwargs)
    ours = getattr(sl, name)(**kwargs)
    ours.load_state_dict(ref.state_dict(), strict=True)
    ref.eval()
    ours.eval()
    return ref, ours


def check(ref, ours, *args, seed=None, **kwargs):
    """Same outputs and same gradients for every parameter and the input features (with a seed,
    torch's generator is seeded before each layer's call)."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    for t in leaves:
        t.requires_grad_(True)
    outs = []
    for layer in (ref, ours):
        layer.zero_grad()
        if seed is not None:
            torch.manual_seed(seed)
        out = layer(*args, **kwargs)
        gen = torch.Generator().manual_seed(3)
        (out * torch.randn(out.shape, generator=gen)).sum().backward()
        outs.append((out.detach(), [t.grad for t in leaves], {k: p.grad.clone() for k, p in
                                                                      layer.named_parameters() if p.grad is not None}))
        for t in leaves:
            t.grad = None
    (a, ga, pa), (b, gb, pb) = outs
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    for x, y in zip(ga, gb):
        if x is None:  # e.g. edge weights a cached layer ignores
            assert y is None
            continue
        torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5)
    assert pa.keys() == pb.keys()
    for k in pa:
        torch.testing.assert_close(pb[k], pa[k], atol=1e-5, rtol=1e-4, msg=k)


GAT_OPTIONS = [
    dict(heads=1),
    dict(heads=4),
    dict(heads=3, concat=False),
    dict(heads=2, negative_slope=0.05),
    dict(heads=2, add_self_loops=False),
    dict(heads=2, bias=False),
    dict(heads=2, residual=True),
    dict(heads=2, edge_dim=3),
    dict(heads=2, edge_dim=3, fill_value=0.5),
    dict(heads=2, edge_dim=3, fill_value="add"),
    dict(heads=2, edge_dim=3, add_self_loops=False),
]


@pytest.mark.parametrize("options", GAT_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_gat_options(options):
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=5, **options)
    x, ei = data()
    args = (x, ei)
    if "edge_dim" in options:
        args = (x, ei, torch.randn(ei.shape[1], 3))
    check(ref, ours, *args)


@pytest.mark.parametrize("heads,channels,edge_dim",
                         [(8, 8, None), (16, 16, 3), (4, 80, None), (3, 90, 2), (1, 300, None)],
                         ids=["8x8", "16x16-edges", "4x80", "3x90-edges", "1x300"])
def test_gat_row_widths(heads, channels, edge_dim):
    """Rows of up to 256 (heads, channels) elements are swept once per edge, every head at once;
    wider rows one head and one block of channels at a time: both agree with PyG."""
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=channels, heads=heads, edge_dim=edge_dim)
    x, ei = data(num_edges=300)
    check(ref, ours, x, ei, *([torch.randn(ei.shape[1], edge_dim)] if edge_dim else []))


def test_gat_bipartite_and_size():
    ref, ours = pair("GATConv", in_channels=(F_IN, 7), out_channels=4, heads=2, add_self_loops=False)
    gen = torch.Generator().manual_seed(1)
    x_src, x_dst = torch.randn(17, F_IN, generator=gen), torch.randn(9, 7, generator=gen)
    ei = random_graph(17, 9, 50, seed=4)
    check(ref, ours, (x_src, x_dst), ei)
    check(ref, ours, (x_src, x_dst), ei, size=(17, 9))
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2, add_self_loops=False)
    check(ref, ours, (x_src, x_dst[:, :1].expand(9, F_IN).contiguous()), ei)


@pytest.mark.parametrize("case", LEADING_ROWS_CASES)
def test_gat_block_destinations_as_leading_rows(case, monkeypatch):
    """A block's destinations passed as x[:n] (as PyG's sampler examples pass them) are projected
    once, as the senders' first rows (the op gets no x_dst); outputs and every gradient equal PyG's,
    x[:n]'s own where it retains its gradient or has a hook (projected apart then, so that it gets
    one), and rows that only hold x's values (detached, copied) are projected apart."""
    n_src, n_dst = 17, 9
    ei = random_graph(n_src, n_dst, 50, seed=4)
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2)
    op = RecordingOp("gat_conv")
    monkeypatch.setattr(torch.ops.seastar_layers, "gat_conv", op)
    results = []
    for layer in (ref, ours):
        leaf, x, x_dst, hooked = leading_rows_cases(n_src, n_dst, F_IN, case)
        out = layer((x, x_dst), ei, size=(n_src, n_dst))
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(3)))
        results.append([out, leaf.grad, x_dst.grad if case == "retained" else None, *hooked,
                        *(p.grad for p in layer.parameters())])
    for theirs, ours_ in zip(*results, strict=True):
        torch.testing.assert_close(ours_, theirs, atol=1e-5, rtol=1e-5)
    x_dst_passed = op.calls[0][2]
    assert (x_dst_passed is None) == (case in ("leaf", "computed", "no-grad")), case


def test_gat_dropout_is_on_attention_and_deterministic_in_eval():
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2, dropout=0.5)
    x, ei = data()
    check(ref, ours, x, ei)  # eval: no dropout, exact parity
    ours.train()
    torch.manual_seed(0)
    a = ours(x, ei)
    torch.manual_seed(1)
    b = ours(x, ei)
    assert not torch.allclose(a, b)  # dropout is active in training
    assert torch.isfinite(a).all()


@pytest.mark.parametrize("dropout", [0.2, 0.6])
def test_gat_attention_dropout_is_unbiased(dropout):
    """The kernel's draws rescale what they keep: over many training calls the mean output tends
    to the eval output, and the spread is PyG's (the same dropout on the same coefficients)."""
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2, dropout=dropout)
    x, ei = data()
    with torch.no_grad():
        expected = ours(x, ei)
    ours_draws = draws(ours.train(), (x, ei), 300)
    theirs = draws(ref.train(), (x, ei), 300, seed=1)
    assert_unbiased(ours_draws, expected, "seastar GATConv")
    ratio = float(ours_draws.var(0).sum() / theirs.var(0).sum())
    assert 0.75 < ratio < 1.33, f"ours spreads {ratio:.2f} times as much as PyG's (variance)"


@pytest.mark.parametrize("options", [dict(), dict(improved=True), dict(add_self_loops=False), dict(normalize=False),
                                     dict(bias=False), dict(cached=True)], ids=str)
def test_gcn_options(options):
    ref, ours = pair("GCNConv", in_channels=F_IN, out_channels=6, **options)
    x, ei = data()
    check(ref, ours, x, ei)
    check(ref, ours, x, ei, torch.rand(ei.shape[1]))


@pytest.mark.parametrize("options", [dict(K=1, alpha=0.1), dict(K=5, alpha=0.3), dict(K=3, alpha=0.1, add_self_loops=False),
                                     dict(K=2, alpha=0.2, normalize=False), dict(K=2, alpha=0.1, cached=True)], ids=str)
def test_appnp_options(options):
    ref, ours = pair("APPNP", **options)
    x, ei = data()
    check(ref, ours, x, ei)
    check(ref, ours, x, ei, torch.rand(ei.shape[1]))


def test_appnp_dropout_runs_in_training():
    _, ours = pair("APPNP", K=3, alpha=0.1, dropout=0.5)
    ours.train()
    x, ei = data()
    out = ours(x, ei)
    assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=F_IN, out_channels=3, heads=2)),
                                         ("GCNConv", dict(in_channels=F_IN, out_channels=3)),
                                         ("APPNP", dict(K=2, alpha=0.1)),
                                         ("SAGEConv", dict(in_channels=F_IN, out_channels=3)),
                                         ("SAGEConv", dict(in_channels=F_IN, out_channels=3, aggr="max")),
                                         ("GINConv", dict(nn=torch.nn.Identity(), train_eps=True))])
def test_graph_formats_agree(name, kwargs):
    from torch_geometric import EdgeIndex

    ref, ours = pair(name, **kwargs)
    x, ei = data()
    expected = ref(x, ei)
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1]), (N, N)).coalesce()
    formats = {
        "edge_index int64": ei,
        "edge_index int32": ei.to(torch.int32),
        "EdgeIndex": EdgeIndex(ei, sparse_size=(N, N)),
    }
    for fmt, graph in formats.items():
        torch.testing.assert_close(ours(x, graph), expected, atol=1e-5, rtol=1e-5, msg=fmt)
    for fmt, adj in {"sparse COO adj_t": adj_t, "sparse CSR adj_t": adj_t.to_sparse_csr()}.items():
        torch.testing.assert_close(ours(x, adj), ref(x, adj), atol=1e-5, rtol=1e-5, msg=fmt)


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_channels=F_IN, out_channels=3, heads=2)),
                                         ("GCNConv", dict(in_channels=F_IN, out_channels=3)),
                                         ("APPNP", dict(K=2, alpha=0.1)),
                                         ("SAGEConv", dict(in_channels=F_IN, out_channels=3)),
                                         ("SAGEConv", dict(in_channels=F_IN, out_channels=3, aggr="max")),
                                         ("GINConv", dict(nn=torch.nn.Identity(), train_eps=True))])
def test_graph_without_edges_and_isolated_vertices(name, kwargs):
    ref, ours = pair(name, **kwargs)
    x, _ = data()
    check(ref, ours, x, torch.zeros(2, 0, dtype=torch.long))
    if name == "GATConv":
        ref, ours = pair(name, add_self_loops=False, **kwargs)
        check(ref, ours, x, random_graph(N, N, 20, seed=9))


def test_state_dict_round_trip_and_repr():
    for name, kwargs in [("GATConv", dict(in_channels=F_IN, out_channels=3, heads=4, edge_dim=2, residual=True)),
                         ("GCNConv", dict(in_channels=F_IN, out_channels=3)), ("APPNP", dict(K=4, alpha=0.2)),
                         ("SAGEConv", dict(in_channels=F_IN, out_channels=3, project=True)),
                         ("GINConv", dict(nn=torch.nn.Linear(F_IN, 3), train_eps=True))]:
        ref, ours = pair(name, **kwargs)
        back = getattr(pyg_nn, name)(**kwargs)
        back.load_state_dict(ours.state_dict(), strict=True)
        assert repr(ours) == repr(ref)
        assert isinstance(ours, pyg_nn.MessagePassing)
        ours.reset_parameters()  # PyG's, re-initialising every parameter


def test_second_forward_does_not_rebuild_the_graph():
    _, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2)
    x, ei = data()
    ours(x, ei)
    before = graph_cache.builds
    ours(x, ei)
    ours(x * 2, ei)
    assert graph_cache.builds == before
    ei.add_(0)  # an in-place change bumps the version: the graph is rebuilt
    ours(x, ei)
    assert graph_cache.builds == before + 1


@pytest.mark.parametrize("name", ["GCNConv", "APPNP"])
def test_normalisation_is_kept_with_the_graph_and_follows_its_edits(name, monkeypatch):
    """Without edge weights gcn_norm follows from the graph alone: its degrees are kept with the
    graph, and computed again when the edges change (no per-edge weights at all:
    test_gcn_normalisation_scales_vertices); with edge weights it is normalised on each call; the
    outputs stay PyG's."""
    kwargs = {"in_channels": F_IN, "out_channels": 3} if name == "GCNConv" else {"K": 3, "alpha": 0.1}
    ref, ours = pair(name, **kwargs)
    x, ei = data()
    calls = []
    original = sl.nn.edges.gcn_weights
    monkeypatch.setattr(sl.nn.edges, "gcn_weights", lambda *a: calls.append(1) or original(*a))
    for _ in range(2):
        torch.testing.assert_close(ours(x, ei), ref(x, ei))
    assert len(calls) == 0
    ei[0, 0] = (ei[0, 0] + 1) % x.shape[0]  # an edit: a new graph, a new normalisation
    torch.testing.assert_close(ours(x, ei), ref(x, ei))
    assert len(calls) == 0
    for _ in range(2):  # edge weights may change between calls: normalised on each
        w = torch.rand(ei.shape[1])
        torch.testing.assert_close(ours(x, ei, w), ref(x, ei, w))
    assert len(calls) == 2


def test_no_silent_fallback_in_common_paths():
    _, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, edge_dim=2)
    x, ei = data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours(x, ei, torch.randn(ei.shape[1], 2))


def test_sorted_edge_index_uses_its_own_caches():
    from torch_geometric import EdgeIndex

    from seastar_layers.graph import as_graph

    x, ei = data()
    sorted_ei = EdgeIndex(ei, sparse_size=(N, N)).sort_by("col")[0]
    g = as_graph(sorted_ei)
    (colptr, _), _ = sorted_ei.get_csc()
    assert g.in_indptr.data_ptr() == colptr.data_ptr()  # no copy: the EdgeIndex's own CSC
    ref, ours = pair("GCNConv", in_channels=F_IN, out_channels=3, normalize=False)
    torch.testing.assert_close(ours(x, sorted_ei), ref(x, ei), atol=1e-5, rtol=1e-5)


def test_gat_sparse_adjacency_takes_edge_attr_from_the_argument():
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, edge_dim=2, add_self_loops=False)
    x, ei = data()
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.rand(ei.shape[1]), (N, N)).coalesce()
    edge_attr = torch.randn(adj_t._nnz(), 2)  # one row per stored edge, in the adjacency's order
    torch.testing.assert_close(ours(x, adj_t, edge_attr), ref(x, adj_t, edge_attr), atol=1e-5, rtol=1e-5)


def test_unsupported_precision_is_named_in_layer_terms():
    x, ei = data()
    for layer in (sl.GATConv(F_IN, 2), sl.GCNConv(F_IN, 2), sl.APPNP(K=1, alpha=0.1), sl.SAGEConv(F_IN, 2),
                  sl.GINConv(torch.nn.Identity())):
        with pytest.raises(TypeError, match=r"seastar_layers (GATConv|GCNConv|APPNP|SAGEConv|GINConv) supports "
                                            r"float32, float64, "
                                            r"float16 and bfloat16 node features, got torch.complex64"):
            layer(x.to(torch.complex64), ei)


@pytest.mark.parametrize("in_width,out_width", [(6, 40), (40, 6)])
def test_gcn_sums_the_narrower_rows(in_width, out_width):
    """On a graph too large for the plain loops, GCNConv sums first where its projection widens the
    rows (each edge gathers in features, not out, and num_dst rows are projected) and projects first
    where it narrows them; PyG's outputs and gradients either way, and under autocast its dtype."""
    ref, ours = pair("GCNConv", in_channels=in_width, out_channels=out_width)
    x = torch.randn(400, in_width, generator=torch.Generator().manual_seed(2))
    ei = random_graph(400, 400, 8000, seed=5)
    check(ref, ours, x, ei)
    with torch.profiler.profile() as prof:
        ours(x, ei)
    order = [e.name for e in sorted(prof.events(), key=lambda e: e.time_range.start)
             if e.name in ("seastar_layers::weighted_sum", "aten::mm")]
    assert order[0] == ("seastar_layers::weighted_sum" if in_width < out_width else "aten::mm"), order
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, out = ref(x, ei), ours(x, ei)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_layers_follow_float32(dtype):
    """Half features (as torch.autocast gives them) run in the kernels' float32 arithmetic."""
    x, ei = data()
    tol = {torch.float16: 2e-2, torch.bfloat16: 8e-2}[dtype]
    for layer in (sl.GATConv(F_IN, 3, heads=2), sl.GCNConv(F_IN, 3), sl.APPNP(K=2, alpha=0.1), sl.SAGEConv(F_IN, 3),
                  sl.SAGEConv(F_IN, 3, aggr="max"), sl.GINConv(torch.nn.Linear(F_IN, 3))):
        half = copy.deepcopy(layer).to(dtype)
        out = half(x.to(dtype).requires_grad_(), ei)
        assert out.dtype == dtype
        reference = layer(x.to(dtype).float(), ei)  # the same rounded inputs, in float32
        torch.testing.assert_close(out.float(), reference, atol=tol, rtol=tol)
        out.float().sum().backward()


@pytest.mark.parametrize("layer", ["GCNConv", "APPNP"])
@pytest.mark.parametrize("options", [dict(), dict(add_self_loops=False), dict(flow="target_to_source")], ids=str)
def test_gcn_normalisation_scales_vertices(monkeypatch, options, layer):
    """Without edge weights gcn_norm's weight of u -> v is dinv[u] * dinv[v]: GCNConv and APPNP
    (each of its steps) scale the vertices by the cached degrees instead, so no call computes a
    per-edge weight, the graph with its self-loop slots is built once per graph object, and the
    results (gradients included) are PyG's."""
    from seastar_layers.graph import graph_cache

    calls = {"gcn_weights": 0}

    def counted(name):
        original = getattr(sl.nn.edges, name)

        def call(*args):
            calls[name] += 1
            return original(*args)
        return call

    for name in calls:
        monkeypatch.setattr(sl.nn.edges, name, counted(name))
    kwargs = dict(in_channels=F_IN, out_channels=6) if layer == "GCNConv" else dict(K=3, alpha=0.1)
    ref, ours = pair(layer, **kwargs, **options)
    x, ei = data()
    builds = graph_cache.builds
    for _ in range(3):
        check(ref, ours, x, ei)
    assert graph_cache.builds == builds + 1 and calls == {"gcn_weights": 0}
    check(ref, ours, x, ei.clone())  # another graph object: its own loops and degrees
    assert graph_cache.builds == builds + 2 and calls == {"gcn_weights": 0}


SAGE_OPTIONS = [dict(), dict(out_channels=20), dict(aggr="max"), dict(aggr="sum"), dict(aggr="add", out_channels=20),
                dict(normalize=True), dict(root_weight=False), dict(project=True), dict(bias=False)]


@pytest.mark.parametrize("options", SAGE_OPTIONS, ids=str)
def test_sage_options(options):
    """Mean, max and sum, projected before the sweep (out_channels < F_IN) or after it, and bipartite
    inputs: with sizes, with destination features or without (no root term), as sampled blocks pass them."""
    ref, ours = pair("SAGEConv", **{"in_channels": F_IN, "out_channels": 6, **options})
    x, ei = data()
    check(ref, ours, x, ei)
    check(ref, ours, x, random_graph(N, N, 20, seed=9))  # isolated vertices: 0 for every aggregation
    src, dst = random_graph(N, 11, 80, seed=4)
    check(ref, ours, (x, x[:11]), torch.stack([src, dst]), (N, 11))
    check(ref, ours, (x, x[:11]), torch.stack([src, dst]))  # as many receivers as the second features' rows
    check(ref, ours, (x, None), torch.stack([src, dst]), (N, 11))


@pytest.mark.parametrize("name,kwargs", [("SAGEConv", dict(in_channels=F_IN, out_channels=6, aggr="max")),
                                         ("GINConv", dict(nn=torch.nn.Identity()))])
def test_sage_and_gin_reversed_flow(name, kwargs):
    """flow="target_to_source" fused on one set of vertices; on a pair of features (PyG then reads
    the senders from the second) PyG's own layer runs, with a warning that says so."""
    ref, ours = pair(name, flow="target_to_source", **kwargs)
    x, ei = data()
    check(ref, ours, x, ei)
    with pytest.warns(RuntimeWarning, match="a pair of features with flow='target_to_source' is not fused"):
        torch.testing.assert_close(ours((x, x), ei), ref((x, x), ei))


def gin_pair(**kwargs):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(F_IN, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5))
    ref, ours = pyg_nn.GINConv(copy.deepcopy(mlp), **kwargs), sl.GINConv(copy.deepcopy(mlp), **kwargs)
    ours.load_state_dict(ref.state_dict(), strict=True)
    return ref.eval(), ours.eval()


@pytest.mark.parametrize("options", [dict(), dict(eps=0.3), dict(eps=-0.2, train_eps=True), dict(aggr="mean"),
                                     dict(aggr="max", train_eps=True)], ids=str)
def test_gin_options(options):
    ref, ours = gin_pair(**options)
    x, ei = data()
    check(ref, ours, x, ei)
    if options.get("train_eps"):
        assert ours.eps.grad is not None
    src, dst = random_graph(N, 11, 80, seed=4)
    check(ref, ours, (x, x[:11]), torch.stack([src, dst]), (N, 11))
    check(ref, ours, (x, x[:11]), torch.stack([src, dst]))
    check(ref, ours, (x, None), torch.stack([src, dst]), (N, 11))


def test_sage_max_shares_the_gradient_among_tied_edges():
    """Where several in-edges attain the maximum, the gradient is shared among them, as torch's
    scatter_reduce (PyG's max aggregation) shares it. Away from 0: where the maximum is exactly 0,
    torch also counts the zeros its result starts from as a tie (include_self=False notwithstanding),
    so its shares there sum to less than the gradient; ours sum to it (docs/design.md)."""
    ref, ours = pair("SAGEConv", in_channels=F_IN, out_channels=4, aggr="max")
    x, ei = data()
    check(ref, ours, x.round() + 0.5, ei)  # halves: ties in most rows, none at 0


def test_sage_and_gin_in_explain_mode_scale_messages_by_the_mask():
    x, ei = data()
    mask = torch.randn(ei.shape[1])
    for ref, ours in (pair("SAGEConv", in_channels=F_IN, out_channels=4),
                      pair("SAGEConv", in_channels=F_IN, out_channels=4, aggr="max"), gin_pair()):
        for layer in (ref, ours):
            layer.explain = True
            layer._edge_mask = mask
        check(ref, ours, x, ei)


@pytest.mark.parametrize("aggr", ["std", "lstm"])
def test_sage_aggregations_the_programs_do_not_cover_run_pygs_own(aggr):
    ref, ours = pair("SAGEConv", in_channels=F_IN, out_channels=4, aggr=aggr)
    x, ei = data()
    ei = ei[:, torch.argsort(ei[1], stable=True)]  # lstm needs the receivers sorted
    with pytest.warns(RuntimeWarning, match=f"aggr='{aggr}' is not fused; running PyG's own SAGEConv"):
        torch.testing.assert_close(ours(x, ei), ref(x, ei))
