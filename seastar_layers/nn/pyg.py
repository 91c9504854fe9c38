"""Drop-in replacements for torch_geometric.nn.GATConv, GCNConv and APPNP.

Each subclasses PyG's own layer, so the constructor, parameter names, reset_parameters(),
__repr__ and state_dict are PyG's; only forward() changes: the linear transforms stay in torch,
and everything that touches edges runs as one fused vertex program.
"""
from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.aggr import SumAggregation
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import torch_sparse
from torch_geometric.utils import add_remaining_self_loops, add_self_loops, is_torch_sparse_tensor, remove_self_loops
from torch_geometric.utils.sparse import set_sparse_value

from ..graph import Graph, as_graph
from . import programs

_warned: set[tuple[str, str]] = set()


def _warn_once(layer: str, option: str) -> None:
    if (layer, option) not in _warned:
        _warned.add((layer, option))
        warnings.warn(f"seastar_layers.{layer}: {option} is not fused; running PyG's own {layer} for it",
                      RuntimeWarning, stacklevel=3)


# The hooks PyG's propagate() and edge_updater() call; our forward calls neither.
_MESSAGE_PASSING_HOOKS = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
                          "_message_forward_hooks", "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
                          "_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks",
                          "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks")


def _unfused_reason(layer: MessagePassing) -> str | None:
    """What, if anything, only PyG's own message passing can honour: an aggregation other than a
    sum, registered hooks that see each message, a replaced explain_message() that may do anything
    to one."""
    if type(layer.aggr_module) is not SumAggregation:
        return f"aggr={layer.aggr!r}"
    if any(getattr(layer, name) for name in _MESSAGE_PASSING_HOOKS):
        return "a registered message passing hook"
    if layer.explain and getattr(layer.explain_message, "__func__", None) is not MessagePassing.explain_message:
        return "a custom explain_message"
    return None


def _explain_factor(layer: MessagePassing, graph: Graph, message_dims: int) -> Tensor | None:
    """In explain mode PyG multiplies every message by its edge's mask (PyG's explain_message:
    sigmoid, self-loops the layer added at 1). The same factor, one per propagated edge in edge
    order, is fused as an edge weight; gradients reach the mask through it."""
    if not layer.explain:
        return None
    shape = [1] * message_dims
    shape[layer.node_dim] = graph.num_edges
    ones = torch.ones(shape, dtype=layer._edge_mask.dtype if layer._edge_mask is not None else torch.float32,
                      device=graph.device)
    return layer.explain_message(ones, graph.num_dst).reshape(graph.num_edges)


def _edge_list(edge_index, edge_weight=None):
    """(edge_index tensor, edge values, size) from a Tensor, EdgeIndex, torch sparse adj_t or SparseTensor."""
    if isinstance(edge_index, Tensor) and (edge_index.is_sparse or edge_index.layout != torch.strided):
        coo = edge_index.to_sparse_coo().coalesce()
        row, col = coo.indices()
        return torch.stack([col, row]), coo.values(), tuple(coo.shape[::-1])
    if type(edge_index).__name__ == "SparseTensor":
        row, col, value = edge_index.coo()
        return torch.stack([col, row]), value, (edge_index.size(1), edge_index.size(0))
    plain = edge_index.as_tensor() if hasattr(edge_index, "as_tensor") else edge_index
    return plain, edge_weight, None


def _check_edge_index(edge_index: Tensor) -> None:
    if not isinstance(edge_index, Tensor):
        raise ValueError(f"'edge_index' must be a torch.Tensor of shape (2, E), an EdgeIndex, a torch.sparse "
                         f"adjacency or a SparseTensor, got a {type(edge_index).__name__}; convert it with "
                         "torch.tensor(edge_index)")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"'edge_index' must have shape (2, E), got {tuple(edge_index.shape)}")


def _is_sparse(adj) -> bool:
    return (isinstance(adj, Tensor) and (adj.is_sparse or adj.layout != torch.strided)) or \
        type(adj).__name__ == "SparseTensor"


def _check_flow(layer: MessagePassing, edge_index) -> None:
    if layer.flow == "target_to_source" and _is_sparse(edge_index):  # PyG's own refusal, word for word
        raise ValueError('Flow direction "target_to_source" is invalid for message propagation via '
                         '`torch_sparse.SparseTensor` or `torch.sparse.Tensor`. If you really want to make use of a '
                         'reverse message passing flow, pass in the transposed sparse tensor to the message passing '
                         'module, e.g., `adj_t.t()`.')


