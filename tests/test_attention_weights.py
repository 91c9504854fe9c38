"""Attention weights, fused: PyG's return_attention_weights=True and DGL's get_attention=True come out
of the same sweep as the output, in the libraries' formats and edge order, equal to theirs, with
gradients through them; the stock layer's forward never runs and nothing warns."""
import contextlib
import warnings

import pytest
import torch
import torch_geometric.nn as pyg_nn
import test_dgl_layers as dgl_tests
from helpers import options_id, random_graph, stock_dropout_replays
from test_pyg_layers import F_IN, GAT_OPTIONS, N, data, pair

from seastar_layers.compat import import_dgl

dgl = import_dgl()


@contextlib.contextmanager
def fused_only(stock_class):
    """Inside, the stock layer's forward refuses to run and a fallback warning is an error."""
    original = stock_class.forward

    def refuse(*args, **kwargs):
        raise AssertionError(f"{stock_class.__qualname__}.forward ran: the attention path was not fused")

    stock_class.forward = refuse
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            yield
    finally:
        stock_class.forward = original


def leaves(args):
    for a in args:
        if isinstance(a, (tuple, list)):
            yield from leaves(a)
        elif isinstance(a, torch.Tensor) and a.is_floating_point() and a.layout == torch.strided:
            yield a


def results(layer, call, args):
    """The output, the attention structure and the gradients of the inputs and parameters, first
    through the output, then through the attention weights alone."""
    inputs = list(leaves(args))
    for t in inputs:
        t.requires_grad_(True)
    out, returned, alpha = call(layer, args)
    inputs += [p for p in layer.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(3)
    gradients = []
    for value in (out, alpha):
        loss = (value * torch.randn(value.shape, generator=gen, dtype=value.dtype)).sum()
        if loss.requires_grad:
            gradients.append(torch.autograd.grad(loss, inputs, allow_unused=True, retain_graph=True))
        else:  # a graph without edges
            gradients.append([None] * len(inputs))
    return out.detach(), returned, alpha.detach(), gradients


def assert_same_results(ours, theirs, atol=1e-5, rtol=1e-5):
    (out, _, alpha, grads), (ref_out, _, ref_alpha, ref_grads) = ours, theirs
    torch.testing.assert_close(out, ref_out, atol=atol, rtol=rtol)
    torch.testing.assert_close(alpha, ref_alpha, atol=atol, rtol=rtol)
    for through, ours_by_input, theirs_by_input in zip(("output", "attention"), grads, ref_grads):
        for k, (g, ref_g) in enumerate(zip(ours_by_input, theirs_by_input)):
            if ref_g is None or g is None:
                assert (g is None or not g.any()) and (ref_g is None or not ref_g.any()), (through, k)
                continue
            torch.testing.assert_close(g, ref_g, atol=atol, rtol=1e-4, msg=f"gradient {k} through the {through}")


# --- PyG ------------------------------------------------------------------------------------------

def pyg_call(layer, args, **kwargs):
    out, (edges, alpha) = layer(*args, return_attention_weights=True, **kwargs)
    return out, (edges, alpha), alpha


def assert_same_edges(edges, ref_edges):
    assert type(edges) is type(ref_edges)
    if isinstance(ref_edges, torch.Tensor) and ref_edges.layout != torch.strided:
        assert edges.layout == ref_edges.layout and edges.shape == ref_edges.shape
        torch.testing.assert_close(edges.to_dense(), ref_edges.to_dense(), atol=1e-5, rtol=1e-5)
        if edges.layout == torch.sparse_coo:
            assert torch.equal(edges.indices(), ref_edges.indices())
        else:
            assert torch.equal(edges.crow_indices(), ref_edges.crow_indices())
            assert torch.equal(edges.col_indices(), ref_edges.col_indices())
        return
    assert edges.dtype == ref_edges.dtype and torch.equal(edges, ref_edges)
    if hasattr(ref_edges, "sparse_size"):  # an EdgeIndex: its metadata too
        assert edges.sparse_size() == ref_edges.sparse_size()
        assert edges.sort_order == ref_edges.sort_order and edges.is_undirected == ref_edges.is_undirected


def check_pyg(ref, ours, *args, ours_args=None, **kwargs):
    """ours_args: the same inputs as fresh objects, where running PyG's layer changes them."""
    expected = results(ref, lambda layer, a: pyg_call(layer, a, **kwargs), args)
    with fused_only(pyg_nn.GATConv):
        got = results(ours, lambda layer, a: pyg_call(layer, a, **kwargs), ours_args or args)
    assert_same_results(got, expected)
    (edges, alpha), (ref_edges, _) = got[1], expected[1]
    assert_same_edges(edges, ref_edges)
    if edges.layout != torch.strided:  # (the adjacency with the attention as its values, the attention)
        torch.testing.assert_close(edges.values(), alpha)
    return got


@pytest.mark.parametrize("options", GAT_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
def test_pyg_attention_weights(options, flow):
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=5, flow=flow, **options)
    x, ei = data()
    args = (x, ei, torch.randn(ei.shape[1], 3)) if "edge_dim" in options else (x, ei)
    out, (edges, alpha), _, _ = check_pyg(ref, ours, *args)
    assert alpha.shape == (edges.shape[1], options["heads"])


def test_pyg_attention_weights_in_float64():
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=5, heads=3, edge_dim=2)
    ref.double(), ours.double()
    x, ei = data()
    check_pyg(ref, ours, x.double(), ei, torch.randn(ei.shape[1], 2, dtype=torch.float64))


