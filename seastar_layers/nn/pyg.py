"""Drop-in replacements for torch_geometric.nn.GATConv, GCNConv, APPNP, SAGEConv and GINConv.

Each subclasses PyG's own layer, so the constructor, parameter names, reset_parameters(),
__repr__ and state_dict are PyG's; only forward() changes: the linear transforms stay in torch,
and everything that touches edges runs as one fused vertex program.
"""
from __future__ import annotations

import copy
import functools
import warnings
from typing import List, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.nn.aggr import MaxAggregation, MeanAggregation, SumAggregation
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import torch_sparse
from torch_geometric.utils import add_self_loops, is_torch_sparse_tensor, remove_self_loops, scatter
from torch_geometric.utils.sparse import set_sparse_value

from ..graph import Graph, as_graph, check_index_dtype, graph_tensors
from ..runtime import library
from . import edges, programs
from .modules import leading_linear, leading_rows, linear_parameters, linear_weight

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


# The aggregations the programs fuse, by PyG's aggregation module: the program's op
_AGGREGATION_OPS = {SumAggregation: "weighted_sum", MeanAggregation: "neighbour_mean", MaxAggregation: "neighbour_max"}


def _unfused_reason(layer: MessagePassing, hooks: bool = True, aggregations=(SumAggregation,)) -> str | None:
    """What, if anything, only PyG's own message passing can honour: an aggregation other than
    `aggregations` (module types), registered hooks that see each message (unless `hooks` is
    False), a replaced explain_message() that may do anything to one."""
    state = layer.__dict__  # read directly: this runs on every call, and Module.__getattr__ costs a microsecond
    if type(state["_modules"]["aggr_module"]) not in aggregations:
        return f"aggr={layer.aggr!r}"
    for name in _MESSAGE_PASSING_HOOKS if hooks else ():
        if state[name]:
            return "a registered message passing hook"
    if state["_explain"] and getattr(layer.explain_message, "__func__", None) is not MessagePassing.explain_message:
        return "a custom explain_message"
    return None


def _explain_factor(layer: MessagePassing, graph: Graph, message_dims: int, input_edges: int) -> Tensor | None:
    """In explain mode PyG multiplies every message by its edge's mask (PyG's explain_message:
    sigmoid, self-loops the layer added at 1). The same factor, one per edge slot, is fused as an
    edge weight; gradients reach the mask through it. The mask covers the `input_edges` the user
    gave; self-loop slots the layer appended after them (nn/edges.py) get 1, as in PyG."""
    if not layer._explain:  # the explain property's value, without a property call on every forward
        return None
    shape = [1] * message_dims
    shape[layer.node_dim] = input_edges
    ones = torch.ones(shape, dtype=layer._edge_mask.dtype if layer._edge_mask is not None else torch.float32,
                      device=graph.device)
    factor = layer.explain_message(ones, graph.num_dst).reshape(input_edges)
    return torch.cat([factor, factor.new_ones(graph.num_edges - input_edges)])


def _edge_dropout(values: Tensor, p: float, listed: Optional[Tensor]) -> Tensor:
    """F.dropout of per-slot values as PyG's layer draws it: over its own edges (the `listed` slots,
    in its order), so that the same seed gives the same masks. Inside a traced or scripted model,
    where their number is data-dependent, over every slot (the same distribution, not PyG's draws)."""
    if torch.jit.is_scripting():
        return F.dropout(values, p=p)
    else:
        if listed is None or torch.compiler.is_compiling():
            return F.dropout(values, p=p)
        dropped = torch.zeros_like(values)
        dropped[listed] = F.dropout(values[listed], p=p)
        return dropped


def _edge_list(edge_index, edge_weight=None):
    """(edge_index tensor, edge values, size) from a Tensor, EdgeIndex, torch sparse adj_t or SparseTensor."""
    if type(edge_index) is Tensor and edge_index.layout == torch.strided:  # as most calls pass it: no more looks
        return edge_index, edge_weight, None
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
    check_index_dtype(edge_index)


def _is_sparse(adj) -> bool:
    if type(adj) is Tensor:  # as most calls pass it (a sparse layout is never strided)
        return adj.layout != torch.strided
    return (isinstance(adj, Tensor) and (adj.is_sparse or adj.layout != torch.strided)) or \
        type(adj).__name__ == "SparseTensor"


def _check_flow(layer: MessagePassing, sparse: bool) -> None:
    """Refuses a reversed flow over a sparse adjacency (`sparse`: the layer's graph is one)."""
    if sparse and layer.flow == "target_to_source":  # PyG's own refusal, word for word
        raise ValueError('Flow direction "target_to_source" is invalid for message propagation via '
                         '`torch_sparse.SparseTensor` or `torch.sparse.Tensor`. If you really want to make use of a '
                         'reverse message passing flow, pass in the transposed sparse tensor to the message passing '
                         'module, e.g., `adj_t.t()`.')


def _message_graph(layer: MessagePassing, source, plain: Tensor, loops: int, size: tuple[int, int],
                   key: tuple, sparse: bool) -> Graph:
    """The graph messages travel along: the (2, E) edges `plain` of `source`, the user's graph
    object, with the layer's `loops` self-loops as PyG adds them (0: none; `key` names that
    processing; nn/edges.py), reversed for flow="target_to_source"; size is (senders, receivers).
    Built once per graph object and processing; inside a traced model, on every call, as part of
    the compiled graph. `sparse`: the source is a sparse adjacency."""
    flip = layer.flow == "target_to_source"
    compiling = torch.compiler.is_compiling()
    if not key and not flip and not compiling and not sparse:
        return as_graph(source, size)  # a sorted EdgeIndex brings its own CSR/CSC

    def build(_=None):
        src, dst = (plain[1], plain[0]) if flip else (plain[0], plain[1])
        return Graph.from_edges(src, dst, *size, loops=loops)

    return build() if compiling else as_graph(source, None, (layer.flow, size) + key, build)


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


