"""Drop-in fidelity with DGL beyond the common paths: (N, *, D) features, graphs and blocks without
vertices, training-mode dropout drawn as DGL draws it."""
import warnings

import pytest
import torch
from helpers import assert_same_signatures, kept_share_is_plausible, stock_dropout_replays
from test_dgl_layers import F_IN, N, check, graph, pair, sampled_blocks, x

from seastar_layers.compat import import_dgl

dgl = import_dgl()
import seastar_layers.dgl as sd  # noqa: E402


def features(*middle, n=N, width=F_IN, seed=1):
    return torch.randn(n, *middle, width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("middle", [(3,), (2, 2), (1,)], ids=str)
@pytest.mark.parametrize("options", [dict(num_heads=2), dict(num_heads=1, residual=True),
                                     dict(num_heads=2, residual=True, bias=False)], ids=str)
def test_gat_on_features_with_middle_axes_is_fused(middle, options):
    ref, ours = pair("GATConv", in_feats=F_IN, out_feats=3, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to DGL's layer
        check(ref, ours, graph(), features(*middle))
        block = sampled_blocks()[0]
        check(ref, ours, block, features(*middle, n=block.num_src_nodes()))
    ref, ours = pair("GATConv", in_feats=(F_IN, 5), out_feats=3, **options)
    check(ref, ours, graph(), (features(*middle), features(*middle, width=5, seed=2)))


def test_gat_edge_weights_on_features_with_middle_axes_weight_each_edge():
    # DGL's own layer multiplies (E, *, H, 1) attention by an (E, H, 1) weight, which broadcasts
    # against * instead of E; ours weighs each edge, so the result is the layer on every slice
    _, ours = pair("GATConv", in_feats=F_IN, out_feats=3, num_heads=2)
    g, feat = graph(), features(3)
    weight = torch.rand(g.num_edges())
    out = ours(g, feat, edge_weight=weight)
    for i in range(3):
        torch.testing.assert_close(out[:, i], ours(g, feat[:, i], edge_weight=weight))


@pytest.mark.parametrize("in_out", [(5, 1), (5, 2), (2, 5)], ids=str)
def test_graphconv_on_features_with_middle_axes_in_either_order(in_out):
    # DGL's own suite runs (N, 5, 5) and (N, 5) features through one process; the layers fold
    # the middle axes into channels, so every case runs on the prebuilt (N, F) kernels
    in_feats, out_feats = in_out
    for shape in [(N, in_feats, in_feats), (N, in_feats), (N, 2, in_feats)]:
        ref, ours = pair("GraphConv", in_feats=in_feats, out_feats=out_feats)
        feat = torch.randn(*shape)
        check(ref, ours, graph(), feat)
        check(ref, ours, graph(), feat, edge_weight=torch.rand(graph().num_edges()))


def test_appnp_on_features_with_middle_axes():
    ref, ours = pair("APPNPConv", k=3, alpha=0.1)
    check(ref, ours, graph(), features(2, 2))
    check(ref, ours, graph(), features(3), edge_weight=torch.rand(graph().num_edges()))


def test_appnp_refuses_blocks_clearly():
    _, ours = pair("APPNPConv", k=2, alpha=0.1)
    block = sampled_blocks()[0]
    with pytest.raises(dgl.DGLError, match=r"APPNPConv propagates K steps over one set of vertices.*"
                                           rf"{block.num_src_nodes()} source and {block.num_dst_nodes()}"):
        ours(block, x(block.num_src_nodes()))


def empty_graphs():
    none = torch.tensor([], dtype=torch.long)
    yield "graph without vertices", dgl.graph((none, none), num_nodes=0)
    for num_src, num_dst in [(0, 0), (4, 0)]:
        yield f"block {num_src}->{num_dst}", dgl.create_block((none, none), num_src_nodes=num_src,
                                                              num_dst_nodes=num_dst)
    yield "bipartite 0->3", dgl.heterograph({("a", "r", "b"): (none, none)}, {"a": 0, "b": 3})


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_feats=F_IN, out_feats=3, num_heads=2)),
                                         ("GraphConv", dict(in_feats=F_IN, out_feats=3))])
def test_graphs_and_blocks_without_vertices(name, kwargs):
    """An empty block from a sampler (DGL's regression test for its issue 7894) and friends."""
    ref, ours = pair(name, allow_zero_in_degree=True, **kwargs)
    for what, g in empty_graphs():
        pair_features = (x(g.num_src_nodes()), x(g.num_dst_nodes()))
        if g.is_block or g.num_src_nodes() == g.num_dst_nodes():
            check(ref, ours, g, pair_features[0])
        check(ref, ours, g, pair_features)
        assert ours(g, pair_features).shape[0] == g.num_dst_nodes(), what


