"""The vertex programs behind the prebuilt layers: everything that touches edges, in one sweep.

Hyperparameters that vary per layer (negative slope, teleport probability) are closed-over 0-d
tensors and feature sizes are run-time (generic_shapes), so one compiled kernel serves every
layer configuration; options that change the program's shape (destination scores, edge scores,
attention dropout, edge weights) are closed-over booleans read by compile-time conditionals, one
specialisation each. `prebuilt_variants` lists them all for setup.py.
"""
from __future__ import annotations

import torch

from ..compiler import CompiledProgram, compile
from ..codegen.torch_entry import OpFamily
from ..runtime import library


def check_features(layer: str, x) -> None:
    """Layers take what their kernels are built for; say so in the layer's terms."""
    for t in x if isinstance(x, (tuple, list)) else (x,):
        if t is not None and t.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"seastar_layers {layer} supports float32 and float64 node features, got {t.dtype}; "
                            "convert them (x.float()) or use the stock layer for this precision")


def gat_attention(with_dst: bool, with_edge: bool, with_dropout: bool, slope: torch.Tensor) -> CompiledProgram:
    """out_v = sum_e softmax_v(leaky_relu(a_src[u] + a_dst[v] + a_edge[e])) * mask[e] * x[u]."""

    def gat_attention(v):
        logits = [e.src.a_src + (v.a_dst if with_dst else 0) + (e.a_edge if with_edge else 0) for e in v.inedges]
        weights = [torch.exp(torch.where(s > 0, s, s * slope)) for s in logits]
        total = sum(weights)
        return sum(w / total * (e.mask if with_dropout else 1) * e.src.x for w, e in zip(weights, v.inedges))

    return compile(gat_attention, generic_shapes=True)


def weighted_sum(with_weight: bool) -> CompiledProgram:
    """out_v = sum_e w[e] * x[u]: GCN's propagation (w = 1 without weights)."""

    def weighted_sum(v):
        return sum((e.w if with_weight else 1) * e.src.x for e in v.inedges)

    return compile(weighted_sum, generic_shapes=True)


def appnp_step(with_weight: bool, alpha: torch.Tensor, keep: torch.Tensor) -> CompiledProgram:
    """out_v = keep * sum_e w[e] * x[u] + alpha * h[v] with keep = 1 - alpha: one power-iteration step
    of APPNP (the caller computes keep, so the op's parameters are plain inputs)."""

    def appnp_step(v):
        return keep * sum((e.w if with_weight else 1) * e.src.x for e in v.inedges) + alpha * v.h

    return compile(appnp_step, generic_shapes=True)


# The sizes in the examples stand for their shape pattern only: a size of 1, or a size equal to
# another, gives a different pattern, so each pattern of heads / channels appears once.
N, E = 3, 4


def _gat_shapes():
    for heads, channels in [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]:
        yield {"a_src": (N, heads, 1), "x": (N, heads, channels), "a_dst": (N, heads, 1), "a_edge": (E, heads, 1),
               "mask": (E, heads, 1)}


def _sum_shapes():
    for width in (1, 2):
        for weight in [(E,), (E, 1)]:
            yield {"x": (N, width), "h": (N, width), "w": weight}


GAT_ATTENTION = OpFamily(gat_attention, required=("a_src", "x"), params=("slope",), examples=_gat_shapes,
                         optional=(("a_dst", "with_dst"), ("a_edge", "with_edge"), ("mask", "with_dropout")))
WEIGHTED_SUM = OpFamily(weighted_sum, required=("x",), params=(), optional=(("w", "with_weight"),),
                        examples=_sum_shapes)
APPNP_STEP = OpFamily(appnp_step, required=("x", "h"), params=("alpha", "keep"), optional=(("w", "with_weight"),),
                      examples=_sum_shapes)
FAMILIES = (GAT_ATTENTION, WEIGHTED_SUM, APPNP_STEP)
library.register(FAMILIES)


def prebuilt_variants():
    """(program, example features) for every specialisation the layers can ask for."""
    for family in FAMILIES:
        yield from family.variants()