def _shape(x: Tensor) -> str:
    """A tensor's shape as Python prints a tuple, for messages (also in TorchScript)."""
    sizes = [str(d) for d in x.shape]
    return "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"


def _check_static(x: Tensor) -> None:
    if x.dim() != 2:  # PyG asserts the same ("Static graphs not supported in 'GATConv'")
        raise ValueError("GATConv expects node features of shape (N, F), got " + _shape(x) + "; like PyG's, it does "
                         "not support static graphs (a batch axis before the vertex axis)")


def _scriptable(layer: MessagePassing, name: str, aggregations=(SumAggregation,)) -> MessagePassing:
    """What torch.jit.script(layer) scripts: the fused path (each forward's scripted branch). A
    scripted module runs no Python hook, as PyG's scripted layers run none (eager calls still
    honour them); what only PyG's own message passing can do is refused when scripting starts, by
    name. A cached layer scripts a copy whose cache starts empty and holds the scripted path's
    graph (`_scripted_cache`), as the eager cache holds objects TorchScript cannot type."""
    reason = _unfused_reason(layer, hooks=False, aggregations=aggregations)
    if reason is None and layer.explain:
        reason = "explain mode"
    if reason is not None:
        raise RuntimeError(f"seastar_layers.{name}: {reason} cannot be scripted (it runs PyG's own message "
                           f"passing); script torch_geometric.nn.{name} for it, or drop the option")
    if not hasattr(layer, "cached"):
        return layer
    script = copy.copy(layer)  # shares the parameters, submodules and buffers
    script._scripted_cache = None
    script._cached_edge_index = None
    script._cached_adj_t = None
    return script


# A scripted GCNConv's or APPNP's graph with cached=True: its tensors, edge weights and listed slots
ScriptedCache = Optional[Tuple[List[Tensor], Optional[Tensor], Optional[Tensor]]]


class _ScriptedCaching:
    def _scripted_graph(self, name: str, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                        improved: bool) -> Tuple[List[Tensor], Optional[Tensor], Optional[Tensor]]:
        """_scripted_propagation, kept from the first call with cached=True, as PyG's scripted layers keep
        their normalised graph."""
        cache = self._scripted_cache
        if cache is not None:
            return cache
        result = _scripted_propagation(name, self.node_dim, x, edge_index, edge_weight, self.normalize,
                                       self.add_self_loops, improved, self.flow)
        if self.cached and self.normalize:
            self._scripted_cache = result
        return result


class _GatInputs(NamedTuple):
    """What seastar_layers::gat_conv projects and attends over (csrc/layer_ops.cpp): the senders'
    features, the receivers' (None: the senders' first rows), the projections' weights (None: the
    features come projected), whether the receivers get attention scores, and the residual."""
    x_src: Tensor
    x_dst: Optional[Tensor]
    weight_src: Optional[Tensor]
    weight_dst: Optional[Tensor]
    dst_scores: bool
    residual: Optional[Tensor]


