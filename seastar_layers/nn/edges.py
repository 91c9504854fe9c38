"""The edges the PyG layers propagate along, prepared with ops whose output sizes follow from their
input sizes, so that torch.compile, torch.export and TorchScript trace them whole.

PyG drops a graph's self-loops and appends one loop per vertex (GATConv; GCNConv's gcn_norm adds
the loops that remain): a data-dependent number of edges. Here the result has *slots*: every input
edge, then one loop per vertex; `listed` marks the slots PyG keeps, in PyG's order, and the graph
built from them (graph.csr_layouts) leaves the other slots out of every row, so kernels never
visit them. Per-edge values are given per slot; a dropped slot's value is never read. In eager
mode on the CPU, Graph.from_edges(..., loops=n) has the extension's counting sort append the loops
by count and leave out the edges that are loops, so the edge list is not copied to append them and
no mask is built.
"""
from typing import Optional

import torch
from torch import Tensor

from ..graph import listed_with_self_loops, with_self_loops  # noqa: F401  (the graph builds with them)


def remaining_loop_weights(src: Tensor, dst: Tensor, weight: Tensor, num_nodes: int, fill: float) -> Tensor:
    """The weights of the appended loops as PyG's add_remaining_self_loops gives them: an existing
    self-loop's weight, else `fill`. (Non-loops write into one spare slot, dropped.)"""
    index = torch.where(src == dst, src, num_nodes)
    spare = torch.full((num_nodes + 1,), fill, dtype=weight.dtype, device=weight.device)
    return spare.scatter(0, index, weight)[:num_nodes]


def gcn_weights(src: Tensor, dst: Tensor, listed: Optional[Tensor], edge_weight: Optional[Tensor], num_nodes: int,
                improved: bool, source_to_target: bool, dtype: torch.dtype) -> Tensor:
    """PyG's gcn_norm weights, per slot: of an edge_index's edges (src, dst), or, with `listed`, of
    its edges and the loops with_self_loops appended to them (add_remaining_self_loops)."""
    if listed is not None and edge_weight is not None:
        inputs = edge_weight.numel()
        loop_weights = remaining_loop_weights(src[:inputs], dst[:inputs], edge_weight, num_nodes,
                                              2.0 if improved else 1.0)
        edge_weight = torch.cat([edge_weight, loop_weights])
    if edge_weight is None:
        edge_weight = torch.ones(src.numel(), dtype=dtype, device=src.device)
    counted = edge_weight if listed is None else torch.where(listed, edge_weight, 0.0)
    receivers = dst if source_to_target else src
    degree = torch.zeros(num_nodes, dtype=edge_weight.dtype, device=src.device).index_add(0, receivers, counted)
    inv_sqrt = degree.pow(-0.5)
    inv_sqrt = inv_sqrt.masked_fill(inv_sqrt == float("inf"), 0.0)
    return inv_sqrt[src] * edge_weight * inv_sqrt[dst]
