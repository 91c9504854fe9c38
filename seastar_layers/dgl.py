"""Drop-in replacements for dgl.nn.GATConv, GraphConv, APPNPConv, SAGEConv and GINConv.

    from seastar_layers.dgl import GATConv, GraphConv, APPNPConv, SAGEConv, GINConv

Each subclasses DGL's own module (constructor, parameters, reset_parameters(), state_dict are
DGL's) and replaces forward(): dense transforms and per-vertex normalisation stay in torch, every
edge-wise step runs as one fused vertex program. DGLGraphs and blocks from DGL's samplers work.
"""
from __future__ import annotations

import math
import warnings

import numpy
import torch
import torch.nn.functional as F

from .base import COMPUTE_DTYPE
from .compat import import_dgl
from .graph import Graph
from .nn import programs
from .nn.modules import leading_linear, leading_rows, linear_weight, member, passes_through
from .runtime import library

dgl = import_dgl()
from dgl.nn.pytorch import APPNPConv as _DGLAPPNPConv  # noqa: E402
from dgl.nn.pytorch import GATConv as _DGLGATConv  # noqa: E402
from dgl.nn.pytorch import GINConv as _DGLGINConv  # noqa: E402
from dgl.nn.pytorch import GraphConv as _DGLGraphConv  # noqa: E402
from dgl.nn.pytorch import SAGEConv as _DGLSAGEConv  # noqa: E402

ZERO_IN_DEGREE = ("There are 0-in-degree nodes in the graph, output for those nodes will be invalid. This is harmful "
                  "for some applications, causing silent performance regression. Adding self-loop on the input graph "
                  "by calling `g = dgl.add_self_loop(g)` will resolve the issue. Setting ``allow_zero_in_degree`` to "
                  "be `True` when constructing this module will suppress the check and let the code run.")


class _Converted:
    """What the layers read of a DGL graph, converted once per graph: kept on the DGLGraph object,
    where a model compiled with torch.compile finds it without calling DGL (whose C library dynamo
    cannot trace), with the graph index it came from (DGL replaces it when the edges change). A
    plain class with slots: a sampled block is a new graph every step, and a frozen dataclass's
    fields cost a microsecond to set."""

    __slots__ = ("index", "graph", "is_block", "zero_in_degree", "inference")

    def __init__(self, index, graph: Graph, is_block: bool, inference: bool):
        self.index, self.graph, self.is_block = index, graph, is_block
        self.zero_in_degree = _has_empty_rows(graph.in_indptr)  # a destination without in-edges
        self.inference = inference  # made in inference mode: its tensors serve no backward


def prepare(graph):
    """Converts a DGLGraph or block for the layers now, so that a compiled model (torch.compile,
    torch.export) reads the conversion instead of calling DGL. A layer called outside a compiled
    model converts its graph the same way; inside one, an unconverted graph costs a graph break
    (an error under fullgraph=True). Returns the graph."""
    _convert(graph)
    return graph


def _converted(graph) -> _Converted:
    found = getattr(graph, "_seastar_converted", None)
    # dynamo cannot trace torch.is_inference_mode_enabled(); a traced model reads what prepare() left
    if torch.compiler.is_compiling():
        return found if found is not None and found.index is graph._graph else _convert_untraced(graph)
    if found is not None and found.index is graph._graph and found.inference == torch.is_inference_mode_enabled():
        return found
    return _convert(graph)


def _convert(graph) -> _Converted:
    # kept on the DGLGraph (graph_cache, keyed by its index, would hold the same conversion twice)
    converted = _Converted(graph._graph, Graph.from_dgl(graph), graph.is_block, torch.is_inference_mode_enabled())
    graph._seastar_converted = converted
    return converted


# called only inside a traced model: torch.compiler.disable's wrapper costs microseconds on every eager call
_convert_untraced = torch.compiler.disable(
    _convert, reason="converting a DGL graph calls DGL's C library, which dynamo cannot trace; convert graphs before "
                     "the compiled model with seastar_layers.dgl.prepare(g)")


