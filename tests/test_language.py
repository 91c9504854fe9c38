"""Every construct of the language, compiled, against the naive per-vertex oracle: forward and gradients."""
import math

import pytest
import torch
import torch as th
import torch.nn.functional as F
from helpers import assert_close, grads, oracle, random_graph

import seastar_layers as sl

SCALE = 0.5  # a module-level number the programs close over
USE_SQUARE = True


def helper_inner(x):
    return x * SCALE


def helper_outer(x, y=2.0):
    return helper_inner(x) + y


# --- programs ------------------------------------------------------------------------------------
def weighted_sum(v):
    return sum(nb.h * nb.norm for nb in v.innbs)


def gat_zip(v):
    coeff = [torch.exp(F.leaky_relu(nb.el + v.er, 0.2)) for nb in v.innbs]
    s = sum(coeff)
    return sum(c / s * nb.h for c, nb in zip(coeff, v.innbs))


def gat_indexed(v):
    coeff = [th.exp(F.leaky_relu(nb.el + v.er)) for nb in v.innbs]
    s = sum(coeff)
    alpha = [c / s for c in coeff]
    feat = [nb.h for nb in v.innbs]
    return sum([alpha[i] * feat[i] for i in range(len(feat))])


def mean_agg(v):
    return sum(nb.x for nb in v.innbs) / len(v.innbs)


def max_min(v):
    return max(nb.x for nb in v.innbs), min([nb.x * v.y for nb in v.innbs])


def max_of_contractible(v):
    # x - y*y is where a compiler would fuse a multiply-add in one kernel and not another; the max
    # gradient compares the value recomputed in backward with the saved max, so they must agree
    return max(nb.x - v.y ** 2 for nb in v.innbs) + min(nb.x * nb.x + v.y for nb in v.innbs)


def degree(v):
    return v.y * len(v.innbs) + sum(1.0 for nb in v.innbs)


def edge_features(v):
    return sum(e.w * e.src.x + e.dst.y for e in v.inedges)


def unary_ops(v):
    a = sum(torch.exp(nb.x * 0.1) + torch.log(torch.abs(nb.x) + 1) + torch.sqrt(nb.x * nb.x + 1) for nb in v.innbs)
    b = sum(torch.sigmoid(nb.x) * torch.tanh(nb.x) + torch.relu(nb.x - v.y) for nb in v.innbs)
    c = sum(F.elu(nb.x) + F.relu(nb.x) + F.sigmoid(nb.x) + F.leaky_relu(nb.x) + abs(nb.x) for nb in v.innbs)
    return a + b - c


def binary_ops(v):
    s = sum(torch.maximum(nb.x, v.y) - torch.minimum(nb.x, v.y) + nb.x ** 2 / (1 + v.y * v.y) for nb in v.innbs)
    m = sum(torch.where(nb.x > v.y, nb.x, -v.y) + (nb.x <= v.y) * 0.5 for nb in v.innbs)
    return -s + m + torch.pow(v.y * v.y + 1, 0.5)


def methods(v):
    per_head = [(nb.h * v.g).sum(dim=-1, keepdim=True).exp() for nb in v.innbs]
    total = sum(per_head)
    mixed = v.g + sum(p / total * nb.h.sigmoid() for p, nb in zip(per_head, v.innbs))
    return mixed.mean(0) + mixed.sum(dim=1).unsqueeze(-1).squeeze(-1).mean(0, keepdim=False)


def numbers_and_helpers(v):
    k = math.sqrt(2.0) * math.pi
    y = helper_outer(v.y) * k
    if USE_SQUARE:
        y = y * y
    else:
        y = y + 1
    return y + sum(helper_inner(nb.x) for nb in v.innbs)


def locals_and_tuples(v):
    a, b = v.y, v.y * 2
    k = 1
    k += 1
    a = a + k
    contrib = [nb.x * a for nb in v.innbs]
    return sum(contrib) + b


def self_read(v):
    return sum(nb.x * v.x for nb in v.innbs) + v.x


