"""The vertex programs behind the prebuilt layers: everything that touches edges, in one sweep.

Hyperparameters that vary per layer (negative slope, teleport probability) are closed-over 0-d
tensors and feature sizes are run-time (generic_shapes), so one compiled kernel serves every
layer configuration; options that change the program's shape (destination scores, edge scores,
attention dropout, edge weights, attention weights as a result) are closed-over booleans read by
compile-time conditionals, one specialisation each. `prebuilt_variants` lists them all for setup.py.
"""
from __future__ import annotations

import torch

from ..compiler import CompiledProgram, compile


def check_features(layer: str, x) -> None:
    """Layers take what their kernels are built for; say so in the layer's terms."""
    for t in x if isinstance(x, (tuple, list)) else (x,):
        if t is not None and t.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"seastar_layers {layer} supports float32 and float64 node features, got {t.dtype}; "
                            "convert them (x.float()) or use the stock layer for this precision")


def gat_attention(with_dst: bool, with_edge: bool, with_dropout: bool, slope: torch.Tensor,
                  with_attention: bool = False) -> CompiledProgram:
    """out_v = sum_e alpha[e] * x[u], alpha[e] = softmax_v(leaky_relu(a_src[u] + a_dst[v] + a_edge[e])) * mask[e].

    with_attention also returns alpha, one (heads, 1) row per edge in edge order: the attention
    the libraries return, after dropout (the mask). Without it the program is the plain one."""

    def gat_attention(v):
        logits = [e.src.a_src + (v.a_dst if with_dst else 0) + (e.a_edge if with_edge else 0) for e in v.inedges]
        weights = [torch.exp(torch.where(s > 0, s, s * slope)) for s in logits]
        total = sum(weights)
        kept = [w * (e.mask if with_dropout else 1) for w, e in zip(weights, v.inedges)]
        # normalised once per row, not per edge: the backward then finds sum_e alpha_e (g . x_u) from
        # the saved weighted sum at the row, instead of sweeping the edges for it (rows without
        # in-edges take the untaken branch: PyG's 0)
        out = torch.where(len(v.innbs) > 0, sum(k * e.src.x for k, e in zip(kept, v.inedges)) / total, 0)
        alpha = [k / total for k in kept]
        return (out, alpha) if with_attention else out

    return compile(gat_attention, generic_shapes=True)


def weighted_sum(with_weight: bool) -> CompiledProgram:
    """out_v = sum_e w[e] * x[u]: GCN's propagation (w = 1 without weights)."""

    def weighted_sum(v):
        return sum((e.w if with_weight else 1) * e.src.x for e in v.inedges)

    return compile(weighted_sum, generic_shapes=True)


def appnp_step(with_weight: bool, alpha: torch.Tensor) -> CompiledProgram:
    """out_v = (1 - alpha) * sum_e w[e] * x[u] + alpha * h[v]: one power-iteration step of APPNP."""

    def appnp_step(v):
        return (1 - alpha) * sum((e.w if with_weight else 1) * e.src.x for e in v.inedges) + alpha * v.h

    return compile(appnp_step, generic_shapes=True)


def prebuilt_variants():
    """(program, example features) for every specialisation the layers can ask for.

    The example sizes stand for their shape pattern only: a size of 1, or a size equal to
    another, gives a different pattern, so each pattern of heads / channels appears once."""
    n, e = 3, 4
    for dtype in (torch.float32, torch.float64):
        scalar = torch.zeros((), dtype=dtype)

        def t(*shape):
            return torch.zeros(*shape, dtype=dtype)

        for heads, channels in [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]:
            for with_dst in (True, False):
                for with_edge in (True, False):
                    for with_dropout in (True, False):
                        feats = {"a_src": t(n, heads, 1), "x": t(n, heads, channels)}
                        if with_dst:
                            feats["a_dst"] = t(n, heads, 1)
                        if with_edge:
                            feats["a_edge"] = t(e, heads, 1)
                        if with_dropout:
                            feats["mask"] = t(e, heads, 1)
                        for with_attention in (False, True):
                            yield gat_attention(with_dst, with_edge, with_dropout, scalar, with_attention), feats
        for width in (1, 2):
            for weight_shape in [None, (e,), (e, 1)]:
                feats = {"x": t(n, width)}
                if weight_shape is not None:
                    feats["w"] = t(*weight_shape)
                yield weighted_sum(weight_shape is not None), feats
                yield appnp_step(weight_shape is not None, scalar), dict(feats, h=t(n, width))