def _message_graph(layer: MessagePassing, source, size: tuple[int, int], key: tuple = (), process=None) -> Graph:
    """The graph messages travel along, cached per user graph object: the edges of `process(source)`
    (self-loops, normalisation; a sparse adjacency stays one, so its edges keep PyG's order),
    reversed for flow="target_to_source". size is (senders, receivers)."""
    flip = layer.flow == "target_to_source"
    if process is None and not flip and not _is_sparse(source):
        return as_graph(source, size)  # a sorted EdgeIndex brings its own CSR/CSC

    def build(plain):
        edges = _edge_list(process(plain) if process is not None else plain)[0]
        return Graph.from_edge_index(edges.flip(0) if flip else edges, size)

    return as_graph(source, None, (layer.flow, size) + key, build)


class _StockTemplates:
    """PyG renders propagate()/edge_updater() from the calls it finds in forward()'s source and
    installs them on the class; ours makes no such calls, so our classes render nothing and
    inherit the stock layer's. The unfused path then runs exactly the stock layer's code (the
    rendered and the generic propagate read a pair of features differently under
    flow="target_to_source"), whether or not a stock layer was built first: the first of ours
    builds a small one, with the random state kept as it was so parameter init is unchanged."""

    _stock_example: tuple = ()  # constructor arguments of a small stock layer

    def _set_jittable_templates(self, raise_on_error: bool = False) -> None:
        stock = type(self).__mro__[type(self).__mro__.index(_StockTemplates) + 1]
        if "_jinja_propagate" not in vars(stock):
            with torch.random.fork_rng(devices=[]):
                stock(*self._stock_example)


def _check_static(layer: str, x: Tensor, in_channels) -> None:
    if x.dim() != 2:  # PyG asserts the same ("Static graphs not supported in 'GATConv'")
        raise ValueError(f"{layer} expects node features of shape (N, {in_channels}), got {tuple(x.shape)}; "
                         "like PyG's, it does not support static graphs (a batch axis before the vertex axis)")