def mixed_shapes(v):
    return sum(nb.h * v.er.squeeze(-1).unsqueeze(-1) for nb in v.innbs)


def attention_weights(v):
    # a per-neighbour list as a result: one row per edge (GAT's normalised attention)
    coeff = [torch.exp(F.leaky_relu(nb.el + v.er, 0.2)) for nb in v.innbs]
    s = sum(coeff)
    alpha = [c / s for c in coeff]
    return sum(a * nb.h for a, nb in zip(alpha, v.innbs)), alpha


def edge_results(v):
    return [e.w * e.src.x + v.y for e in v.inedges], [nb.x for nb in v.innbs], sum(nb.x for nb in v.innbs)


# --- tests ---------------------------------------------------------------------------------------
N = 23


def features(dtype=torch.float64, n_src=N, n_dst=N, n_edges=None, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_()

    f = {
        "x": r(n_src, 4), "y": r(n_dst, 4), "h": r(n_src, 2, 3), "norm": r(n_src, 1), "el": r(n_src, 2, 1),
        "er": r(n_dst, 2, 1), "g": r(n_dst, 2, 3),
    }
    if n_edges is not None:
        f["w"] = r(n_edges, 4)
    return f


CASES = [
    (weighted_sum, ["h", "norm"]),
    (gat_zip, ["el", "er", "h"]),
    (gat_indexed, ["el", "er", "h"]),
    (mean_agg, ["x"]),
    (max_min, ["x", "y"]),
    (max_of_contractible, ["x", "y"]),
    (degree, ["y"]),
    (edge_features, ["x", "y", "w"]),
    (unary_ops, ["x", "y"]),
    (binary_ops, ["x", "y"]),
    (methods, ["h", "g"]),
    (numbers_and_helpers, ["x", "y"]),
    (locals_and_tuples, ["x", "y"]),
    (mixed_shapes, ["h", "er"]),
    (attention_weights, ["el", "er", "h"]),
    (edge_results, ["x", "y", "w"]),
]


def check_against_oracle(fn, names, edge_index, n_src, n_dst, dtype=torch.float64, atol=1e-9, rtol=1e-7):
    feats = features(dtype, n_src, n_dst, edge_index.shape[1])
    used = {n: feats[n] for n in names}
    prog = sl.compile(fn)
    out = prog(edge_index, size=(n_src, n_dst), **used)
    expected = oracle(fn, edge_index, n_dst, out, **used)
    assert_close(out, expected, atol, rtol)
    inputs = list(used.values())
    assert_close(grads(out, inputs), grads(expected, inputs), atol, rtol)


@pytest.mark.parametrize("fn,names", CASES, ids=[c[0].__name__ for c in CASES])
def test_construct_matches_oracle(fn, names):
    check_against_oracle(fn, names, random_graph(N, N, 80, seed=1), N, N)


@pytest.mark.parametrize("fn,names", CASES, ids=[c[0].__name__ for c in CASES])
def test_bipartite(fn, names):
    check_against_oracle(fn, names, random_graph(17, 11, 60, seed=2), 17, 11)


def test_same_tensor_as_source_and_destination():
    check_against_oracle(self_read, ["x"], random_graph(N, N, 70, seed=3), N, N)


def test_float32():
    check_against_oracle(gat_zip, ["el", "er", "h"], random_graph(N, N, 80, seed=4), N, N, torch.float32,
                         atol=1e-5, rtol=1e-4)


def test_graph_without_edges():
    empty = torch.zeros(2, 0, dtype=torch.int64)
    for fn, names in [(gat_zip, ["el", "er", "h"]), (max_min, ["x", "y"]), (mean_agg, ["x"])]:
        check_against_oracle(fn, names, empty, N, N)


def test_graph_object_and_int32_indices():
    ei = random_graph(N, N, 50, seed=5)
    feats = features()
    g = sl.Graph.from_edge_index(ei.to(torch.int32), size=N)
    prog = sl.compile(weighted_sum)
    a = prog(g, h=feats["h"], norm=feats["norm"])
    b = prog(ei, h=feats["h"], norm=feats["norm"])
    torch.testing.assert_close(a, b)
    # a compiled program's kernels read a graph's arrays in either index dtype (as DGL may share int64 ones)
    wide = sl.Graph._from_checked([t.long() for t in g.tensors()], N, N)
    assert g.in_src.dtype == torch.int32 and wide.in_src.dtype == torch.int64
    h = feats["h"].clone().requires_grad_()
    grads = [torch.autograd.grad(prog(graph, h=h, norm=feats["norm"]).sum(), h)[0] for graph in (g, wide)]
    torch.testing.assert_close(prog(wide, h=feats["h"], norm=feats["norm"]), a, rtol=0, atol=0)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


class Attention(torch.nn.Module):
    """A GAT written for Seastar's tracer, compiled verbatim (DGL shapes: attn_l is (1, H, F))."""

    def __init__(self, heads, feats):
        super().__init__()
        self.leaky_relu = torch.nn.LeakyReLU(0.2)
        self.attn_l = torch.nn.Parameter(torch.randn(1, heads, feats, dtype=torch.float64))

    def forward(self, graph, el, er, feat_src):
        @sl.compile
        def nb_forward(v):
            coeff = [th.exp((self.leaky_relu(nb.el + v.er) * self.attn_l).sum(dim=-1).unsqueeze(-1)) for nb in v.innbs]
            s = sum(coeff)
            alpha = [c / s for c in coeff]
            feat_src = [nb.feat_src for nb in v.innbs]
            return sum([alpha[i] * feat_src[i] for i in range(len(feat_src))])

        rst = nb_forward(graph, el=el, er=er, feat_src=feat_src)
        return rst


def attention_reference(module, edge_index, el, er, feat_src):
    src, dst = edge_index
    n = er.shape[0]
    logits = (module.leaky_relu(el[src] + er[dst]) * module.attn_l).sum(-1, keepdim=True)
    weights = torch.exp(logits)
    total = torch.zeros(n, *weights.shape[1:], dtype=weights.dtype).index_add(0, dst, weights)
    alpha = weights / total[dst]
    return torch.zeros(n, *feat_src.shape[1:], dtype=weights.dtype).index_add(0, dst, alpha * feat_src[src])


def test_seastar_gat_module_verbatim():
    torch.manual_seed(0)
    heads, width = 3, 5
    module = Attention(heads, width)
    ei = random_graph(N, N, 90, seed=6)
    el = torch.randn(N, heads, width, dtype=torch.float64, requires_grad=True)
    er = torch.randn(N, heads, width, dtype=torch.float64, requires_grad=True)
    h = torch.randn(N, heads, width, dtype=torch.float64, requires_grad=True)
    out = module(sl.Graph.from_edge_index(ei, N), el, er, h)
    nonempty = torch.bincount(ei[1], minlength=N) > 0
    expected = attention_reference(module, ei, el, er, h)
    torch.testing.assert_close(out[nonempty], expected[nonempty])
    assert torch.all(out[~nonempty] == 0)
    inputs = [el, er, h, module.attn_l]
    for a, b in zip(grads(out, inputs), grads(expected * nonempty[:, None, None], inputs)):
        torch.testing.assert_close(a, b)
    # a second forward defines nb_forward again: it must reuse the compiled kernel
    from seastar_layers.runtime import jit

    before = jit.build_count
    module(sl.Graph.from_edge_index(ei, N), el, er, h)
    assert jit.build_count == before


def test_closed_over_parameter_gets_gradient():
    weight = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)

    def prog_fn(v):
        return sum(torch.tanh(nb.h * weight) for nb in v.innbs) * (weight * 2).sum()

    ei = random_graph(N, N, 60, seed=7)
    h = features()["h"]
    out = sl.compile(prog_fn)(ei, h=h)
    expected = oracle(prog_fn, ei, N, out, h=h)
    torch.testing.assert_close(out, expected)
    for a, b in zip(grads(out, [h, weight]), grads(expected, [h, weight])):
        torch.testing.assert_close(a, b)