def _has_empty_rows(indptr: torch.Tensor) -> bool:
    """Whether a row of the CSR is empty (a destination without in-edges): whether two row pointers
    are equal, as they never decrease. A small graph's (a sampled block is a new one every step) in
    Python: torch's three ops take 5 us there, numpy's 1.4 us warm and 10 us after a DGL graph was
    built (numpy's code out of the cache), a list of ints 0.5."""
    if indptr.numel() <= SMALL_ROWS:
        ends = indptr.tolist()
        return len(set(ends)) < len(ends)
    if indptr.device.type != "cpu":
        return bool((indptr[1:] == indptr[:-1]).any())
    ends = indptr.numpy()
    return bool(numpy.count_nonzero(ends[1:] == ends[:-1]))


SMALL_ROWS = 256  # _has_empty_rows: row pointers read as Python ints up to this many


def _check_in_degrees(module, converted: _Converted) -> None:
    if not module._allow_zero_in_degree and converted.zero_in_degree:
        raise dgl.DGLError(ZERO_IN_DEGREE)


class GATConv(_DGLGATConv):
    __doc__ = ("Fused drop-in for :class:`dgl.nn.GATConv`: attention, softmax, attention dropout, edge weights and "
               "aggregation in one sweep over the edges.\n\n" + (_DGLGATConv.__doc__ or ""))

    def forward(self, graph, feat, edge_weight=None, get_attention=False):
        programs.check_features("dgl.GATConv", feat)
        library.require()
        converted = _converted(graph)
        _check_in_degrees(self, converted)
        g = converted.graph
        H, F = self._num_heads, self._out_feats
        modules = self._modules  # read directly: Module.__getattr__ costs a microsecond a name, on every call
        feat_drop = modules["feat_drop"]
        drop = (lambda x: x) if passes_through(feat_drop) else feat_drop
        if isinstance(feat, tuple):
            src_prefix, dst_prefix = feat[0].shape[:-1], feat[1].shape[:-1]
            if src_prefix[1:] != dst_prefix[1:]:
                raise ValueError(f"dgl.GATConv: source and destination features must share their middle axes "
                                 f"(N, *, D); got {tuple(feat[0].shape)} and {tuple(feat[1].shape)}")
            h_src, h_dst = drop(feat[0]), drop(feat[1])
            fc_src, fc_dst = (modules["fc"],) * 2 if "fc_src" not in modules else (modules["fc_src"], modules["fc_dst"])
            x_dst = h_dst
        else:
            src_prefix = dst_prefix = feat.shape[:-1]
            h_src = h_dst = drop(feat)
            fc_src = fc_dst = modules["fc"]
            x_dst = None  # the destinations are the sources (a block's come first among them)
            if converted.is_block:
                h_dst = h_dst[: g.num_dst]
                dst_prefix = (g.num_dst,) + dst_prefix[1:]
        weight_src, weight_dst = linear_weight(fc_src, torch.nn.Linear), linear_weight(fc_dst, torch.nn.Linear)
        if weight_src is None or weight_dst is None:  # the op takes the features projected
            weight_src = weight_dst = None
            x_src = fc_src(h_src)
            x_dst = fc_dst(x_dst) if x_dst is not None else None
        else:
            x_src = h_src
            weight_dst = None if fc_dst is fc_src else weight_dst
            if x_dst is not None and weight_dst is None and leading_rows(x_dst, x_src, g.num_dst):
                x_dst = None  # (h, h[:num_dst]): the op's destinations are then the sources' first rows
        mask = None
        if edge_weight is not None:  # (N, *, H, .) features: every (*, head) pair attends on its own
            heads = math.prod(src_prefix[1:]) * H
            mask = edge_weight.reshape(g.num_edges, 1, 1).expand(g.num_edges, heads, 1)
        residual = None
        res_fc = member(self, "res_fc")
        if res_fc is not None:
            residual = res_fc(h_dst).reshape(g.num_dst, -1)
        # DGL's attention is after dropout and edge weights: all of it goes into the returned alpha.
        # Its attention dropout (p=1 drops it all) is drawn in the kernel: no edges x heads mask
        attn_drop = modules["attn_drop"]
        dropout = float(attn_drop.p) if self.training and attn_drop.p > 0 else 0.0
        params = self._parameters
        # projection, scores, attention and aggregation, residual and bias in one op (csrc/layer_ops.cpp)
        result = torch.ops.seastar_layers.gat_conv.default(
            g.op_tensors(), x_src, x_dst, weight_src, weight_dst, params["attn_l"], params["attn_r"], None, mask,
            residual, member(self, "bias") if self.has_explicit_bias else None,
            float(modules["leaky_relu"].negative_slope), dropout, True, bool(get_attention))
        # (N, H, F), or (N, *, H, F) for DGL's (N, *, D) features (unpacking the prefix costs a view a microsecond)
        rst = result[0].view(g.num_dst, H, F) if len(dst_prefix) == 1 else result[0].view(*dst_prefix, H, F)
        if self.activation:
            rst = self.activation(rst)
        if get_attention:
            return rst, result[1].view(g.num_edges, *src_prefix[1:], H, 1)
        return rst