class GATConv(_StockTemplates, pyg_nn.GATConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GATConv`: same arguments, parameters and outputs; "
               "attention logits, softmax, dropout and aggregation run in one sweep over the edges without "
               "materialising the E x heads x channels message tensor.\n\n" + (pyg_nn.GATConv.__doc__ or ""))
    _stock_example = (1, 1)

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                edge_attr: Optional[Tensor] = None, size: Optional[Tuple[int, int]] = None,
                return_attention_weights: Optional[bool] = None) -> Tensor:
        if torch.jit.is_scripting():
            return self._scripted(x, edge_index, edge_attr, size, return_attention_weights)
        else:
            return self._eager(x, edge_index, edge_attr, size, return_attention_weights)

    def _eager(self, x, edge_index, edge_attr, size, return_attention_weights):
        unfused = _unfused_reason(self)
        if unfused is not None:
            _warn_once("GATConv", unfused)
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        sparse = _is_sparse(edge_index)
        if sparse and type(edge_index).__name__ == "SparseTensor" and self.add_self_loops and \
                self.edge_dim is not None:
            return super().forward(x, edge_index, edge_attr, size)  # PyG raises its own NotImplementedError
        if sparse and is_torch_sparse_tensor(edge_index) and self.add_self_loops and edge_attr is not None:
            raise ValueError("GATConv cannot add self-loops to a torch sparse adjacency together with 'edge_attr' "
                             "(PyG's GATConv refuses it too: its remove_self_loops asserts edge_attr is None); pass "
                             "an edge_index tensor, or add the self-loops and their features yourself and construct "
                             "the layer with add_self_loops=False")
        if sparse and return_attention_weights and is_torch_sparse_tensor(edge_index) and \
                edge_index.layout not in (torch.sparse_coo, torch.sparse_csr):
            raise ValueError(f"GATConv returns attention weights on a torch sparse adjacency in COO or CSR layout, got "
                             f"{edge_index.layout} (PyG's GATConv refuses it too); pass adj_t.to_sparse_csr()")
        programs.check_features("GATConv", x)
        library.require()
        inputs = self._inputs(x)
        x_src, x_dst = inputs.x_src, inputs.x_dst
        _check_flow(self, sparse)
        plain, _, sparse_size = _edge_list(edge_index)  # as PyG: edge features come from edge_attr
        _check_edge_index(plain)
        size = size if size is not None else sparse_size
        num_dst = self._num_dst(x_src, x_dst, size)
        loops = self._loops(x_src, x_dst, size)
        if x_dst is not None and inputs.weight_src is not None and inputs.weight_dst is None and \
                leading_rows(x_dst, x_src, num_dst):
            inputs = inputs._replace(x_dst=None)  # the op's destinations are then the senders' first rows
        key = ("gat-self-loops", loops) if self.add_self_loops else ()
        graph = _message_graph(self, edge_index, plain, loops, (x_src.size(0), num_dst), key, sparse)
        a_edge = None if edge_attr is None else self._edge_scores(self._with_loop_attr(edge_attr, plain, loops))
        H = self.heads
        dropout = self._attention_dropout()
        explained = _explain_factor(self, graph, 3, plain.size(1))
        if explained is not None:
            explained = explained.view(-1, 1, 1).expand(graph.num_edges, H, 1)
        graph_tensors = graph.op_tensors()
        params = self._parameters  # read directly: Module.__getattr__ costs a microsecond a name, on every call
        if not return_attention_weights:
            return self._attend(graph_tensors, inputs, params["att_src"], params["att_dst"], params["bias"], a_edge,
                                explained, dropout, False)[0]
        attend = functools.partial(self._attend, graph_tensors, inputs, params["att_src"], params["att_dst"],
                                   params["bias"], a_edge)
        # PyG returns the attention after dropout; its explain mask scales the messages only
        if explained is None:
            out, alpha = attend(None, dropout, True)
        else:  # two sweeps that must drop alike share a stored mask (explaining is a small-graph affair)
            dropped = None if dropout == 0 else \
                _edge_dropout(x_src.new_ones(graph.num_edges, H, 1), self.dropout, graph.listed)
            alpha = attend(dropped, 0.0, True)[1]
            both = explained if dropped is None else dropped * explained
            out = attend(both, 0.0, False)[0]
        edges = _gat_self_loops(edge_index, loops) if self.add_self_loops else edge_index
        return out, _attention_weights(edges, _in_pyg_order(alpha.view(-1, H), graph, sparse))

    def _scripted(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                  edge_attr: Optional[Tensor], size: Optional[Tuple[int, int]],
                  return_attention_weights: Optional[bool]) -> Tensor:
        if return_attention_weights is not None:
            raise RuntimeError("seastar_layers.GATConv: return_attention_weights runs PyG's own GATConv, which "
                               "cannot be scripted through seastar_layers; script torch_geometric.nn.GATConv for it")
        if edge_index.is_sparse:
            raise ValueError("a scripted seastar_layers.GATConv takes an edge_index of shape (2, E), not a sparse "
                             "adjacency; pass adj_t.to_sparse_coo().indices().flip(0)")
        inputs = self._project(x, None, self.res is not None)
        x_src, x_dst = inputs.x_src, inputs.x_dst
        num_dst = self._num_dst(x_src, x_dst, size)
        loops = self._loops(x_src, x_dst, size)
        src, dst, listed = self._slots(edge_index, loops)
        if self.flow == "target_to_source":
            src, dst = dst, src
        graph = graph_tensors(src, dst, x_src.size(0), num_dst, listed)
        a_edge = self._edge_scores(self._with_loop_attr(edge_attr, edge_index, loops))
        return self._attend(graph, inputs, self.att_src, self.att_dst, self.bias, a_edge, None,
                            self._attention_dropout(), False)[0]

    def _attention_dropout(self) -> float:
        """The probability of dropping an attention coefficient: PyG's dropout in training, else 0."""
        return float(self.dropout) if self.training and self.dropout > 0 else 0.0

    def _inputs(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]]) -> _GatInputs:
        """What the layer's op projects: the features as given with the projections' weights, where
        calling the projections would compute F.linear(x, weight) and nothing more (modules.linear_weight);
        else the features projected here."""
        modules = self._modules  # read directly: Module.__getattr__ costs a microsecond a name
        lin = modules.get("lin")  # a module, or a plain None attribute (bipartite layers)
        weights = [linear_weight(m, Linear) for m in ((lin,) if lin is not None else
                                                      (modules["lin_src"], modules["lin_dst"]))]
        # whether there is a residual projection, read directly (self.res costs a microsecond)
        return self._project(x, None if any(w is None for w in weights) else weights, modules.get("res") is not None)

    def _project(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]],
                 weights: Optional[List[Tensor]], residual: bool) -> _GatInputs:
        """The senders' and receivers' features (as PyG's rendered propagate() reads a pair, whichever
        the flow) with `weights`, the projections' weights, for the op to project; without them,
        projected here as PyG's forward projects them, by calling the projections. One set of
        vertices with one projection is projected once: the receivers are the senders. `residual`:
        the layer has its residual projection (self.res), applied here as in PyG; checked first, so
        that eager calls skip Module.__getattr__ for self.res, whose own check TorchScript needs."""
        H, C = self.heads, self.out_channels
        res: Optional[Tensor] = None
        if isinstance(x, Tensor):
            _check_static(x)
            if residual and self.res is not None:
                res = self.res(x)
            shared = len(weights) == 1 if weights is not None else self.lin is not None  # one projection
            x_src, x_dst, dst_scores = x, (None if shared else x), True
        else:
            x_src, x_dst = x[0], x[1]
            _check_static(x_src)
            if x_dst is not None and residual and self.res is not None:
                res = self.res(x_dst)
            dst_scores = x_dst is not None
        if weights is not None:
            return _GatInputs(x_src, x_dst, weights[0], weights[1] if len(weights) > 1 else None, dst_scores, res)
        projected_dst: Optional[Tensor] = None
        if self.lin is not None:
            if x_dst is not None:
                projected_dst = self.lin(x_dst).view(-1, H * C)
            return _GatInputs(self.lin(x_src).view(-1, H * C), projected_dst, None, None, dst_scores, res)
        if x_dst is not None:
            projected_dst = self.lin_dst(x_dst).view(-1, H * C)
        return _GatInputs(self.lin_src(x_src).view(-1, H * C), projected_dst, None, None, dst_scores, res)

    def _num_dst(self, x_src: Tensor, x_dst: Optional[Tensor], size: Optional[Tuple[int, int]]) -> int:
        if size is not None:
            return size[1]
        return x_dst.size(0) if x_dst is not None else x_src.size(0)

    def _loops(self, x_src: Tensor, x_dst: Optional[Tensor], size: Optional[Tuple[int, int]]) -> int:
        """How many self-loops PyG's GATConv adds (none without add_self_loops)."""
        if not self.add_self_loops:
            return 0
        if size is not None:
            return min(size[0], size[1])
        return x_src.size(0) if x_dst is None else min(x_src.size(0), x_dst.size(0))

    def _slots(self, plain: Tensor, loops: int) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """(src, dst, listed) edge slots after PyG's self-loop handling (nn/edges.py)."""
        if not self.add_self_loops:
            return plain[0], plain[1], None
        return edges.with_self_loops(plain[0], plain[1], loops)

    def _with_loop_attr(self, edge_attr: Optional[Tensor], plain: Tensor, loops: int) -> Optional[Tensor]:
        """The edge features per slot: the loops' filled as in PyG."""
        if edge_attr is None or not self.add_self_loops:
            return edge_attr
        return torch.cat([edge_attr, _loop_attr(edge_attr, plain, loops, self.fill_value)])

    def _edge_scores(self, edge_attr: Optional[Tensor]) -> Optional[Tensor]:
        """The edges' attention scores from their features, as PyG computes them (None without)."""
        if edge_attr is None or self.lin_edge is None:
            return None
        edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
        return (self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels) * self.att_edge).sum(-1, keepdim=True)

    def _attend(self, graph: List[Tensor], inputs: _GatInputs, att_src: Tensor, att_dst: Tensor, bias: Optional[Tensor],
                a_edge: Optional[Tensor], mask: Optional[Tensor], dropout: float,
                with_attention: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """Projection, attention, aggregation, PyG's head merge, residual and bias in one op over the
        message graph's tensors (csrc/layer_ops.cpp: gat_conv); with_attention, also the attention per
        edge slot. Attention dropout is drawn in the kernel (no edges x heads mask), scaled as
        F.dropout scales."""
        results = torch.ops.seastar_layers.gat_conv(
            graph, inputs.x_src, inputs.x_dst, inputs.weight_src, inputs.weight_dst, att_src,
            att_dst if inputs.dst_scores else None, a_edge, mask, inputs.residual, bias, float(self.negative_slope),
            dropout, self.concat, with_attention)
        if not with_attention:
            return results[0], None
        return results[0], results[1]

    def __prepare_scriptable__(self):
        return _scriptable(self, "GATConv")


def _loop_attr(edge_attr: Tensor, plain: Tensor, loops: int,
               fill_value: Union[float, int, Tensor, str, None]) -> Tensor:
    """PyG's add_self_loops fill for the loops' edge features (compute_loop_attr), over the edges
    it keeps: the others go to a spare row, dropped."""
    shape = [loops] + list(edge_attr.shape[1:])
    if fill_value is None:
        return edge_attr.new_full(shape, 1.0)
    if isinstance(fill_value, (int, float)):
        return edge_attr.new_full(shape, float(fill_value))
    if isinstance(fill_value, Tensor):
        fill = fill_value.to(edge_attr.device, edge_attr.dtype)
        return (fill if fill.dim() == edge_attr.dim() else fill.unsqueeze(0)).expand(shape).contiguous()
    kept = (plain[0] != plain[1]) & (plain[1] < loops)
    return scatter(edge_attr, torch.where(kept, plain[1], loops), 0, loops + 1, fill_value)[:loops]


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


def _in_pyg_order(alpha: Tensor, graph: Graph, sparse: bool) -> Tensor:
    """Per-slot attention (nn/edges.py) in the order of the edges PyG's GATConv returns: the slots
    it keeps, in order; of a sparse adjacency, row-major (its rows are the receivers)."""
    if graph.listed is None:
        return alpha
    kept = graph.listed.nonzero().view(-1)
    if sparse:
        src, dst = graph.endpoints()
        kept = kept[torch.argsort(dst[kept] * graph.num_src + src[kept], stable=True)]
    return alpha[kept]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in and take parameters in (float32 for half features)."""
    return torch.float32 if dtype == torch.float16 or dtype == torch.bfloat16 else dtype


def _num_vertices(name: str, node_dim: int, x: Tensor) -> int:
    if not -x.dim() <= node_dim < x.dim():
        raise ValueError(name + " reads vertices along node_dim=" + str(node_dim) + ", but the node features have "
                         "shape " + _shape(x) + "; pass (N, F) features, or (B, N, F) with node_dim=-2")
    return x.size(node_dim)


def _to_rows(x: Tensor, node_dim: int) -> Tuple[Tensor, List[int], int]:
    """x as one row per vertex: PyG's node_dim axis first and every other axis folded into the
    features (a batch of feature sets over one static graph is one wider feature set), and what
    _from_rows needs to put a result of the same layout back. A no-op for (N, F) features."""
    axis = node_dim % x.dim()
    if axis == 0 and x.dim() == 2 and x.is_contiguous():  # (N, F) already: nothing to move (most calls)
        return x, [x.size(1)], 0
    moved = x.movedim(axis, 0)
    features = list(moved.shape[1:])
    width = 1
    for size in features:
        width *= size
    return moved.reshape(moved.size(0), width).contiguous(), features, axis


def _from_rows(out: Tensor, features: List[int], axis: int) -> Tensor:
    if axis == 0 and len(features) == 1:
        return out
    return out.reshape([out.size(0)] + features).movedim(0, axis)


def _propagation(layer, name: str, x: Tensor, edge_index, edge_weight, improved: bool, per_edge: bool):
    """(graph messages travel along, its edge weights, the number of edges the user gave, dinv (N, 1)):
    gcn_norm's weights when the layer normalizes, with PyG's cached=True semantics, and PyG's flow.
    Where those weights follow from degrees alone (no edge weights, improved=False) and the caller
    needs no per-edge values (per_edge: explain masks, edge dropout), the weight of u -> v is
    dinv[u] * dinv[v] with dinv = deg^-1/2 after the self-loops: the weights are None and the caller
    scales the vertices instead, so that no edge carries a weight."""
    if layer.normalize and layer.cached and layer._cached_edge_index is not None:
        return layer._cached_edge_index
    n = _num_vertices(name, layer.node_dim, x)
    sparse = _is_sparse(edge_index)
    _check_flow(layer, sparse)
    if layer.normalize and sparse:
        # PyG normalises a sparse adjacency in its own way (self-loops added, not "remaining")
        normalized = gcn_norm(edge_index, None, n, improved, layer.add_self_loops, layer.flow, x.dtype)
        normalized = normalized[0] if isinstance(normalized, tuple) else normalized
        ei, weight, _ = _edge_list(normalized)
    else:
        ei, weight, _ = _edge_list(edge_index, edge_weight)
        _check_edge_index(ei)
    with_loops = layer.normalize and layer.add_self_loops and not sparse

    def slots():
        return edges.with_self_loops(ei[0], ei[1], n) if with_loops else (ei[0], ei[1], None)

    key = ("gcn", layer.add_self_loops) if layer.normalize else ()
    graph = _message_graph(layer, edge_index, ei, n if with_loops else 0, (n, n), key, sparse)  # checks the indices
    dinv = None
    if layer.normalize and not sparse:
        def normalized_weights():
            return edges.gcn_weights(*slots(), weight, n, improved, layer.flow == "source_to_target", x.dtype)

        def inverse_sqrt_degree():  # as gcn_norm: degrees in the features' dtype, 0 for isolated vertices
            return torch.ops.seastar_layers.degree_scales.default(graph.in_indptr, x.dtype, -0.5, 0.0, 2)

        compiling = torch.compiler.is_compiling()
        if weight is None and not improved and not (per_edge or layer.cached):
            dinv = inverse_sqrt_degree() if compiling else graph.derived(("gcn_dinv", x.dtype), inverse_sqrt_degree)
        elif weight is None and not compiling:  # follows from the graph alone: once per graph
            weight = graph.derived(("gcn_norm", improved, layer.flow, x.dtype), normalized_weights)
        else:
            weight = normalized_weights()
    result = (graph, weight, ei.size(1), dinv)
    if layer.normalize and layer.cached:
        layer._cached_edge_index = result
    return result


def _scripted_propagation(layer_name: str, node_dim: int, x: Tensor, edge_index: Tensor,
                          edge_weight: Optional[Tensor], normalize: bool, add_self_loops: bool, improved: bool,
                          flow: str) -> Tuple[List[Tensor], Optional[Tensor], Optional[Tensor]]:
    """_propagation in a scripted layer: (graph tensors, edge weights, listed slots), built on every call."""
    if edge_index.is_sparse:
        raise ValueError("a scripted seastar_layers." + layer_name + " takes an edge_index of shape (2, E), not a "
                         "sparse adjacency; pass adj_t.to_sparse_coo().indices().flip(0)")
    n = _num_vertices(layer_name, node_dim, x)
    src, dst = edge_index[0], edge_index[1]
    listed: Optional[Tensor] = None
    if normalize and add_self_loops:
        src, dst, listed = edges.with_self_loops(src, dst, n)
    flip = flow == "target_to_source"
    graph = graph_tensors(dst if flip else src, src if flip else dst, n, n, listed)
    weight = edge_weight
    if normalize:
        weight = edges.gcn_weights(src, dst, listed, weight, n, improved, not flip, x.dtype)
    return graph, weight, listed


def _edge_weights(layer, graph: Graph, weight: Tensor | None, message_dims: int, inputs: int) -> Tensor | None:
    """The per-edge multiplier of a weighted sum: the edge weights, times the explanation mask in explain mode."""
    explained = _explain_factor(layer, graph, message_dims, inputs)
    if explained is None:
        return weight
    return explained if weight is None else weight * explained


class GCNConv(_ScriptedCaching, _StockTemplates, pyg_nn.GCNConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GCNConv`: normalisation as PyG's gcn_norm, then one "
               "weighted-sum sweep.\n\n" + (pyg_nn.GCNConv.__doc__ or ""))
    _stock_example = (1, 1)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
        if torch.jit.is_scripting():
            graph, weight, _ = self._scripted_graph("GCNConv", x, edge_index, edge_weight, self.improved)
            return self._weighted_sum(graph, x, weight, None, None, self.bias)
        else:
            return self._eager(x, edge_index, edge_weight)

    def _eager(self, x, edge_index, edge_weight):
        if isinstance(x, (tuple, list)):
            raise ValueError(f"'{self.__class__.__name__}' received a tuple of node features as input while this "
                             "layer does not support bipartite message passing. Please try other layers such as "
                             "'SAGEConv' or 'GraphConv' instead")
        unfused = _unfused_reason(self)
        if unfused is not None:
            _warn_once("GCNConv", unfused)
            return super().forward(x, edge_index, edge_weight)
        programs.check_features("GCNConv", x)
        library.require()
        graph, weight, inputs, dinv = _propagation(self, "GCNConv", x, edge_index, edge_weight, self.improved,
                                                   self.explain)
        weight = _edge_weights(self, graph, weight, x.dim(), inputs)
        # read directly: Module.__getattr__ costs a microsecond a name, on every call
        lin_weight = linear_weight(self._modules["lin"], Linear) \
            if x.dim() == 2 and self.node_dim % 2 == 0 and x.layout == torch.strided else None
        return self._weighted_sum(graph.op_tensors(), x, weight, dinv, lin_weight, self._parameters["bias"])

    def _weighted_sum(self, graph: List[Tensor], x: Tensor, weight: Optional[Tensor], dinv: Optional[Tensor],
                      lin_weight: Optional[Tensor], bias: Optional[Tensor]) -> Tensor:
        """out = sum_e w[e] * lin(x)[u], or with dinv, dinv[v] * sum_e dinv[u] * lin(x)[u], plus the bias:
        one op (csrc/layer_ops.cpp: gcn_conv), which projects (N, F) features itself with `lin_weight`
        (see modules.linear_weight)."""
        if lin_weight is not None:
            return torch.ops.seastar_layers.gcn_conv(graph, x, lin_weight, dinv, dinv, weight, bias)
        rows, features, axis = _to_rows(self.lin(x), self.node_dim)
        out = _from_rows(torch.ops.seastar_layers.gcn_conv(graph, rows, None, dinv, dinv, weight, None),
                         features, axis)
        if bias is not None:
            out = out + bias
        return out

    def __prepare_scriptable__(self):
        return _scriptable(self, "GCNConv")