def test_detach_stops_gradients_as_torch_does():
    """x.detach() is the value with no gradient through it: a closed-over tensor read only detached
    gets none (.grad stays None, as in torch), the backward computes none, and a feature's gradient
    keeps only its other paths."""
    slope = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def prog_fn(v):
        return sum(torch.where(nb.h > 0, nb.h, nb.h * slope.detach()) * (weight * 2).detach() * nb.h.detach()
                   + weight for nb in v.innbs)

    ei = random_graph(N, N, 60, seed=8)
    h = features()["h"]
    prog = sl.compile(prog_fn)
    assert "gradient:slope" not in prog.source(h=h)
    out = prog(ei, h=h)
    expected = oracle(prog_fn, ei, N, out, h=h)
    assert_close(out, expected)
    ours, theirs = grads(out, [h, slope, weight]), grads(expected, [h, slope, weight])
    assert ours[1] is None and theirs[1] is None
    assert_close(ours[0], theirs[0])
    assert_close(ours[2], theirs[2])


GENERIC = [c for c in CASES if c[0] not in (methods,)]  # methods uses .mean over a feature axis


@pytest.mark.parametrize("fn,names", GENERIC, ids=[c[0].__name__ for c in GENERIC])
def test_shape_generic_kernels_match_oracle(fn, names):
    from seastar_layers.runtime import jit

    ei = random_graph(N, N, 80, seed=12)
    prog = sl.compile(fn, generic_shapes=True)
    for width in (4, 7):  # one kernel for both widths
        gen = torch.Generator().manual_seed(width)
        feats = features(n_edges=ei.shape[1])
        used = {n: torch.randn(*feats[n].shape[:-1], width if feats[n].shape[-1] == 4 else feats[n].shape[-1],
                               generator=gen, dtype=torch.float64).requires_grad_() for n in names}
        before = jit.build_count
        out = prog(ei, **used)
        if width == 7:
            assert jit.build_count == before
        expected = oracle(fn, ei, N, out, **used)
        assert_close(out, expected)
        inputs = list(used.values())
        assert_close(grads(out, inputs), grads(expected, inputs))


