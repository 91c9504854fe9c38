"""The vertex programs behind the prebuilt layers: everything that touches edges, in one sweep.

Hyperparameters that vary per layer (negative slope, teleport probability) are closed-over 0-d
tensors and feature sizes are run-time (declared shapes with named sizes), so one compiled kernel
serves every layer configuration, heads and channels of any size, 1 included; options that change
the program's shape (destination scores, edge scores, attention dropout, edge weights, attention
weights as a result) are closed-over booleans read by compile-time conditionals, one
specialisation each. `prebuilt_variants` lists those the install compiles, for setup.py; any other
is compiled on first use (runtime/library.py: build_variant) and cached on disk.
"""
from __future__ import annotations

import torch

from ..base import DTYPES
from ..compiler import CompiledProgram, compile
from ..runtime import library
from ..runtime.family import OpFamily

# What the install compiles, per target: on the CPU the layers' default dtype, as the other three are
# rare there and would triple the build; on a GPU every dtype, as autocast runs the layers in half.
PREBUILT_DTYPES = {"cpu": (torch.float32,), "cuda": DTYPES}
# Options a layer takes only when asked (its attention weights returned; DGL's edge weights or PyG's
# explanation mask in GAT's softmax): on the CPU their variants compile on first use too, as they are
# three quarters of GAT's variants.
FIRST_USE_OPTIONS = {"cpu": frozenset({"mask", "with_attention"}), "cuda": frozenset()}
GAT_SHAPES = {"a_src": ("heads", 1), "a_dst": ("heads", 1), "a_edge": ("heads", 1), "mask": ("heads", 1),
              "x": ("heads", "channels")}
# GAT's hidden layer as its paper, PyG's and DGL's examples and our benchmarks have it: kernels of its
# own, with every loop over a row's heads and channels unrolled (about 2x the generic kernels' speed)
GAT_FAST_SIZES = ({"heads": 8, "channels": 8},)
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
                  with_attention: bool = False, keep: torch.Tensor | None = None,
                  for_backward: bool = False) -> CompiledProgram:
    """out_v = sum_e alpha[e] * x[u], alpha[e] = softmax_v(leaky_relu(a_src[u] + a_dst[v] + a_edge[e])) * mask[e].

    With `keep` (a 0-d tensor: 1 - the dropout rate) each (edge, head) coefficient is kept with
    probability keep, from a counter-based draw keyed by a seed from torch's generator and the
    edge: no edges x heads mask exists, and the backward regenerates the forward's draws. The
    caller scales the results by 1 / keep, as F.dropout scales what it keeps (outside the
    program, so that keep is only compared with and has no gradient). with_attention also returns
    alpha, one (heads, 1) row per edge in edge order: the attention the libraries return, after
    dropout and the mask. for_backward: the variant whose forward also sums what the backward needs
    of the destinations' edges (the op's autograd kernel turns it on where it records a backward)."""
    with_dropout = keep is not None

    def gat_attention(v):
        logits = [e.src.a_src + (v.a_dst if with_dst else 0) + (e.a_edge if with_edge else 0) for e in v.inedges]
        # the slope is a hyperparameter: detached, the backward computes no gradient for it (an
        # accumulator per edge and feature that nothing would read)
        weights = [torch.exp(torch.where(s > 0, s, s * slope.detach())) for s in logits]
        total = sum(weights)
        masked = [w * (e.mask if with_mask else 1) for w, e in zip(weights, v.inedges)]
        kept = [torch.where(torch.rand_like(m) < keep, m, 0) for m in masked] if with_dropout else masked
        # normalised once per row, not per edge: the backward then finds sum_e alpha_e (g . x_u) from
        # the saved weighted sum at the row, instead of sweeping the edges for it (rows without
        # in-edges take the untaken branch: PyG's 0)
        out = torch.where(len(v.innbs) > 0, sum(k * e.src.x for k, e in zip(kept, v.inedges)) / total, 0)
        alpha = [k / total for k in kept]
        return (out, alpha) if with_attention else out

    names = ["a_src", "x"] + ["a_dst"] * with_dst + ["a_edge"] * with_edge + ["mask"] * with_mask
    return compile(gat_attention, shapes=_declared(names, GAT_SHAPES), fast_sizes=GAT_FAST_SIZES,
                   for_backward=for_backward)


def kept_scale(keep: float) -> float:
    """What gat_attention's results are multiplied by after dropout with keep probability `keep`:
    1 / keep, as F.dropout scales what it keeps (keep = 0 keeps nothing: 0, not inf)."""
    return 1.0 / keep if keep > 0 else 0.0