class APPNP(_ScriptedCaching, _StockTemplates, pyg_nn.APPNP):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.APPNP`: each of the K steps is one sweep that also "
               "mixes in the teleport term.\n\n" + (pyg_nn.APPNP.__doc__ or ""))
    _stock_example = (1, 0.0)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
        if torch.jit.is_scripting():
            graph, weight, listed = self._scripted_graph("APPNP", x, edge_index, edge_weight, False)
            return self._steps(graph, x, weight, None, listed)
        else:
            return self._eager(x, edge_index, edge_weight)

    def _eager(self, x, edge_index, edge_weight):
        unfused = _unfused_reason(self)
        if unfused is not None:
            _warn_once("APPNP", unfused)
            return super().forward(x, edge_index, edge_weight)
        programs.check_features("APPNP", x)
        library.require()
        # weights that follow from degrees scale the vertices (no edge-sized tensor, no per-edge read
        # through the edge ids); others are made once per graph, and each step is one fused op
        per_edge = self.explain or (self.dropout > 0 and self.training)
        graph, weight, inputs, dinv = _propagation(self, "APPNP", x, edge_index, edge_weight, False, per_edge)
        explained = _explain_factor(self, graph, x.dim(), inputs)
        tensors = graph.op_tensors()
        if dinv is not None:
            return self._scaled_steps(tensors, x, dinv)
        return self._steps(tensors, x, weight, explained, graph.listed)

    def _scaled_steps(self, graph: List[Tensor], x: Tensor, dinv: Tensor) -> Tensor:
        """K steps of out = keep * dinv[v] * sum_e dinv[u] * out[u] + alpha * h, looped in C++
        (csrc/layer_ops.cpp)."""
        rows, features, axis = _to_rows(x, self.node_dim)
        dinv = dinv.to(rows.dtype)
        out = torch.ops.seastar_layers.appnp_propagate(graph, rows, dinv, dinv, float(self.alpha), self.K)
        return _from_rows(out, features, axis)

    def _steps(self, graph: List[Tensor], x: Tensor, weight: Optional[Tensor], explained: Optional[Tensor],
               listed: Optional[Tensor]) -> Tensor:
        """K steps of out = keep * sum_e w[e] * out[u] + alpha * h, each one op, with fresh edge dropout."""
        rows, features, axis = _to_rows(x, self.node_dim)
        alpha = torch.full((), self.alpha, dtype=_compute_dtype(x.dtype), device=x.device)
        keep = 1 - alpha
        out = rows
        for _ in range(self.K):
            w = weight
            if self.dropout > 0 and self.training:
                w = _edge_dropout(torch.ones(graph[1].numel(), dtype=x.dtype, device=x.device) if w is None else w,
                                  self.dropout, listed)
            if explained is not None:
                w = explained if w is None else w * explained
            out = torch.ops.seastar_layers.appnp_step(graph, out, rows, alpha, keep,
                                                      None if w is None else w.to(x.dtype))[0][0]
        return _from_rows(out, features, axis)

    def __prepare_scriptable__(self):
        return _scriptable(self, "APPNP")


# TorchScript types the scripted cache from a class annotation, which must be a type, not the string
# that this module's postponed annotations would make of it
for _layer in (GCNConv, APPNP):
    _layer.__annotations__ = {**vars(_layer).get("__annotations__", {}), "_scripted_cache": ScriptedCache}
del _layer


def _unfused_neighbour_reason(layer: MessagePassing, x) -> str | None:
    """_unfused_reason for a SAGE or GIN layer: also a pair of features under flow="target_to_source",
    of which PyG's propagate reads the senders from the second (an order of its own, not fused)."""
    if not isinstance(x, Tensor) and layer.flow == "target_to_source":
        return "a pair of features with flow='target_to_source'"
    return _unfused_reason(layer, aggregations=_AGGREGATION_OPS)


def _aggregate(op: str, graph: List[Tensor], rows: Tensor, weight: Optional[Tensor]) -> Tensor:
    """The senders' rows aggregated over each receiver's in-edges (times the edge weights, where
    given) by the program `op` (_AGGREGATION_OPS): one sweep."""
    if op == "neighbour_mean":
        return torch.ops.seastar_layers.neighbour_mean(graph, rows, weight)[0][0]
    if op == "neighbour_max":
        return torch.ops.seastar_layers.neighbour_max(graph, rows, weight)[0][0]
    return torch.ops.seastar_layers.weighted_sum(graph, rows, weight)[0][0]


def _num_receivers(name: str, node_dim: int, x_src: Tensor, x_dst: Optional[Tensor],
                   size: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    """(senders, receivers) as PyG's propagate counts them: `size`'s receivers, else the second
    features' rows, else as many as senders."""
    num_src = _num_vertices(name, node_dim, x_src)
    if size is not None:
        return num_src, size[1]
    return num_src, _num_vertices(name, node_dim, x_dst) if x_dst is not None else num_src


def _neighbour_graph(layer: MessagePassing, x_src: Tensor, x_dst: Optional[Tensor], edge_index,
                     size: Optional[Tuple[int, int]]) -> Tuple[Graph, Optional[Tensor]]:
    """The graph a SAGE or GIN layer aggregates over, and its messages' edge weights: a torch sparse
    adjacency's values (PyG's spmm multiplies by them; a SparseTensor's it drops), or in explain mode
    the explanation mask (PyG then passes messages, which do not read the values)."""
    sparse = _is_sparse(edge_index)
    _check_flow(layer, sparse)
    plain, values, sparse_size = _edge_list(edge_index)
    _check_edge_index(plain)
    sizes = _num_receivers(type(layer).__name__, layer.node_dim, x_src, x_dst,
                           size if size is not None else sparse_size)
    graph = _message_graph(layer, edge_index, plain, 0, sizes, (), sparse)
    explained = _explain_factor(layer, graph, x_src.dim(), plain.size(1))
    if explained is not None:
        return graph, explained
    if values is None or type(edge_index).__name__ == "SparseTensor":
        return graph, None
    return graph, values


def _scripted_neighbour_graph(layer_name: str, node_dim: int, flow: str, x_src: Tensor, x_dst: Optional[Tensor],
                              edge_index: Tensor, size: Optional[Tuple[int, int]]) -> List[Tensor]:
    """_neighbour_graph in a scripted layer: the graph's tensors, built on every call."""
    if edge_index.is_sparse:
        raise ValueError("a scripted seastar_layers." + layer_name + " takes an edge_index of shape (2, E), not a "
                         "sparse adjacency; pass adj_t.to_sparse_coo().indices().flip(0)")
    num_src, num_dst = _num_receivers(layer_name, node_dim, x_src, x_dst, size)
    src, dst = edge_index[0], edge_index[1]
    if flow == "target_to_source":
        src, dst = dst, src
    return graph_tensors(src, dst, num_src, num_dst, None)


def _aggregated(op: str, graph: List[Tensor], x: Tensor, weight: Optional[Tensor], node_dim: int) -> Tensor:
    """_aggregate over features of any layout PyG's node_dim allows."""
    rows, features, axis = _to_rows(x, node_dim)
    return _from_rows(_aggregate(op, graph, rows, None if weight is None else weight.to(x.dtype)), features, axis)


class _NeighbourLayer(_StockTemplates):
    """What SAGEConv and GINConv share: a tensor or a pair of features, the graph and its edge
    weights, one sweep of the layer's aggregation (_AGGREGATION_OPS); each layer says what it does
    to the senders before the sweep (_sources), around it (_sweep) and after it (_finish)."""

    # a scripted copy's, which cannot read its module type (__prepare_scriptable__)
    _aggregation_op, _layer_name = "weighted_sum", ""

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                size: Optional[Tuple[int, int]] = None) -> Tensor:
        if torch.jit.is_scripting():
            return self._scripted(x, edge_index, size)
        else:
            return self._eager(x, edge_index, size)

    def _eager(self, x, edge_index, size):
        name = type(self).__name__
        unfused = _unfused_neighbour_reason(self, x)
        if unfused is not None:
            _warn_once(name, unfused)
            return super().forward(x, edge_index, size)
        programs.check_features(name, x)
        library.require()
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else (x[0], x[1])
        x_src = self._sources(x_src)
        graph, weight = _neighbour_graph(self, x_src, x_dst, edge_index, size)
        op = _AGGREGATION_OPS[type(self._modules["aggr_module"])]
        return self._around(op, graph.op_tensors(), x_src, x_dst, weight)

    def _around(self, op: str, graph: List[Tensor], x_src: Tensor, x_dst: Optional[Tensor],
                weight: Optional[Tensor]) -> Tensor:
        """The eager layer's output from its sources and the graph: the sweep and what follows it."""
        return self._finish(self._sweep(op, graph, x_src, weight), x_dst)

    def _scripted(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                  size: Optional[Tuple[int, int]]) -> Tensor:
        if isinstance(x, Tensor):
            x_src, x_dst = x, x
        else:
            if self.flow == "target_to_source":
                raise RuntimeError("seastar_layers." + self._layer_name + ": a pair of features with "
                                   "flow='target_to_source' runs PyG's own layer, which cannot be scripted "
                                   "through seastar_layers; script the torch_geometric.nn layer for it")
            x_src, x_dst = x[0], x[1]
        x_src = self._sources(x_src)
        graph = _scripted_neighbour_graph(self._layer_name, self.node_dim, self.flow, x_src, x_dst, edge_index, size)
        return self._finish(self._scripted_sweep(self._aggregation_op, graph, x_src), x_dst)

    def _sources(self, x_src: Tensor) -> Tensor:
        return x_src

    def _sweep(self, op: str, graph: List[Tensor], x_src: Tensor, weight: Optional[Tensor]) -> Tensor:
        return _aggregated(op, graph, x_src, weight, self.node_dim)

    def _scripted_sweep(self, op: str, graph: List[Tensor], x_src: Tensor) -> Tensor:
        return _aggregated(op, graph, x_src, None, self.node_dim)

    def __prepare_scriptable__(self):
        script = copy.copy(_scriptable(self, type(self).__name__, tuple(_AGGREGATION_OPS)))
        script._aggregation_op = _AGGREGATION_OPS[type(self.aggr_module)]
        script._layer_name = type(self).__name__
        return script


class SAGEConv(_NeighbourLayer, pyg_nn.SAGEConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.SAGEConv`: the mean, max or sum over the neighbours is "
               "one sweep (after the projection where that narrows the rows, for mean and sum).\n\n"
               + (pyg_nn.SAGEConv.__doc__ or ""))
    _stock_example = (1, 1)

    def _sources(self, x_src: Tensor) -> Tensor:
        if self.project and hasattr(self, "lin"):
            return self.lin(x_src).relu()
        return x_src

    def _sweep(self, op: str, graph: List[Tensor], x_src: Tensor, weight: Optional[Tensor]) -> Tensor:
        lin_l = linear_parameters(self._modules["lin_l"], Linear)
        if op != "neighbour_max" and lin_l is not None and lin_l[0].size(1) > lin_l[0].size(0):
            # project first where that narrows the rows the sweep reads (as DGL's SAGEConv): a sum or
            # mean of products is the product of the sum or mean
            out = _aggregated(op, graph, F.linear(x_src, lin_l[0]), weight, self.node_dim)
            return out if lin_l[1] is None else out + lin_l[1]
        return self.lin_l(_aggregated(op, graph, x_src, weight, self.node_dim))

    def _scripted_sweep(self, op: str, graph: List[Tensor], x_src: Tensor) -> Tensor:
        return self.lin_l(_aggregated(op, graph, x_src, None, self.node_dim))

    def _finish(self, out: Tensor, x_dst: Optional[Tensor]) -> Tensor:
        if self.root_weight and x_dst is not None:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out