def test_shape_generic_refuses_mean_over_runtime_axis():
    def prog(v):
        return sum(nb.x for nb in v.innbs).mean(-1)

    with pytest.raises(sl.CompileError, match="fixed only at run time"):
        sl.compile(prog, generic_shapes=True)(random_graph(N, N, 10), x=torch.randn(N, 4))


def test_programs_accept_every_graph_format():
    from torch_geometric import EdgeIndex

    from seastar_layers.compat import import_dgl

    dgl = import_dgl()
    ei = random_graph(N, N, 70, seed=13)
    feats = features()
    h, norm = feats["h"], feats["norm"]
    prog = sl.compile(weighted_sum)
    expected = prog(ei, h=h, norm=norm)
    g = dgl.graph((ei[0], ei[1]), num_nodes=N)
    for fmt, graph in {"EdgeIndex": EdgeIndex(ei, sparse_size=(N, N)),
                       "sorted EdgeIndex": EdgeIndex(ei, sparse_size=(N, N)).sort_by("col")[0],
                       "DGLGraph": g, "int32 DGLGraph": g.int()}.items():
        out = prog(graph, h=h, norm=norm)
        if fmt == "sorted EdgeIndex":  # edges reordered: same sums up to rounding
            torch.testing.assert_close(out, expected, msg=fmt)
        else:
            torch.testing.assert_close(out, expected, atol=0, rtol=0, msg=fmt)
    seeds = torch.arange(0, N, 2)
    block = dgl.to_block(dgl.in_subgraph(g, seeds), dst_nodes=seeds)
    src_ids = block.srcdata[dgl.NID]
    out = prog(block, h=h[src_ids], norm=norm[src_ids])
    torch.testing.assert_close(out, expected[seeds])
