"""Drop-in fidelity with PyG beyond the common paths: message flow, static graphs (node_dim),
explain mode and message passing hooks, decomposed_layers, graphs without vertices."""
import pytest
import torch
import torch_geometric.nn as pyg_nn
from helpers import random_graph
from test_pyg_layers import F_IN, N, check, data, pair

import seastar_layers as sl

FLOW_CASES = [("GCNConv", dict(in_channels=F_IN, out_channels=6)),
              ("GCNConv", dict(in_channels=F_IN, out_channels=6, improved=True, cached=True)),
              ("GCNConv", dict(in_channels=F_IN, out_channels=6, normalize=False)),
              ("APPNP", dict(K=3, alpha=0.1)),
              ("APPNP", dict(K=2, alpha=0.2, normalize=False)),
              ("GATConv", dict(in_channels=F_IN, out_channels=4, heads=2)),
              ("GATConv", dict(in_channels=F_IN, out_channels=4, heads=2, add_self_loops=False)),
              ("GATConv", dict(in_channels=F_IN, out_channels=4, heads=2, edge_dim=3))]


@pytest.mark.parametrize("name,kwargs", FLOW_CASES, ids=lambda c: str(c))
def test_target_to_source_flow(name, kwargs):
    ref, ours = pair(name, flow="target_to_source", **kwargs)
    x, ei = data()
    extra = torch.randn(ei.shape[1], 3) if "edge_dim" in kwargs else torch.rand(ei.shape[1])
    check(ref, ours, x, ei)
    check(ref, ours, x, ei, extra)
    if "edge_dim" in kwargs:
        return  # self-loop features average the edges into edge_index[1] in either flow, as in PyG
    _, backward = pair(name, flow="target_to_source", **kwargs)  # fresh: a cached layer keeps its first graph
    _, forward = pair(name, **kwargs)  # target_to_source is source_to_target on the reversed edges
    torch.testing.assert_close(backward(x, ei, extra), forward(x, ei.flip(0), extra), atol=1e-5, rtol=1e-5)


def test_target_to_source_bipartite_gat_reverses_the_edges():
    # PyG's rendered propagate reads a pair of features as (senders, receivers) in either flow
    _, ours = pair("GATConv", in_channels=(F_IN, 7), out_channels=4, heads=2, add_self_loops=False,
                   flow="target_to_source")
    _, forward = pair("GATConv", in_channels=(F_IN, 7), out_channels=4, heads=2, add_self_loops=False)
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(17, F_IN, generator=gen), torch.randn(9, 7, generator=gen))
    ei = random_graph(17, 9, 50, seed=4)
    torch.testing.assert_close(ours(x, ei.flip(0), size=(17, 9)), forward(x, ei, size=(17, 9)))


@pytest.mark.parametrize("name,kwargs", FLOW_CASES[::3], ids=lambda c: str(c))
def test_target_to_source_refuses_sparse_adjacencies_as_pyg(name, kwargs):
    ref, ours = pair(name, flow="target_to_source", **kwargs)
    x, ei = data()
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1]), (N, N)).coalesce()
    for layer in (ref, ours):
        with pytest.raises(ValueError, match='Flow direction "target_to_source" is invalid'):
            layer(x, adj_t)


@pytest.mark.parametrize("name,kwargs", [("GCNConv", dict(in_channels=F_IN, out_channels=6)),
                                         ("GCNConv", dict(in_channels=F_IN, out_channels=6, normalize=False)),
                                         ("APPNP", dict(K=3, alpha=0.1)),
                                         ("APPNP", dict(K=2, alpha=0.1, flow="target_to_source"))], ids=str)
def test_static_graph_features(name, kwargs):
    """One graph, a batch of feature sets: (B, N, F) with PyG's default node_dim=-2."""
    ref, ours = pair(name, **kwargs)
    _, ei = data()
    x = torch.randn(3, N, F_IN, generator=torch.Generator().manual_seed(2))
    check(ref, ours, x, ei)
    check(ref, ours, x, ei, torch.rand(ei.shape[1]))


@pytest.mark.parametrize("name,kwargs", [("GCNConv", dict(in_channels=F_IN, out_channels=6, normalize=False)),
                                         ("APPNP", dict(K=2, alpha=0.1, normalize=False))], ids=str)
@pytest.mark.parametrize("node_dim", [0, 1])
def test_node_dim_is_honoured(name, kwargs, node_dim):
    ref, ours = pair(name, node_dim=node_dim, **kwargs)
    _, ei = data()
    shape = [3, 3]
    shape[node_dim] = N
    check(ref, ours, torch.randn(*shape, F_IN), ei)  # PyG's message() needs 2-d x_j for edge weights


def test_gat_refuses_static_graphs_as_pyg():
    ref, ours = pair("GATConv", in_channels=F_IN, out_channels=4, heads=2)
    _, ei = data()
    x = torch.randn(3, N, F_IN)
    with pytest.raises(AssertionError, match="Static graphs not supported"):
        ref(x, ei)
    with pytest.raises(ValueError, match=r"does not support static graphs"):
        ours(x, ei)
    with pytest.raises(ValueError, match=r"does not support static graphs"):
        ours((x, None), ei)


def test_vertex_axis_outside_the_features_is_refused():
    _, ours = pair("APPNP", K=1, alpha=0.1, node_dim=1)
    with pytest.raises(ValueError, match=r"node_dim=1.*shape \(29,\)"):
        ours(torch.randn(N), data()[1])