class GINConv(_NeighbourLayer, pyg_nn.GINConv):
    __doc__ = ("Fused drop-in for :class:`torch_geometric.nn.GINConv`: the neighbour sum is one sweep (of the "
               "MLP's first projection, where that narrows the rows).\n\n" + (pyg_nn.GINConv.__doc__ or ""))
    _stock_example = (torch.nn.Identity(),)

    def _around(self, op: str, graph: List[Tensor], x_src: Tensor, x_dst: Optional[Tensor],
                weight: Optional[Tensor]) -> Tensor:
        first = leading_linear(self._modules["nn"], (Linear, torch.nn.Linear))
        if first is None or first[0].size(1) <= first[0].size(0) or op == "neighbour_max":
            return super()._around(op, graph, x_src, x_dst, weight)
        # the MLP's first projection before the sweep, where it narrows the rows: a sum or mean of
        # projected rows is the projection of the sum or mean
        projection, bias, rest = first
        h_src = F.linear(x_src, projection)
        out = _aggregated(op, graph, h_src, weight, self.node_dim)
        if x_dst is not None:
            out = out + (1 + self.eps) * (h_src if x_dst is x_src else F.linear(x_dst, projection))
        if bias is not None:
            out = out + bias
        for module in rest:
            out = module(out)
        return out

    def _finish(self, out: Tensor, x_dst: Optional[Tensor]) -> Tensor:
        if x_dst is not None:
            out = out + (1 + self.eps) * x_dst
        return self.nn(out)