class GATConv(_StockTemplates, pyg_nn.GATConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GATConv`: same arguments, parameters and outputs; "
               "attention logits, softmax, dropout and aggregation run in one sweep over the edges without "
               "materialising the E x heads x channels message tensor.\n\n" + (pyg_nn.GATConv.__doc__ or ""))
    _stock_example = (1, 1)

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        unfused = _unfused_reason(self)
        if unfused is not None:
            _warn_once("GATConv", unfused)
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        if type(edge_index).__name__ == "SparseTensor" and self.add_self_loops and self.edge_dim is not None:
            return super().forward(x, edge_index, edge_attr, size)  # PyG raises its own NotImplementedError
        if is_torch_sparse_tensor(edge_index) and self.add_self_loops and edge_attr is not None:
            raise ValueError("GATConv cannot add self-loops to a torch sparse adjacency together with 'edge_attr' "
                             "(PyG's GATConv refuses it too: its remove_self_loops asserts edge_attr is None); pass "
                             "an edge_index tensor, or add the self-loops and their features yourself and construct "
                             "the layer with add_self_loops=False")
        if return_attention_weights and is_torch_sparse_tensor(edge_index) and \
                edge_index.layout not in (torch.sparse_coo, torch.sparse_csr):
            raise ValueError(f"GATConv returns attention weights on a torch sparse adjacency in COO or CSR layout, got "
                             f"{edge_index.layout} (PyG's GATConv refuses it too); pass adj_t.to_sparse_csr()")
        programs.check_features("GATConv", x)
        H, C = self.heads, self.out_channels
        res = None
        # (senders, receivers) features, whichever the flow, as PyG's rendered propagate() reads them
        if isinstance(x, Tensor):
            _check_static("GATConv", x, self.in_channels)
            if self.res is not None:
                res = self.res(x)
            if self.lin is not None:
                x_src = x_dst = self.lin(x).view(-1, H, C)
            else:
                x_src, x_dst = self.lin_src(x).view(-1, H, C), self.lin_dst(x).view(-1, H, C)
        else:
            x_src, x_dst = x
            _check_static("GATConv", x_src, self.in_channels)
            if x_dst is not None and self.res is not None:
                res = self.res(x_dst)
            lin_src = self.lin if self.lin is not None else self.lin_src
            lin_dst = self.lin if self.lin is not None else self.lin_dst
            x_src = lin_src(x_src).view(-1, H, C)
            x_dst = lin_dst(x_dst).view(-1, H, C) if x_dst is not None else None

        a_src = (x_src * self.att_src).sum(-1, keepdim=True)
        a_dst = (x_dst * self.att_dst).sum(-1, keepdim=True) if x_dst is not None else None
        _check_flow(self, edge_index)
        plain, _, sparse_size = _edge_list(edge_index)  # as PyG: edge features come from edge_attr
        _check_edge_index(plain)
        size = size if size is not None else sparse_size
        num_src = x_src.size(0)
        num_dst = size[1] if size is not None else (x_dst.size(0) if x_dst is not None else num_src)
        # PyG adds self-loops to the vertices that are both sources and destinations
        loops = min(size) if size is not None else min(num_src, x_dst.size(0) if x_dst is not None else num_src)
        graph, edge_attr = self._graph(edge_index, plain, edge_attr, (num_src, num_dst), loops)

        feats = {"a_src": a_src, "x": x_src}
        if a_dst is not None:
            feats["a_dst"] = a_dst
        if edge_attr is not None and self.lin_edge is not None:
            edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            e = self.lin_edge(edge_attr).view(-1, H, C)
            feats["a_edge"] = (e * self.att_edge).sum(-1, keepdim=True)
        # PyG drops attention coefficients in training (dropout=1 drops them all): drawn in the kernel
        keep = x_src.new_tensor(1 - self.dropout) if self.training and self.dropout > 0 else None
        explained = _explain_factor(self, graph, 3)
        if explained is not None:
            explained = explained.to(x_src.dtype).view(-1, 1, 1).expand(graph.num_edges, H, 1)
        slope = x_src.new_tensor(self.negative_slope)

        def sweep(mask, keep, with_attention=False):
            given = feats if mask is None else dict(feats, mask=mask.contiguous())
            # one dtype for the kernel: under autocast the scores come out float32 beside half features
            given = {name: t.to(x_src.dtype) for name, t in given.items()}
            prog = programs.gat_attention("a_dst" in given, "a_edge" in given, "mask" in given, slope, with_attention,
                                          keep)
            return prog(graph, **given)

        if return_attention_weights and explained is not None and keep is not None:
            # PyG returns the attention after dropout, and its explain mask scales the messages only:
            # two sweeps that must drop the same coefficients share one stored mask here (explaining
            # is a small-graph affair)
            dropped = F.dropout(x_src.new_ones(graph.num_edges, H, 1), p=self.dropout)
            _, alpha = sweep(dropped, None, with_attention=True)
            out = sweep(dropped * explained, None)
        elif return_attention_weights:
            out, alpha = sweep(None, keep, with_attention=True)
            if explained is not None:
                out = sweep(explained, None)
        else:
            out = sweep(explained, keep)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            edges = _gat_self_loops(edge_index, loops) if self.add_self_loops else edge_index
            return out, _attention_weights(edges, alpha.view(-1, H))
        return out

    def _graph(self, edge_index, plain, edge_attr, size: tuple[int, int], loops: int):
        if not self.add_self_loops:
            return _message_graph(self, edge_index, size), edge_attr
        graph = _message_graph(self, edge_index, size, ("gat-self-loops", loops),
                               lambda source: _gat_self_loops(source, loops))
        if edge_attr is not None:  # edge features follow the same removal and fill, as in PyG
            ei, edge_attr = remove_self_loops(plain, edge_attr)
            _, edge_attr = add_self_loops(ei, edge_attr, fill_value=self.fill_value, num_nodes=loops)
        return graph, edge_attr


def _gat_self_loops(edge_index, num_nodes: int):
    """The adjacency GATConv propagates over, made as PyG makes it from any kind of adjacency, so its
    edges come in PyG's order: self-loops removed, then one added per vertex (set on the diagonal
    of a SparseTensor)."""
    if type(edge_index).__name__ == "SparseTensor":
        return torch_sparse.set_diag(edge_index)
    edge_index, _ = remove_self_loops(edge_index)
    return add_self_loops(edge_index, num_nodes=num_nodes)[0]


def _attention_weights(edges, alpha: Tensor):
    """(E, heads) attention on the propagated edges, in the form PyG's GATConv returns it for that
    kind of adjacency."""
    if type(edges).__name__ == "SparseTensor":
        return edges.set_value(alpha, layout="coo")
    if is_torch_sparse_tensor(edges):  # alpha is in row-major order, as _edge_list reads a sparse adjacency
        return set_sparse_value(edges.coalesce() if edges.layout == torch.sparse_coo else edges, alpha), alpha
    return edges, alpha


def _num_vertices(layer: MessagePassing, name: str, x: Tensor) -> int:
    if not -x.dim() <= layer.node_dim < x.dim():
        raise ValueError(f"{name} reads vertices along node_dim={layer.node_dim}, but the node features have shape "
                         f"{tuple(x.shape)}; pass (N, F) features, or (B, N, F) with node_dim=-2")
    return x.size(layer.node_dim)


def _vertex_rows(layer: MessagePassing, x: Tensor):
    """x as one row per vertex: PyG's node_dim axis first and every other axis folded into the
    features (a batch of feature sets over one static graph is one wider feature set), and the
    function that puts a result of the same layout back. A no-op for (N, F) features."""
    axis = layer.node_dim % x.dim()
    moved = x.movedim(axis, 0)
    features = moved.shape[1:]
    return moved.reshape(moved.size(0), math.prod(features)), \
        lambda out: out.reshape(out.size(0), *features).movedim(0, axis)


class _Propagation(NamedTuple):
    """The graph messages travel along and how they are weighted: per-edge `weight`s (None: 1), or,
    where gcn_norm's weights follow from degrees alone, `dinv` = deg^-1/2 per vertex, each edge
    u -> v weighing dinv[u] * dinv[v] (the layers scale the vertices, and no per-edge weight exists)."""
    graph: Graph
    weight: Tensor | None = None
    dinv: Tensor | None = None

    def edge_weights(self) -> Tensor | None:
        """The per-edge weights, also where they follow from degrees (made once per graph then)."""
        if self.dinv is None:
            return self.weight
        graph, dinv = self.graph, self.dinv

        def make():
            rows = torch.repeat_interleave(torch.arange(graph.num_dst, device=graph.device),
                                           graph.in_indptr[1:] - graph.in_indptr[:-1])
            weight = torch.empty(graph.num_edges, dtype=dinv.dtype, device=dinv.device)
            weight[graph.in_eid] = dinv[graph.in_src] * dinv[rows]
            return weight

        return graph.derived(("gcn_weight", dinv.dtype), make)


def _propagation(layer, name: str, x: Tensor, edge_index, edge_weight, improved: bool) -> _Propagation:
    """The graph messages travel along and its weights: gcn_norm's when the layer normalizes, with
    PyG's cached=True semantics, and PyG's flow. Without edge weights (and improved=False) gcn_norm
    depends on degrees only: the graph with its self-loops and the degrees are then made once per
    graph object, and no call does edge-sized work for them."""
    if layer.normalize and layer.cached and layer._cached_edge_index is not None:
        return layer._cached_edge_index
    n = _num_vertices(layer, name, x)
    _check_flow(layer, edge_index)
    if layer.normalize and edge_weight is None and not improved and not _is_sparse(edge_index):
        _check_edge_index(_edge_list(edge_index)[0])
        loops = (lambda plain: add_remaining_self_loops(plain, num_nodes=n)[0]) if layer.add_self_loops else None
        graph = _message_graph(layer, edge_index, (n, n), ("gcn", layer.add_self_loops), loops)

        def inverse_sqrt_degree():  # as gcn_norm: degrees in the features' dtype, 0 for isolated vertices
            dinv = graph.in_degree(x.dtype).pow(-0.5)
            return dinv.masked_fill(dinv == float("inf"), 0)

        result = _Propagation(graph, dinv=graph.derived(("gcn_dinv", x.dtype), inverse_sqrt_degree))
    elif layer.normalize and _is_sparse(edge_index):
        # PyG normalises a sparse adjacency in its own way (self-loops added, not "remaining")
        normalized = gcn_norm(edge_index, None, n, improved, layer.add_self_loops, layer.flow, x.dtype)
        normalized = normalized[0] if isinstance(normalized, tuple) else normalized
        ei, weight, _ = _edge_list(normalized)
        result = _Propagation(_message_graph(layer, edge_index, (n, n), ("gcn", layer.add_self_loops),
                                             lambda _: ei), weight)
    else:
        ei, weight, _ = _edge_list(edge_index, edge_weight)
        _check_edge_index(ei)
        if layer.normalize:
            ei, weight = gcn_norm(ei, weight, n, improved, layer.add_self_loops, layer.flow, x.dtype)
            result = _Propagation(_message_graph(layer, edge_index, (n, n), ("gcn", layer.add_self_loops),
                                                 lambda _: ei), weight)
        else:
            result = _Propagation(_message_graph(layer, edge_index, (n, n)), weight)
    if layer.normalize and layer.cached:
        layer._cached_edge_index = result
    return result


def _edge_weights(layer, propagation: _Propagation, message_dims: int) -> Tensor | None:
    """The per-edge multiplier of a weighted sum: the edge weights, times the explanation mask in explain mode."""
    explained = _explain_factor(layer, propagation.graph, message_dims)
    weight = propagation.edge_weights()
    if explained is None:
        return weight
    return explained if weight is None else weight * explained


class GCNConv(_StockTemplates, pyg_nn.GCNConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GCNConv`: normalisation as PyG's gcn_norm, then one "
               "weighted-sum sweep.\n\n" + (pyg_nn.GCNConv.__doc__ or ""))
    _stock_example = (1, 1)

    def forward(self, x: Tensor, edge_index, edge_weight=None) -> Tensor:
        if isinstance(x, (tuple, list)):
            raise ValueError(f"'{self.__class__.__name__}' received a tuple of node features as input while this "
                             "layer does not support bipartite message passing. Please try other layers such as "
                             "'SAGEConv' or 'GraphConv' instead")
        unfused = _unfused_reason(self)
        if unfused is not None:
            _warn_once("GCNConv", unfused)
            return super().forward(x, edge_index, edge_weight)
        programs.check_features("GCNConv", x)
        propagation = _propagation(self, "GCNConv", x, edge_index, edge_weight, self.improved)
        x = self.lin(x)
        rows, restore = _vertex_rows(self, x)
        dinv = propagation.dinv
        if dinv is not None and not self.explain:  # each edge u -> v weighs dinv[u] * dinv[v]
            dinv = dinv.to(rows.dtype).unsqueeze(1)
            out = programs.weighted_sum(False)(propagation.graph, x=rows * dinv) * dinv
        else:
            feats = {"x": rows}
            weight = _edge_weights(self, propagation, x.dim())
            if weight is not None:
                feats["w"] = weight.to(x.dtype)
            out = programs.weighted_sum("w" in feats)(propagation.graph, **feats)
        out = restore(out)
        if self.bias is not None:
            out = out + self.bias
        return out


