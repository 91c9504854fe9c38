"""The vertex programs behind the prebuilt layers: everything that touches edges, in one sweep.

Hyperparameters that vary per layer (negative slope, teleport probability) are closed-over 0-d
tensors, so one compiled kernel serves every value; options that change the program's shape
(destination scores, edge scores, attention dropout, edge weights) are closed-over booleans read
by compile-time conditionals, one specialisation each.
"""
from __future__ import annotations

import torch

from ..compiler import CompiledProgram, compile


def gat_attention(with_dst: bool, with_edge: bool, with_dropout: bool, slope: torch.Tensor) -> CompiledProgram:
    """out_v = sum_e softmax_v(leaky_relu(a_src[u] + a_dst[v] + a_edge[e])) * mask[e] * x[u]."""

    def gat_attention(v):
        logits = [e.src.a_src + (v.a_dst if with_dst else 0) + (e.a_edge if with_edge else 0) for e in v.inedges]
        weights = [torch.exp(torch.where(s > 0, s, s * slope)) for s in logits]
        total = sum(weights)
        return sum(w / total * (e.mask if with_dropout else 1) * e.src.x for w, e in zip(weights, v.inedges))

    return compile(gat_attention)


def weighted_sum(with_weight: bool) -> CompiledProgram:
    """out_v = sum_e w[e] * x[u]: GCN's propagation (w = 1 without weights)."""

    def weighted_sum(v):
        return sum((e.w if with_weight else 1) * e.src.x for e in v.inedges)

    return compile(weighted_sum)


def appnp_step(with_weight: bool, alpha: torch.Tensor) -> CompiledProgram:
    """out_v = (1 - alpha) * sum_e w[e] * x[u] + alpha * h[v]: one power-iteration step of APPNP."""

    def appnp_step(v):
        return (1 - alpha) * sum((e.w if with_weight else 1) * e.src.x for e in v.inedges) + alpha * v.h

    return compile(appnp_step)