def edge_index_formats(ei, n_src=N, n_dst=N):
    from torch_geometric import EdgeIndex

    yield "EdgeIndex", EdgeIndex(ei, sparse_size=(n_src, n_dst))
    yield "EdgeIndex sorted by col", EdgeIndex(ei, sparse_size=(n_src, n_dst)).sort_by("col")[0]
    yield "EdgeIndex sorted by row", EdgeIndex(ei, sparse_size=(n_src, n_dst)).sort_by("row")[0]


def sparse_formats(ei, n_src=N, n_dst=N):
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.rand(ei.shape[1]), (n_dst, n_src)).coalesce()
    yield "sparse COO adj_t", adj_t
    yield "sparse CSR adj_t", adj_t.to_sparse_csr()


@pytest.mark.parametrize("add_self_loops", [True, False])
def test_pyg_attention_weights_in_every_graph_format(add_self_loops):
    """The edges come back in the form they went in (a plain tensor, an EdgeIndex with its
    metadata, a torch sparse adjacency with the attention as its values), in PyG's edge order."""
    x, ei = data()
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, add_self_loops=add_self_loops)
    for name, graph in [*edge_index_formats(ei), *sparse_formats(ei)]:
        check_pyg(ref, ours, x, graph)


@pytest.mark.parametrize("add_self_loops", [True, False])
def test_pyg_attention_weights_with_an_int32_edge_index(add_self_loops):
    # Under torch 2.13, PyG's own gradients are wrong for an int32 edge_index that it does not rebuild
    # (add_self_loops=False): torch's scatter_add backward mishandles an expanded int32 index. Ours are
    # checked against PyG's on the int64 edge_index.
    x, ei = data()
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, add_self_loops=add_self_loops)
    expected = results(ref, pyg_call, (x, ei))
    with fused_only(pyg_nn.GATConv):
        got = results(ours, pyg_call, (x, ei.to(torch.int32)))
    assert_same_results(got, expected)
    assert_same_edges(got[1][0], ref(x, ei.to(torch.int32), return_attention_weights=True)[1][0])


def test_pyg_attention_weights_on_sparse_adjacency_with_edge_features():
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, edge_dim=2, add_self_loops=False)
    x, ei = data()
    for name, adj_t in sparse_formats(ei):
        check_pyg(ref, ours, x, adj_t, torch.randn(adj_t._nnz(), 2))