def test_appnp_on_a_graph_without_vertices():
    ref, ours = pair("APPNPConv", k=2, alpha=0.1)
    check(ref, ours, next(empty_graphs())[1], x(0))


def test_appnp_training_mode_draws_edge_dropout_as_dgl():
    """Same seed, same masks: training-mode outputs are DGL's, not just distributed like them."""
    ref, ours = pair("APPNPConv", k=3, alpha=0.1, edge_drop=0.4)
    ref.train()
    ours.train()
    outs = []
    for layer in (ref, ours):
        torch.manual_seed(7)
        outs.append(layer(graph(), x()))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)


def test_gat_training_drops_attention_as_dgl():
    """Attention dropout is drawn in the kernel, with no edges x heads mask: reproducible under
    torch.manual_seed, keeping its share, and, given the coefficients it dropped (DGL's attn_drop
    replays them; feature dropout draws as DGL's), DGL's output and gradients."""
    ref, ours = pair("GATConv", in_feats=F_IN, out_feats=3, num_heads=2, feat_drop=0.3, attn_drop=0.4)
    ref.train()
    ours.train()
    g, feat = graph(), x()
    torch.manual_seed(7)
    out, attention = ours(g, feat, get_attention=True)
    torch.manual_seed(7)
    assert torch.equal(ours(g, feat), out)
    kept = attention != 0
    assert kept_share_is_plausible(kept, 0.6)
    with stock_dropout_replays(kept):
        check(ref, ours, g, feat, seed=7)


@pytest.mark.parametrize("name", ["GATConv", "GraphConv", "APPNPConv"])
def test_signatures_are_dgls(name):
    assert_same_signatures(getattr(dgl.nn, name), getattr(sd, name))


# What DGL's own tests of these layers check, in our terms (tests/python/pytorch/nn/test_nn.py)

@pytest.mark.parametrize("norm", ["none", "both", "right"])
def test_graphconv_on_bipartite_feature_pairs(norm):
    ref, ours = pair("GraphConv", in_feats=F_IN, out_feats=2, norm=norm, allow_zero_in_degree=True)
    gen = torch.Generator().manual_seed(2)
    g = dgl.heterograph({("a", "r", "b"): (torch.randint(0, 15, (40,), generator=gen),
                                           torch.randint(0, 9, (40,), generator=gen))}, {"a": 15, "b": 9})
    check(ref, ours, g, (x(15), x(9, 2)))
    check(ref, ours, g, (x(15), x(9, 2)), edge_weight=torch.rand(40) + 0.1)


def test_layers_inside_hetero_graph_conv():
    g = dgl.heterograph({("user", "follows", "user"): ([0, 0, 2, 1], [1, 2, 1, 3]),
                         ("user", "plays", "game"): ([0, 0, 0, 1, 2], [0, 2, 3, 0, 2]),
                         ("store", "sells", "game"): ([0, 0, 1, 1], [0, 3, 1, 2])})
    inputs = {"user": torch.randn(4, 2), "game": torch.randn(4, 4), "store": torch.randn(2, 3)}
    outs = []
    for lib in (dgl.nn, sd):
        torch.manual_seed(0)
        conv = dgl.nn.HeteroGraphConv({"follows": lib.GATConv(2, 3, 2, allow_zero_in_degree=True),
                                       "plays": lib.GraphConv(2, 4, allow_zero_in_degree=True),
                                       "sells": lib.GraphConv(3, 4, allow_zero_in_degree=True)}, "sum")
        outs.append(conv(g, inputs))
    assert outs[0].keys() == outs[1].keys() == {"user", "game"}
    for key in outs[0]:
        torch.testing.assert_close(outs[1][key], outs[0][key], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,kwargs", [("GATConv", dict(in_feats=F_IN, out_feats=3, num_heads=2)),
                                         ("GraphConv", dict(in_feats=F_IN, out_feats=3)),
                                         ("APPNPConv", dict(k=2, alpha=0.1))])
def test_whole_layers_pickle(name, kwargs):
    import io

    _, ours = pair(name, **kwargs)
    buffer = io.BytesIO()
    torch.save(ours, buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.load(buffer, weights_only=False)(graph(), x()), ours(graph(), x()))
