"""The vertex programs behind the prebuilt layers: everything that touches edges, in one sweep.

Hyperparameters that vary per layer (negative slope, teleport probability) are closed-over 0-d
tensors and feature sizes are run-time (declared shapes with named sizes), so one compiled kernel
serves every layer configuration, heads and channels of any size, 1 included; options that change
the program's shape (destination scores, edge scores, attention dropout, edge weights, attention
weights as a result) are closed-over booleans read by compile-time conditionals, one
specialisation each. `prebuilt_variants` lists them all, in every dtype, for setup.py.
"""
from __future__ import annotations

import torch

from ..compiler import CompiledProgram, compile


DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
GAT_SHAPES = {"a_src": ("heads", 1), "a_dst": ("heads", 1), "a_edge": ("heads", 1), "mask": ("heads", 1),
              "x": ("heads", "channels")}
SUM_SHAPES = {"x": ("channels",), "h": ("channels",), "w": ()}


def check_features(layer: str, x) -> None:
    """Layers take what their kernels are built for; say so in the layer's terms."""
    for t in x if isinstance(x, (tuple, list)) else (x,):
        if t is not None and t.dtype not in DTYPES:
            raise TypeError(f"seastar_layers {layer} supports float32, float64, float16 and bfloat16 node features, "
                            f"got {t.dtype}; convert them (x.float()) or use the stock layer for this type")


def _declared(names, table: dict) -> dict:
    return {name: table[name] for name in names}


def gat_attention(with_dst: bool, with_edge: bool, with_mask: bool, slope: torch.Tensor,
                  with_attention: bool = False, keep: torch.Tensor | None = None) -> CompiledProgram:
    """out_v = sum_e alpha[e] * x[u], alpha[e] = softmax_v(leaky_relu(a_src[u] + a_dst[v] + a_edge[e])) * mask[e].

    `keep` (a 0-d tensor, 1 - the dropout rate) drops attention coefficients as F.dropout does, each
    (edge, head) kept with probability keep and scaled by 1 / keep, from a counter-based draw keyed
    by a seed from torch's generator and the edge: no edges x heads mask exists, and the backward
    regenerates the forward's draws. with_attention also returns alpha, one (heads, 1) row per edge
    in edge order: the attention the libraries return, after dropout and the mask."""
    with_dropout = keep is not None

    def gat_attention(v):
        logits = [e.src.a_src + (v.a_dst if with_dst else 0) + (e.a_edge if with_edge else 0) for e in v.inedges]
        weights = [torch.exp(torch.where(s > 0, s, s * slope)) for s in logits]
        total = sum(weights)
        kept = [w * (e.mask if with_mask else 1)
                * (torch.where(torch.rand_like(w) < keep, 1 / keep, 0) if with_dropout else 1)
                for w, e in zip(weights, v.inedges)]
        # normalised once per row, not per edge: the backward then finds sum_e alpha_e (g . x_u) from
        # the saved weighted sum at the row, instead of sweeping the edges for it (rows without
        # in-edges take the untaken branch: PyG's 0)
        out = torch.where(len(v.innbs) > 0, sum(k * e.src.x for k, e in zip(kept, v.inedges)) / total, 0)
        alpha = [k / total for k in kept]
        return (out, alpha) if with_attention else out

    names = ["a_src", "x"] + ["a_dst"] * with_dst + ["a_edge"] * with_edge + ["mask"] * with_mask
    return compile(gat_attention, shapes=_declared(names, GAT_SHAPES))


def weighted_sum(with_weight: bool, declared: bool = True) -> CompiledProgram:
    """out_v = sum_e w[e] * x[u]: GCN's propagation (w = 1 without weights). The prebuilt kernel takes
    one weight per edge and x of shape (N, F); declared=False serves weights of other shapes
    (broadcasting against x), compiled on first use."""

    def weighted_sum(v):
        return sum((e.w if with_weight else 1) * e.src.x for e in v.inedges)

    if not declared:
        return compile(weighted_sum, generic_shapes=True)
    return compile(weighted_sum, shapes=_declared(["x"] + ["w"] * with_weight, SUM_SHAPES))


def appnp_step(with_weight: bool, alpha: torch.Tensor) -> CompiledProgram:
    """out_v = (1 - alpha) * sum_e w[e] * x[u] + alpha * h[v]: one power-iteration step of APPNP."""

    def appnp_step(v):
        return (1 - alpha) * sum((e.w if with_weight else 1) * e.src.x for e in v.inedges) + alpha * v.h

    return compile(appnp_step, shapes=_declared(["x", "h"] + ["w"] * with_weight, SUM_SHAPES))


def prebuilt_variants():
    """(program, example features) for every specialisation the layers can ask for: every option, in
    every dtype (the shapes are declared, so the example sizes do not matter)."""
    n, e, heads, channels = 3, 4, 2, 3
    for dtype in DTYPES:
        # the kernels read hyperparameters per call; 0.5 makes a slope and a keep probability that
        # exercise both branches where the examples are run (tests)
        scalar = torch.full((), 0.5, dtype=dtype)

        def t(*shape):
            return torch.zeros(*shape, dtype=dtype)

        for with_dst in (True, False):
            for with_edge in (True, False):
                for with_mask in (True, False):
                    feats = {"a_src": t(n, heads, 1), "x": t(n, heads, channels)}
                    if with_dst:
                        feats["a_dst"] = t(n, heads, 1)
                    if with_edge:
                        feats["a_edge"] = t(e, heads, 1)
                    if with_mask:
                        feats["mask"] = t(e, heads, 1)
                    for with_attention in (False, True):
                        for keep in (None, scalar):
                            yield gat_attention(with_dst, with_edge, with_mask, scalar, with_attention, keep), feats
        for with_weight in (False, True):
            feats = {"x": t(n, channels)} | ({"w": t(e)} if with_weight else {})
            yield weighted_sum(with_weight), feats
            yield appnp_step(with_weight, scalar), dict(feats, h=t(n, channels))