def test_pyg_attention_weights_on_an_uncoalesced_sparse_adjacency():
    x, ei = data()
    ei = torch.unique(ei, dim=1)  # no duplicate edges: coalescing only sorts them

    def adj_t():  # PyG marks the one it reads coalesced, without sorting it
        order = torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(0))
        return torch.sparse_coo_tensor(ei[:, order].flip(0), torch.ones(ei.shape[1]), (N, N))

    assert not adj_t().is_coalesced()
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2)
    check_pyg(ref, ours, x, adj_t(), ours_args=(x, adj_t()))
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, add_self_loops=False)
    with pytest.raises(RuntimeError, match="uncoalesced"):  # PyG reads the edges of the adjacency as given
        ref(x, adj_t(), return_attention_weights=True)
    check_pyg(ref, ours, x, adj_t().coalesce(), ours_args=(x, adj_t()))


def test_pyg_bipartite_attention_weights():
    gen = torch.Generator().manual_seed(1)
    x_src, x_dst = torch.randn(17, F_IN, generator=gen), torch.randn(9, 7, generator=gen)
    ei = random_graph(17, 9, 50, seed=4)
    for add_self_loops in (False, True):
        ref, ours = pair("GATConv", in_channels=(F_IN, 7), out_channels=4, heads=2, add_self_loops=add_self_loops)
        check_pyg(ref, ours, (x_src, x_dst), ei, size=(17, 9))
        check_pyg(ref, ours, (x_src, None), ei, size=(17, 9))  # no destination scores
        for name, graph in edge_index_formats(ei, 17, 9):
            check_pyg(ref, ours, (x_src, x_dst), graph)
    # target_to_source reads the pair as (senders, receivers), as PyG's rendered propagate (docs/design.md):
    # the attention is the forward flow's on the reversed edges, returned on the edges as given
    _, backward = pair("GATConv", in_channels=(F_IN, 7), out_channels=4, heads=2, add_self_loops=False,
                       flow="target_to_source")
    _, forward = pair("GATConv", in_channels=(F_IN, 7), out_channels=4, heads=2, add_self_loops=False)
    out, (edges, alpha) = backward((x_src, x_dst), ei.flip(0), size=(17, 9), return_attention_weights=True)
    expected_out, (_, expected_alpha) = forward((x_src, x_dst), ei, size=(17, 9), return_attention_weights=True)
    assert torch.equal(edges, ei.flip(0))
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(alpha, expected_alpha)


def test_pyg_attention_weights_are_after_dropout_as_pyg():
    """PyG returns the attention after dropout, and propagates that: given the coefficients our
    kernel dropped (PyG's F.dropout replays them), PyG's weights, output and gradients."""
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2, dropout=0.4)
    ref.train(), ours.train()
    x, ei = data()
    torch.manual_seed(7)
    kept = ours(x, ei, return_attention_weights=True)[1][1] != 0
    assert not kept.all()  # dropped edges are in the returned weights
    with stock_dropout_replays(kept):
        expected = results(ref, pyg_call, (x, ei))
    torch.manual_seed(7)
    with fused_only(pyg_nn.GATConv):
        got = results(ours, pyg_call, (x, ei))
    assert_same_results(got, expected)