def _degree_norms(g: Graph, how: str, sources: torch.Tensor,
                  destinations: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """GraphConv's degree scales of norm `how` ("both": degree^-1/2 on either side; "left": 1/degree
    of the sources' out-degrees; "right": of the destinations' in-degrees), None on a side it leaves
    unscaled, each in the dtype and shape that scales its features' rows (as DGL's, whose scales take
    their features' dtype). They follow from the graph alone: made once per graph (inside a traced
    model, on every call), both in one go (a sampled block is a new graph every step). On the
    graph's device: features elsewhere fail in the op that reads both."""
    def make():
        exponent = -0.5 if how == "both" else -1.0
        scales = torch.ops.seastar_layers.degree_scales.default
        # DGL clamps the degrees to 1: a vertex without edges is scaled by 1
        return (scales(g.out_indptr, sources.dtype, exponent, 1.0, sources.dim()) if how in ("left", "both") else None,
                scales(g.in_indptr, destinations.dtype, exponent, 1.0, destinations.dim())
                if how in ("right", "both") else None)

    if torch.compiler.is_compiling():
        return make()
    return g.derived(("dgl_degree_norms", how, sources.dtype, destinations.dtype, sources.dim(), destinations.dim()),
                     make)


def _edge_weight_norm(g: Graph, edge_weight: torch.Tensor) -> torch.Tensor:
    """DGL's EdgeWeightNorm(norm="both"): w / sqrt(weighted out-degree of the source * weighted
    in-degree of the destination), on the converted graph."""
    if edge_weight.dim() > 1:
        raise dgl.DGLError("Currently the normalization is only defined on scalar edge weight. Please customize the "
                           "normalization for your high-dimensional weights.")
    message = ('Non-positive edge weight detected with `norm="both"`. This leads to square root of zero or negative '
               "values.")
    if torch.compiler.is_compiling():
        torch._assert_async((edge_weight > 0).all(), message.replace('"', "'"))  # inductor does not escape " in C++
    elif bool((edge_weight <= 0).any()):
        raise dgl.DGLError(message)
    src, dst = g.endpoints()
    out_weight = edge_weight.new_zeros(g.num_src).index_add(0, src, edge_weight)
    in_weight = edge_weight.new_zeros(g.num_dst).index_add(0, dst, edge_weight)
    return torch.pow(out_weight, -0.5)[src] * torch.pow(in_weight, -0.5)[dst] * edge_weight


def _rows(x: torch.Tensor) -> torch.Tensor:
    """(N, *) features as (N, F): with one scalar per edge, every feature axis is one more channel,
    so the prebuilt kernels serve every feature shape. Contiguous (N, F) features as they are (a
    reshape is an op of its own: a microsecond on every call on a sampled block)."""
    if x.dim() == 2 and x.is_contiguous():
        return x
    return x.reshape(x.size(0), math.prod(x.shape[1:])).contiguous()


# DGL's reducers (fn.sum, fn.mean, fn.max) as the programs that fuse them with the message
_REDUCERS = {"sum": programs.weighted_sum, "mean": programs.neighbour_mean, "max": programs.neighbour_max}


def _aggregate(g, reducer: str, x: torch.Tensor, edge_weight: torch.Tensor | None) -> torch.Tensor:
    """DGL's update_all(copy_u, reducer), or with edge weights u_mul_e: the sum, mean or max over each
    destination's in-edges of w[e] * x[u] (0 without in-edges), one sweep; weights of any other shape
    broadcast per edge, as DGL's u_mul_e."""
    program = _REDUCERS[reducer]
    if edge_weight is not None and edge_weight.numel() != g.num_edges:
        # weights of other shapes than the prebuilt kernels': the same program, compiled for them
        return program(True, declared=False)(g, x=x, w=edge_weight.to(x.dtype))
    w = None if edge_weight is None else edge_weight.reshape(g.num_edges).to(x.dtype).contiguous()
    op = getattr(torch.ops.seastar_layers, program.__name__).default
    return op(g.op_tensors(), _rows(x), w)[0][0].view(g.num_dst, *x.shape[1:])


def _check_edge_weight(g: Graph, edge_weight: torch.Tensor | None) -> None:
    if edge_weight is not None and edge_weight.shape[0] != g.num_edges:
        raise ValueError(f"'edge_weight' must have one value per edge ({g.num_edges}), "
                         f"got shape {tuple(edge_weight.shape)}")


def _as_pair(feat, converted: _Converted):
    """(source, destination) features as dgl.utils.expand_as_pair makes them: a block's destinations
    are its sources' first rows."""
    if isinstance(feat, tuple):
        return feat
    return feat, feat[:converted.graph.num_dst] if converted.is_block else feat


_warned: set[tuple[str, str]] = set()


def _warn_once(layer: str, option: str) -> None:
    if (layer, option) not in _warned:
        _warned.add((layer, option))
        warnings.warn(f"seastar_layers.dgl.{layer}: {option} is not fused; running DGL's own {layer} for it",
                      RuntimeWarning, stacklevel=3)


class GraphConv(_DGLGraphConv):
    __doc__ = ("Fused drop-in for :class:`dgl.nn.GraphConv`: the (weighted) neighbour sum is one sweep.\n\n"
               + (_DGLGraphConv.__doc__ or ""))

    def forward(self, graph, feat, weight=None, edge_weight=None):
        programs.check_features("dgl.GraphConv", feat)
        library.require()
        converted = _converted(graph)
        _check_in_degrees(self, converted)
        g = converted.graph
        feat_src, feat_dst = _as_pair(feat, converted)
        _check_edge_weight(g, edge_weight)
        own_weight = member(self, "weight")  # read directly, as member() says why
        if weight is not None:
            if own_weight is not None:
                raise dgl.DGLError("External weight is provided while at the same time the module has defined its "
                                   "own weight parameter. Please create the module with flag weight=False.")
        else:
            weight = own_weight
        if feat_src.dim() == 2 and (edge_weight is None or edge_weight.numel() == g.num_edges):
            # projection, the source norm, the sum, the destination norm and bias in one op
            # (csrc/layer_ops.cpp: gcn_conv), in DGL's order (it sums first where the projection widens
            # the rows; for equal widths either order moves as much), whole in plain loops with one
            # autograd node on a small graph
            src_norm, dst_norm = _degree_norms(g, self._norm, feat_src, feat_dst)
            # DGL's weight is (in, out): the op transposes it (weight_transposed), unrecorded where it can
            rst = torch.ops.seastar_layers.gcn_conv.default(
                g.op_tensors(), feat_src, weight, src_norm, dst_norm,
                None if edge_weight is None else edge_weight.reshape(g.num_edges), member(self, "bias"), True)
            return rst if self._activation is None else self._activation(rst)
        # (N, *, D) features or edge weights of other shapes: DGL's order in ops. Multiply first when
        # that makes the messages narrower, as DGL; the source norm, a per-row scale, then goes on the
        # narrow rows after the product (DGL scales the wide input: a pass over it forward and another
        # backward)
        project_first = self._in_feats > self._out_feats and weight is not None
        if project_first:
            feat_src = torch.matmul(feat_src, weight)
        src_norm, dst_norm = _degree_norms(g, self._norm, feat_src, feat_dst)
        if src_norm is not None:
            feat_src = feat_src * src_norm
        rst = _aggregate(g, "sum", feat_src, edge_weight)
        if weight is not None and not project_first:
            rst = torch.matmul(rst, weight)
        if dst_norm is not None:
            rst = rst * dst_norm
        bias = member(self, "bias")
        if bias is not None:
            rst = rst + bias
        if self._activation is not None:
            rst = self._activation(rst)
        return rst


class APPNPConv(_DGLAPPNPConv):
    __doc__ = ("Fused drop-in for :class:`dgl.nn.APPNPConv`: each propagation step, teleport term included, is one "
               "sweep.\n\n" + (_DGLAPPNPConv.__doc__ or ""))

    def forward(self, graph, feat, edge_weight=None):
        programs.check_features("dgl.APPNPConv", feat)
        library.require()
        g = _converted(graph).graph
        if g.num_src != g.num_dst:  # DGL's own layer fails on blocks with an AssertionError
            raise dgl.DGLError(f"APPNPConv propagates K steps over one set of vertices, but the graph has {g.num_src} "
                               f"source and {g.num_dst} destination vertices (a block or bipartite graph); "
                               "pass a homogeneous graph")
        graph_tensors = g.op_tensors()
        feat_0 = h = _rows(feat)
        edge_drop = self._modules["edge_drop"]  # read directly, as member() says why
        dropping = self.training and edge_drop.p > 0
        if edge_weight is None:
            src_norm, dst_norm = _degree_norms(g, "both", feat_0, feat_0)
            if not dropping:  # the K steps looped in C++ (csrc/layer_ops.cpp)
                out = torch.ops.seastar_layers.appnp_propagate.default(graph_tensors, feat_0, src_norm, dst_norm,
                                                                       float(self._alpha), self._k)
                return out if feat.dim() == 2 else out.view(feat.shape)
            # (1 - alpha) * (sum * dst_norm) + alpha * h_0: dst_norm folded into the teleport split, once
            kept, teleported = (1 - self._alpha) * dst_norm, self._alpha * feat_0
        else:
            edge_weight = _edge_weight_norm(g, edge_weight)
            alpha = torch.full((), self._alpha, dtype=COMPUTE_DTYPE[feat.dtype], device=feat.device)
        for _ in range(self._k):
            w = edge_weight
            if dropping:
                w = edge_drop(feat.new_ones(g.num_edges, 1) if w is None else w)
            if w is not None:
                w = w.reshape(g.num_edges).to(feat.dtype).contiguous()
            if edge_weight is None:
                total = torch.ops.seastar_layers.weighted_sum(graph_tensors, h * src_norm, w)[0][0]
                h = torch.addcmul(teleported, total, kept)
            else:
                h = torch.ops.seastar_layers.appnp_step(graph_tensors, h, feat_0, alpha, 1 - alpha, w)[0][0]
        return h.view(feat.shape)


class SAGEConv(_DGLSAGEConv):
    __doc__ = ("Fused drop-in for :class:`dgl.nn.SAGEConv`: the mean, gcn and pool aggregators' neighbour sweep is one "
               "fused sum, mean or max (aggregator_type='lstm' runs DGL's own layer).\n\n"
               + (_DGLSAGEConv.__doc__ or ""))

    def forward(self, graph, feat, edge_weight=None):
        if self._aggre_type == "lstm":
            _warn_once("SAGEConv", "aggregator_type='lstm'")
            return super().forward(graph, feat, edge_weight)
        programs.check_features("dgl.SAGEConv", feat)
        library.require()
        converted = _converted(graph)
        g = converted.graph
        _check_edge_weight(g, edge_weight)
        modules = self._modules  # read directly: Module.__getattr__ costs a microsecond a name, on every call
        feat_drop = modules["feat_drop"]
        drop = (lambda x: x) if passes_through(feat_drop) else feat_drop
        if isinstance(feat, tuple):
            feat_src, feat_dst = drop(feat[0]), drop(feat[1])
        else:
            feat_src = feat_dst = drop(feat)
            if converted.is_block:
                feat_dst = feat_src[:g.num_dst]
        fc_neigh = modules["fc_neigh"]
        # DGL's order: project first where that narrows the rows the sweep reads
        project_first = self._in_src_feats > self._out_feats
        if self._aggre_type == "mean":
            h_neigh = _aggregate(g, "mean", fc_neigh(feat_src) if project_first else feat_src, edge_weight)
            h_neigh = h_neigh if project_first else fc_neigh(h_neigh)
        elif self._aggre_type == "gcn":
            dgl.utils.check_eq_shape(feat)
            h_src = fc_neigh(feat_src) if project_first else feat_src
            if isinstance(feat, tuple):
                h_dst = fc_neigh(feat_dst) if project_first else feat_dst
                if not graph.is_unibipartite:  # DGL's dstdata is its srcdata: the destinations' rows replace both
                    h_src = h_dst
            else:
                h_dst = h_src[:g.num_dst] if converted.is_block else h_src
            degrees = g.in_degree(feat_dst.dtype).unsqueeze(-1)
            h_neigh = (_aggregate(g, "sum", h_src, edge_weight) + h_dst) / (degrees + 1)
            h_neigh = h_neigh if project_first else fc_neigh(h_neigh)
        else:  # pool
            h_neigh = fc_neigh(_aggregate(g, "max", F.relu(modules["fc_pool"](feat_src)), edge_weight))
        if self._aggre_type == "gcn":
            bias = member(self, "bias")
            rst = h_neigh if bias is None else h_neigh + bias
        else:
            rst = modules["fc_self"](feat_dst) + h_neigh
        if self.activation is not None:
            rst = self.activation(rst)
        if self.norm is not None:
            rst = self.norm(rst)
        return rst


class GINConv(_DGLGINConv):
    __doc__ = ("Fused drop-in for :class:`dgl.nn.GINConv`: the neighbour sum, mean or max is one sweep.\n\n"
               + (_DGLGINConv.__doc__ or ""))

    def forward(self, graph, feat, edge_weight=None):
        programs.check_features("dgl.GINConv", feat)
        library.require()
        converted = _converted(graph)
        g = converted.graph
        _check_edge_weight(g, edge_weight)
        feat_src, feat_dst = _as_pair(feat, converted)
        first = None if self.apply_func is None or self._aggregator_type == "max" else \
            leading_linear(self.apply_func, (torch.nn.Linear,))
        if first is not None and first[0].size(1) > first[0].size(0) and feat_src.dim() == 2 and \
                (edge_weight is None or edge_weight.numel() == g.num_edges):
            # apply_func's first projection before the sweep, where it narrows the rows: a sum or
            # mean of projected rows (times one weight an edge) is the projection of the sum or mean
            weight, bias, rest = first
            h_src = F.linear(feat_src, weight)
            h_dst = h_src if feat_dst is feat_src else h_src[:g.num_dst] \
                if leading_rows(feat_dst, feat_src, g.num_dst) else F.linear(feat_dst, weight)
            rst = (1 + self.eps) * h_dst + _aggregate(g, self._aggregator_type, h_src, edge_weight)
            if bias is not None:
                rst = rst + bias
            for module in rest:
                rst = module(rst)
        else:
            rst = (1 + self.eps) * feat_dst + _aggregate(g, self._aggregator_type, feat_src, edge_weight)
            if self.apply_func is not None:
                rst = self.apply_func(rst)
        if self.activation is not None:
            rst = self.activation(rst)
        return rst