def weighted_sum(with_weight: bool, declared: bool = True) -> CompiledProgram:
    """out_v = sum_e w[e] * x[u]: GCN's propagation (w = 1 without weights). The prebuilt kernel takes
    one weight per edge and x of shape (N, F); declared=False serves weights of other shapes
    (broadcasting against x), compiled on first use."""

    def weighted_sum(v):
        return sum((e.w if with_weight else 1) * e.src.x for e in v.inedges)

    if not declared:
        return compile(weighted_sum, generic_shapes=True)
    return compile(weighted_sum, shapes=_declared(["x"] + ["w"] * with_weight, SUM_SHAPES))


def neighbour_mean(with_weight: bool, declared: bool = True) -> CompiledProgram:
    """out_v = sum_e w[e] * x[u] / in-degree(v), 0 for a vertex without in-edges: the mean aggregation
    (PyG's aggr="mean", DGL's fn.mean; w = 1 without weights). declared as weighted_sum's."""

    def neighbour_mean(v):
        total = sum((e.w if with_weight else 1) * e.src.x for e in v.inedges)
        return torch.where(len(v.innbs) > 0, total / len(v.innbs), 0)

    if not declared:
        return compile(neighbour_mean, generic_shapes=True)
    return compile(neighbour_mean, shapes=_declared(["x"] + ["w"] * with_weight, SUM_SHAPES))


def neighbour_max(with_weight: bool, declared: bool = True) -> CompiledProgram:
    """out_v = max_e w[e] * x[u] per element, 0 for a vertex without in-edges: the max aggregation
    (PyG's aggr="max", DGL's fn.max); the gradient is shared among the edges that attain it, as torch's.
    declared as weighted_sum's."""

    def neighbour_max(v):
        return max((e.w if with_weight else 1) * e.src.x for e in v.inedges)

    if not declared:
        return compile(neighbour_max, generic_shapes=True)
    return compile(neighbour_max, shapes=_declared(["x"] + ["w"] * with_weight, SUM_SHAPES))


def appnp_step(with_weight: bool, alpha: torch.Tensor, keep: torch.Tensor) -> CompiledProgram:
    """out_v = keep * sum_e w[e] * x[u] + alpha * h[v] with keep = 1 - alpha: one power-iteration step
    of APPNP (the caller computes keep, so the op's parameters are plain inputs)."""

    def appnp_step(v):
        return keep * sum((e.w if with_weight else 1) * e.src.x for e in v.inedges) + alpha * v.h

    return compile(appnp_step, shapes=_declared(["x", "h"] + ["w"] * with_weight, SUM_SHAPES))


# one full shape (rows first) per feature, for compiling: the shapes are declared, so only which
# rows a feature has matters (3 vertices, 4 edges)
N, E = 3, 4
GAT_ATTENTION = OpFamily(gat_attention, required=("a_src", "x"), params=("slope",),
                         optional=(("a_dst", "with_dst"), ("a_edge", "with_edge"), ("mask", "with_mask")),
                         optional_params=("keep",), seeded_by="keep", switches=("with_attention", "for_backward"),
                         example={"a_src": (N, 2, 1), "x": (N, 2, 3), "a_dst": (N, 2, 1), "a_edge": (E, 2, 1),
                                  "mask": (E, 2, 1)})
WEIGHTED_SUM = OpFamily(weighted_sum, required=("x",), params=(), optional=(("w", "with_weight"),),
                        example={"x": (N, 3), "w": (E,)})
NEIGHBOUR_MEAN = OpFamily(neighbour_mean, required=("x",), params=(), optional=(("w", "with_weight"),),
                          example={"x": (N, 3), "w": (E,)})
NEIGHBOUR_MAX = OpFamily(neighbour_max, required=("x",), params=(), optional=(("w", "with_weight"),),
                         example={"x": (N, 3), "w": (E,)})
APPNP_STEP = OpFamily(appnp_step, required=("x", "h"), params=("alpha", "keep"), optional=(("w", "with_weight"),),
                      example={"x": (N, 3), "h": (N, 3), "w": (E,)})
FAMILIES = (GAT_ATTENTION, WEIGHTED_SUM, NEIGHBOUR_MEAN, NEIGHBOUR_MAX, APPNP_STEP)
library.register(FAMILIES, PREBUILT_DTYPES, FIRST_USE_OPTIONS)


def is_prebuilt(target: str, options, dtype: torch.dtype) -> bool:
    """Whether the install compiles this variant for `target` ("cpu" or "cuda")."""
    return dtype in PREBUILT_DTYPES[target] and not FIRST_USE_OPTIONS[target].intersection(options)


def prebuilt_variants(target: str = "cpu"):
    """(family, options, dtype, program, example features) for every specialisation the install compiles
    for `target` (is_prebuilt; the shapes are declared, so the example sizes do not matter)."""
    for family in FAMILIES:
        for options, dtype, program, features in family.variants(PREBUILT_DTYPES[target]):
            if is_prebuilt(target, options, dtype):
                yield family, options, dtype, program, features