@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_pyg_attention_weights_in_explain_mode(dropout):
    """The explain mask scales the messages, not the attention PyG returns; its gradient is PyG's."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2, dropout=dropout)
    x, ei = data()
    mask = torch.randn(ei.shape[1], generator=torch.Generator().manual_seed(4)).requires_grad_()
    returned = []
    for layer in (ref.train(), ours.train()):
        set_masks(layer, mask, ei, apply_sigmoid=True)
        torch.manual_seed(7)
        out, (_, alpha) = layer(x, ei, return_attention_weights=True)
        gen = torch.Generator().manual_seed(3)
        loss = (out * torch.randn(out.shape, generator=gen)).sum() + (alpha * torch.randn(alpha.shape, generator=gen)).sum()
        returned.append((out.detach(), alpha.detach(), torch.autograd.grad(loss, mask)[0]))
        clear_masks(layer)
    for got, expected in zip(returned[1], returned[0]):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_pyg_attention_weights_on_graphs_without_edges_or_vertices():
    no_edges = torch.zeros(2, 0, dtype=torch.long)
    x, _ = data()
    for add_self_loops in (True, False):
        ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2, add_self_loops=add_self_loops)
        check_pyg(ref, ours, x, no_edges)
        check_pyg(ref, ours, torch.randn(0, F_IN), no_edges)
    ref, ours = pair("GATConv", in_channels=(F_IN, 5), out_channels=3, heads=2)
    for num_src, num_dst in [(0, 4), (4, 0)]:
        check_pyg(ref, ours, (torch.randn(num_src, F_IN), torch.randn(num_dst, 5)), no_edges, size=(num_src, num_dst))


def test_pyg_return_attention_weights_false_returns_the_output_only():
    # PyG tests the flag's truth value (its docstring says any value returns the weights; its code does not)
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2)
    x, ei = data()
    with fused_only(pyg_nn.GATConv):
        out = ours(x, ei, return_attention_weights=False)
    torch.testing.assert_close(out, ref(x, ei, return_attention_weights=False), atol=1e-5, rtol=1e-5)


def test_pyg_attention_refusals_are_clear():
    x, ei = data()
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1]), (N, N)).coalesce()
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2)
    with pytest.raises(ValueError, match="Unexpected sparse tensor layout"):
        ref(x, adj_t.to_sparse_csc(), return_attention_weights=True)
    with pytest.raises(ValueError, match=r"COO or CSR layout, got torch.sparse_csc.*to_sparse_csr"):
        ours(x, adj_t.to_sparse_csc(), return_attention_weights=True)
    with pytest.raises(AssertionError):  # PyG's own remove_self_loops: assert edge_attr is None
        ref(x, adj_t, torch.randn(adj_t._nnz(), 2))
    with pytest.raises(ValueError, match=r"torch sparse adjacency together with 'edge_attr'.*add_self_loops=False"):
        ours(x, adj_t, torch.randn(adj_t._nnz(), 2))


def test_pyg_attention_graph_is_converted_once():
    from seastar_layers.graph import graph_cache

    _, ours = pair("GATConv", in_channels=F_IN, out_channels=3, heads=2)
    x, ei = data()
    ours(x, ei)
    before = graph_cache.builds
    ours(x, ei, return_attention_weights=True)
    assert graph_cache.builds == before


# --- DGL ------------------------------------------------------------------------------------------

def dgl_call(layer, args, **kwargs):
    graph, feat, *weight = args
    out, attention = layer(graph, feat, *weight, get_attention=True, **kwargs)
    return out, attention, attention


def check_dgl(ref, ours, *args):
    expected = results(ref, dgl_call, args)
    with fused_only(dgl.nn.GATConv):
        got = results(ours, dgl_call, args)
    assert_same_results(got, expected)
    return got


@pytest.mark.parametrize("options", dgl_tests.GAT_OPTIONS, ids=options_id)
def test_dgl_attention(options):
    ref, ours = dgl_tests.pair("GATConv", in_feats=dgl_tests.F_IN, out_feats=4, **options)
    g = dgl_tests.graph()
    x = dgl_tests.x()
    _, _, attention, _ = check_dgl(ref, ours, g, x)
    assert attention.shape == (g.num_edges(), options["num_heads"], 1)
    check_dgl(ref, ours, g, x, torch.rand(g.num_edges()))  # DGL's attention includes the edge weights


def test_dgl_attention_in_float64():
    ref, ours = dgl_tests.pair("GATConv", in_feats=dgl_tests.F_IN, out_feats=4, num_heads=3)
    ref.double(), ours.double()
    g = dgl_tests.graph()
    check_dgl(ref, ours, g, dgl_tests.x().double(), torch.rand(g.num_edges(), dtype=torch.float64))


@pytest.mark.parametrize("middle", [(3,), (2, 2), (1,)], ids=str)
def test_dgl_attention_on_features_with_middle_axes(middle):
    """(N, *, D) features give (E, *, H, 1) attention."""
    def features(*shape, seed=1):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))

    ref, ours = dgl_tests.pair("GATConv", in_feats=dgl_tests.F_IN, out_feats=3, num_heads=2)
    g = dgl_tests.graph()
    _, _, attention, _ = check_dgl(ref, ours, g, features(dgl_tests.N, *middle, dgl_tests.F_IN))
    assert attention.shape == (g.num_edges(), *middle, 2, 1)
    block = dgl_tests.sampled_blocks()[0]
    check_dgl(ref, ours, block, features(block.num_src_nodes(), *middle, dgl_tests.F_IN))
    ref, ours = dgl_tests.pair("GATConv", in_feats=(dgl_tests.F_IN, 5), out_feats=3, num_heads=2)
    check_dgl(ref, ours, g, (features(dgl_tests.N, *middle, dgl_tests.F_IN), features(dgl_tests.N, *middle, 5, seed=2)))


def test_dgl_attention_on_blocks_and_bipartite_graphs():
    ref, ours = dgl_tests.pair("GATConv", in_feats=dgl_tests.F_IN, out_feats=3, num_heads=2, allow_zero_in_degree=True)
    for block in dgl_tests.sampled_blocks():
        check_dgl(ref, ours, block, dgl_tests.x(block.num_src_nodes()))
        check_dgl(ref, ours, block, dgl_tests.x(block.num_src_nodes()), torch.rand(block.num_edges()))
    ref, ours = dgl_tests.pair("GATConv", in_feats=(dgl_tests.F_IN, 6), out_feats=3, num_heads=2, allow_zero_in_degree=True)
    gen = torch.Generator().manual_seed(2)
    g = dgl.heterograph({("a", "r", "b"): (torch.randint(0, 15, (40,), generator=gen),
                                           torch.randint(0, 9, (40,), generator=gen))}, {"a": 15, "b": 9})
    check_dgl(ref, ours, g, (dgl_tests.x(15), dgl_tests.x(9, 6)))


def test_dgl_attention_on_graphs_without_edges_or_vertices():
    from test_dgl_fidelity import empty_graphs

    ref, ours = dgl_tests.pair("GATConv", in_feats=dgl_tests.F_IN, out_feats=3, num_heads=2, allow_zero_in_degree=True)
    none = torch.tensor([], dtype=torch.long)
    graphs = [("no edges", dgl.graph((none, none), num_nodes=dgl_tests.N)), *empty_graphs()]
    for what, g in graphs:
        _, _, attention, _ = check_dgl(ref, ours, g, (dgl_tests.x(g.num_src_nodes()), dgl_tests.x(g.num_dst_nodes())))
        assert attention.shape == (0, 2, 1), what


def test_dgl_attention_is_after_dropout_as_dgl():
    ref, ours = dgl_tests.pair("GATConv", in_feats=dgl_tests.F_IN, out_feats=4, num_heads=2, feat_drop=0.3, attn_drop=0.4)
    ref.train(), ours.train()
    g, x = dgl_tests.graph(), dgl_tests.x()
    weight = torch.rand(g.num_edges())
    torch.manual_seed(7)
    kept = ours(g, x, weight, get_attention=True)[1] != 0
    assert not kept.all()  # dropped edges are in the returned attention
    torch.manual_seed(7)
    with stock_dropout_replays(kept):
        expected = results(ref, dgl_call, (g, x, weight.clone()))
    torch.manual_seed(7)
    with fused_only(dgl.nn.GATConv):
        got = results(ours, dgl_call, (g, x, weight.clone()))
    assert_same_results(got, expected)