class APPNP(_StockTemplates, pyg_nn.APPNP):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.APPNP`: each of the K steps is one sweep that also "
               "mixes in the teleport term.\n\n" + (pyg_nn.APPNP.__doc__ or ""))
    _stock_example = (1, 0.0)

    def forward(self, x: Tensor, edge_index, edge_weight=None) -> Tensor:
        unfused = _unfused_reason(self)
        if unfused is not None:
            _warn_once("APPNP", unfused)
            return super().forward(x, edge_index, edge_weight)
        programs.check_features("APPNP", x)
        propagation = _propagation(self, "APPNP", x, edge_index, edge_weight, False)
        graph = propagation.graph
        explained = _explain_factor(self, graph, x.dim())
        rows, restore = _vertex_rows(self, x)
        alpha = x.new_tensor(self.alpha)
        dropping = self.dropout > 0 and self.training
        dinv = propagation.dinv
        if dinv is not None and not dropping and explained is None:
            # each edge u -> v weighs dinv[u] * dinv[v]: the vertices are scaled, no edge carries a weight
            dinv = dinv.to(rows.dtype).unsqueeze(1)
            out = rows
            for _ in range(self.K):
                out = (1 - alpha) * programs.weighted_sum(False)(graph, x=out * dinv) * dinv + alpha * rows
            return restore(out)
        weight = propagation.edge_weights()
        h = out = rows
        for _ in range(self.K):
            w = weight
            if dropping:
                w = F.dropout(rows.new_ones(graph.num_edges) if w is None else w, p=self.dropout)
            if explained is not None:
                w = explained if w is None else w * explained
            feats = {"x": out, "h": h}
            if w is not None:
                feats["w"] = w.to(x.dtype)
            out = programs.appnp_step("w" in feats, alpha)(graph, **feats)
        return restore(out)
