"""Drop-in replacements for torch_geometric.nn.GATConv, GCNConv and APPNP.

Each subclasses PyG's own layer, so the constructor, parameter names, reset_parameters(),
__repr__ and state_dict are PyG's; only forward() changes: the linear transforms stay in torch,
and everything that touches edges runs as one fused vertex program.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops

from ..graph import Graph, as_graph
from . import programs

_warned: set[tuple[str, str]] = set()


def _warn_once(layer: str, option: str) -> None:
    if (layer, option) not in _warned:
        _warned.add((layer, option))
        warnings.warn(f"seastar_layers.{layer}: {option} is not fused; running PyG's own {layer} for it",
                      RuntimeWarning, stacklevel=3)


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


class _NoTemplates:
    """PyG renders propagate()/edge_updater() from the calls it finds in forward()'s source; ours
    makes none, so the fallback path uses MessagePassing's generic implementations instead."""

    def _set_jittable_templates(self, raise_on_error: bool = False) -> None:
        return None


class GATConv(_NoTemplates, pyg_nn.GATConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GATConv`: same arguments, parameters and outputs; "
               "attention logits, softmax, dropout and aggregation run in one sweep over the edges without "
               "materialising the E x heads x channels message tensor.\n\n" + (pyg_nn.GATConv.__doc__ or ""))

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        if return_attention_weights is not None:
            _warn_once("GATConv", "return_attention_weights")
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        if type(edge_index).__name__ == "SparseTensor" and self.add_self_loops and self.edge_dim is not None:
            return super().forward(x, edge_index, edge_attr, size)  # PyG raises its own NotImplementedError
        programs.check_features("GATConv", x)
        H, C = self.heads, self.out_channels
        res = None
        if isinstance(x, Tensor):
            if x.dim() != 2:
                raise ValueError(f"GATConv expects node features of shape (N, {self.in_channels}), got {tuple(x.shape)}")
            if self.res is not None:
                res = self.res(x)
            if self.lin is not None:
                x_src = x_dst = self.lin(x).view(-1, H, C)
            else:
                x_src, x_dst = self.lin_src(x).view(-1, H, C), self.lin_dst(x).view(-1, H, C)
        else:
            x_src, x_dst = x
            if x_dst is not None and self.res is not None:
                res = self.res(x_dst)
            lin_src = self.lin if self.lin is not None else self.lin_src
            lin_dst = self.lin if self.lin is not None else self.lin_dst
            x_src = lin_src(x_src).view(-1, H, C)
            x_dst = lin_dst(x_dst).view(-1, H, C) if x_dst is not None else None

        a_src = (x_src * self.att_src).sum(-1, keepdim=True)
        a_dst = (x_dst * self.att_dst).sum(-1, keepdim=True) if x_dst is not None else None
        edge_index, _, sparse_size = _edge_list(edge_index)  # as PyG: edge features come from edge_attr
        _check_edge_index(edge_index)
        size = size if size is not None else sparse_size
        num_src = x_src.size(0)
        num_dst = size[1] if size is not None else (x_dst.size(0) if x_dst is not None else num_src)
        graph, edge_attr = self._graph(edge_index, edge_attr, num_src, num_dst, size, x_dst)

        feats = {"a_src": a_src, "x": x_src}
        if a_dst is not None:
            feats["a_dst"] = a_dst
        if edge_attr is not None and self.lin_edge is not None:
            edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            e = self.lin_edge(edge_attr).view(-1, H, C)
            feats["a_edge"] = (e * self.att_edge).sum(-1, keepdim=True)
        if self.training and self.dropout > 0:  # as PyG drops attention coefficients (dropout=1 drops them all)
            feats["mask"] = F.dropout(x_src.new_ones(graph.num_edges, H, 1), p=self.dropout)
        slope = x_src.new_tensor(self.negative_slope)
        prog = programs.gat_attention("a_dst" in feats, "a_edge" in feats, "mask" in feats, slope)
        out = prog(graph, **feats)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        if self.bias is not None:
            out = out + self.bias
        return out

    def _graph(self, edge_index, edge_attr, num_src, num_dst, size, x_dst):
        if not self.add_self_loops:
            return as_graph(edge_index, (num_src, num_dst)), edge_attr
        loops = num_src if x_dst is None else min(num_src, x_dst.size(0))
        loops = min(size) if size is not None else loops

        def build(ei):
            ei, _ = remove_self_loops(ei)
            ei, _ = add_self_loops(ei, num_nodes=loops)
            return Graph.from_edge_index(ei, (num_src, num_dst))

        graph = as_graph(edge_index, None, ("gat-self-loops", loops, num_src, num_dst), build)
        if edge_attr is not None:  # edge features follow the same removal and fill, as in PyG
            ei, edge_attr = remove_self_loops(edge_index, edge_attr)
            _, edge_attr = add_self_loops(ei, edge_attr, fill_value=self.fill_value, num_nodes=loops)
        return graph, edge_attr


def _is_sparse(adj) -> bool:
    return (isinstance(adj, Tensor) and (adj.is_sparse or adj.layout != torch.strided)) or \
        type(adj).__name__ == "SparseTensor"


def _normalized(layer, x: Tensor, edge_index, edge_weight, improved: bool):
    """gcn_norm's (graph, weights), with PyG's cached=True semantics and our graph cache."""
    if layer.normalize and layer.cached and layer._cached_edge_index is not None:
        return layer._cached_edge_index
    n = x.size(layer.node_dim)
    if not layer.normalize:
        edge_index, edge_weight, _ = _edge_list(edge_index, edge_weight)
        _check_edge_index(edge_index)
        if layer.flow != "source_to_target":
            edge_index = edge_index.flip(0)
        return as_graph(edge_index, n, (layer.flow,)), edge_weight
    if _is_sparse(edge_index):
        # PyG normalises a sparse adjacency in its own way (self-loops added, not "remaining")
        normalized = gcn_norm(edge_index, None, n, improved, layer.add_self_loops, layer.flow, x.dtype)
        normalized = normalized[0] if isinstance(normalized, tuple) else normalized
        ei, weight, _ = _edge_list(normalized)
    else:
        edge_index, edge_weight, _ = _edge_list(edge_index, edge_weight)
        _check_edge_index(edge_index)
        ei, weight = gcn_norm(edge_index, edge_weight, n, improved, layer.add_self_loops, layer.flow, x.dtype)
    tag = ("gcn", layer.add_self_loops, n, layer.flow)
    graph = as_graph(edge_index, None, tag, lambda _: Graph.from_edge_index(ei, n))
    result = (graph, weight)
    if layer.cached:
        layer._cached_edge_index = result
    return result


class GCNConv(_NoTemplates, pyg_nn.GCNConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GCNConv`: normalisation as PyG's gcn_norm, then one "
               "weighted-sum sweep.\n\n" + (pyg_nn.GCNConv.__doc__ or ""))

    def forward(self, x: Tensor, edge_index, edge_weight=None) -> Tensor:
        if isinstance(x, (tuple, list)):
            raise ValueError(f"'{self.__class__.__name__}' received a tuple of node features as input while this "
                             "layer does not support bipartite message passing. Please try other layers such as "
                             "'SAGEConv' or 'GraphConv' instead")
        programs.check_features("GCNConv", x)
        graph, weight = _normalized(self, x, edge_index, edge_weight, self.improved)
        x = self.lin(x)
        feats = {"x": x}
        if weight is not None:
            feats["w"] = weight.to(x.dtype)
        out = programs.weighted_sum("w" in feats)(graph, **feats)
        if self.bias is not None:
            out = out + self.bias
        return out


class APPNP(_NoTemplates, pyg_nn.APPNP):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.APPNP`: each of the K steps is one sweep that also "
               "mixes in the teleport term.\n\n" + (pyg_nn.APPNP.__doc__ or ""))

    def forward(self, x: Tensor, edge_index, edge_weight=None) -> Tensor:
        programs.check_features("APPNP", x)
        graph, weight = _normalized(self, x, edge_index, edge_weight, False)
        alpha = x.new_tensor(self.alpha)
        h = x
        for _ in range(self.K):
            w = weight
            if self.dropout > 0 and self.training:
                if w is None:
                    w = x.new_ones(graph.num_edges)
                w = F.dropout(w, p=self.dropout)
            feats = {"x": x, "h": h}
            if w is not None:
                feats["w"] = w.to(x.dtype)
            x = programs.appnp_step("w" in feats, alpha)(graph, **feats)
        return x
