"""Softmax logits far from zero (issue 38): every GAT kernel variant subtracts the row max, so logits of
+-100 (+-1e4 in float32) give finite results equal to the stock layers', attention dropout included,
and so does a custom program that writes its own dropout. A program whose softmax cannot be
stabilised says so when it compiles.

The layers get integer weights and features, and attention vectors scaled until the largest logit
passes the target: every projection and score is then exact in every dtype, so half precision is
compared as closely as float32 (only the results' rounding differs)."""
import math
import os
import warnings

import pytest
import torch
import torch_geometric.nn as pyg_nn
from helpers import random_graph, stock_dropout_replays

import seastar_layers as sl
from seastar_layers.codegen.cuda import SPLIT_DEGREE
from seastar_layers.ir import Op, Space
from seastar_layers.nn.programs import FAMILIES
from seastar_layers.passes.softmax import reaches_a_sum
from seastar_layers.base import COMPUTE_DTYPE

pytestmark = pytest.mark.filterwarnings("error::seastar_layers.UnstabilisedSoftmaxWarning")

N, F_IN, E = 12, 6, 40
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 6e-2}
SCALES = [(dtype, 100.0) for dtype in DTYPES] + [(torch.float32, 1e4), (torch.float64, 1e4)]


def integers(shape, gen, low=-1, high=1) -> torch.Tensor:
    return torch.randint(low, high + 1, shape, generator=gen).double()


# --- every generated kernel is stabilised --------------------------------------------------------
def test_every_prebuilt_variant_subtracts_the_row_max():
    """The guard that would have caught issue 38: in every variant the layers are built with, every
    exponential summed over a neighbourhood, forward and backward, is the stabilised one, and
    generating them warns of nothing."""
    checked = 0
    for family in FAMILIES:
        for options, dtype, program, features in family.variants():
            with warnings.catch_warnings():
                warnings.simplefilter("error", sl.UnstabilisedSoftmaxWarning)
                generated = program.generate(features, "cpu")
            # a variant for calls autograd does not record has no backward
            for schedule in filter(None, (generated.forward, generated.backward)):
                prog = schedule.program
                for i, n in enumerate(prog.nodes):
                    if n.op is Op.EXP and n.space in (Space.EDGE, Space.SRC) and reaches_a_sum(prog, i):
                        assert n.attr("stabilised"), f"{family.name} {options} {dtype}: exp %{i} not stabilised"
                        checked += 1
    assert checked >= 256  # each GAT variant has its softmax, forward and backward


# --- the layers, against the stock layers with our dropout draws replayed ------------------------
def _scaled_to(target: float, logits: torch.Tensor, attention: list[torch.Tensor]) -> None:
    """Multiplies the attention vectors by the integer that takes the largest |logit| past target."""
    k = math.ceil(target / logits.abs().max().item())
    with torch.no_grad():
        for a in attention:
            a.mul_(k)


def pyg_layers(options: dict, dtype, target: float, gen):
    ref = pyg_nn.GATConv(F_IN, options.get("out", 4), **{k: v for k, v in options.items() if k != "out"},
                         dropout=0.5).double()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(integers(p.shape, gen))
    x, ei = integers((N, F_IN), gen), random_graph(N, N, E, seed=1)
    edge_attr = integers((ei.shape[1], 3), gen) if "edge_dim" in options else None
    heads, out = ref.heads, ref.out_channels
    h = (x @ ref.lin.weight.T).view(N, heads, out)
    a_src, a_dst = (h * ref.att_src).sum(-1), (h * ref.att_dst).sum(-1)
    loops = torch.arange(N).repeat(2, 1) if options.get("add_self_loops", True) else torch.empty(2, 0, dtype=int)
    src, dst = torch.cat([ei, loops], 1)
    logits = a_src[src] + a_dst[dst]
    attention = [ref.att_src, ref.att_dst]
    if edge_attr is not None:
        rows = torch.cat([edge_attr, torch.full((loops.shape[1], 3), options["fill_value"])])
        logits = logits + (ref.lin_edge(rows).view(-1, heads, out) * ref.att_edge).sum(-1)
        attention.append(ref.att_edge)
    _scaled_to(target, logits, attention)
    ours = sl.GATConv(F_IN, out, **{k: v for k, v in options.items() if k != "out"}, dropout=0.5)
    ours.load_state_dict(ref.state_dict())
    ours.to(dtype)
    args = (x, ei) if edge_attr is None else (x, ei, edge_attr)
    return ref.train(), ours.train(), args


def dgl_layers(options: dict, dtype, target: float, gen):
    from seastar_layers.compat import import_dgl

    dgl = import_dgl()
    import seastar_layers.dgl as sd

    heads, out = options["heads"], options.get("out", 4)
    ref = dgl.nn.GATConv(F_IN, out, num_heads=heads, attn_drop=0.5).double()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(integers(p.shape, gen))
    src, dst = random_graph(N, N, E, seed=1)
    g = dgl.add_self_loop(dgl.graph((src, dst), num_nodes=N))
    x = integers((N, F_IN), gen)
    h = (x @ ref.fc.weight.T).view(N, heads, out)
    src, dst = g.edges()
    _scaled_to(target, (h * ref.attn_l).sum(-1)[src] + (h * ref.attn_r).sum(-1)[dst], [ref.attn_l, ref.attn_r])
    ours = sd.GATConv(F_IN, out, num_heads=heads, attn_drop=0.5)
    ours.load_state_dict(ref.state_dict())
    ours.to(dtype)
    return ref.train(), ours.train(), (g, x)


def kept_coefficients(ours, args, seed: int, attention_of) -> torch.Tensor:
    """Which (edge, head) coefficients our layer's dropout keeps under `seed`: its draws depend on the
    seed and the edge alone, so a call with the attention vectors zeroed (every logit 0, every kept
    weight nonzero) shows them."""
    attention = [p for name, p in ours.named_parameters() if name.startswith("att")]
    saved = [p.detach().clone() for p in attention]
    with torch.no_grad():
        for p in attention:
            p.zero_()
        torch.manual_seed(seed)
        kept = attention_of(ours, args) != 0
        for p, value in zip(attention, saved):
            p.copy_(value)
    return kept


def _cast(args, dtype):
    return tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def run(layer, args, seed, loss_weights=None, **kwargs):
    """Output (its first tensor) and the gradients of every floating input and parameter, as float64."""
    leaves = [a.detach().clone().requires_grad_() if torch.is_tensor(a) and a.is_floating_point() else a
              for a in args]
    layer.zero_grad()
    torch.manual_seed(seed)
    result = layer(*leaves, **kwargs)
    out = result[0] if isinstance(result, tuple) else result
    weights = loss_weights if loss_weights is not None else \
        integers(out.shape, torch.Generator().manual_seed(3))
    (out * weights.to(out.dtype)).sum().backward()
    grads = [a.grad.double() for a in leaves if torch.is_tensor(a) and a.grad is not None]
    grads += [p.grad.double() for _, p in sorted(layer.named_parameters()) if p.grad is not None]
    extra = result[1] if isinstance(result, tuple) else None
    return out.detach().double(), grads, extra


def compare(ref, ours, args, dtype, kept, target, seed=7, **kwargs):
    tol = TOLERANCE[dtype]
    # a score's gradient is a difference of terms as large as the logits: rounding them to the dtype
    # costs target * eps of a gradient of order 1
    grad_tol = tol * max(1.0, target / 100)
    got, got_grads, got_extra = run(ours, _cast(args, dtype), seed, **kwargs)
    assert torch.isfinite(got).all(), "non-finite output"
    for g in got_grads:
        assert torch.isfinite(g).all(), "non-finite gradient"
    with stock_dropout_replays(kept):
        want, want_grads, want_extra = run(ref, args, seed, **kwargs)
    scale = want.abs().max().item() + 1
    torch.testing.assert_close(got, want, atol=tol * scale, rtol=tol)
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=grad_tol * (w.abs().max().item() + 1), rtol=grad_tol)
    return got_extra, want_extra


def _pyg_attention(layer, args):
    return layer(*args, return_attention_weights=True)[1][1]


def _dgl_attention(layer, args):
    return layer(*args, get_attention=True)[1]


PYG_OPTIONS = [dict(heads=2), dict(heads=8, out=8), dict(heads=2, add_self_loops=False),
               dict(heads=2, edge_dim=3, fill_value=1.0)]


EMULATED = [(torch.float32, 100.0), (torch.float32, 1e4), (torch.float16, 100.0)]


@pytest.mark.parametrize("dtype,target", SCALES, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("options", PYG_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("with_attention", [False, True], ids=["out", "attention"])
def test_pyg_gat_dropout_with_large_logits(options, dtype, target, with_attention):
    pyg_case(options, dtype, target, with_attention)


def gat_variant_inputs(heads, channels, with_edge, with_mask, target, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ei = random_graph(N, N, E, seed=3)
    e = ei.shape[1]
    feats = {"a_src": integers((N, heads, 1), gen, -4, 4), "a_dst": integers((N, heads, 1), gen, -4, 4),
             "x": integers((N, heads, channels), gen)}
    if with_edge:
        feats["a_edge"] = integers((e, heads, 1), gen, -4, 4)
    if with_mask:
        feats["mask"] = integers((e, heads, 1), gen, 1, 3)  # nonzero: a zero would hide a kept draw
    logits = feats["a_src"][ei[0]] + feats["a_dst"][ei[1]] + (feats["a_edge"] if with_edge else 0)
    k = math.ceil(target / logits.abs().max().item())
    for name in ("a_src", "a_dst", "a_edge"):
        if name in feats:
            feats[name] = feats[name] * k
    return ei, {name: t.to(dtype) for name, t in feats.items()}


def gat_reference(ei, feats, kept, slope):
    src, dst = ei
    f = {name: t.double() for name, t in feats.items()}
    logits = torch.nn.functional.leaky_relu(f["a_src"][src] + f["a_dst"][dst] + f.get("a_edge", 0), slope)
    alpha = torch.zeros_like(logits)
    for v in range(N):
        rows = dst == v
        if rows.any():
            alpha[rows] = torch.softmax(logits[rows], dim=0)
    alpha = alpha * f.get("mask", 1) * kept
    return torch.zeros(N, *f["x"].shape[1:], dtype=torch.float64).index_add(0, dst, alpha * f["x"][src]), alpha


@pytest.mark.parametrize("dtype,target", EMULATED, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("with_edge,with_mask", [(False, False), (True, False), (False, True)],
                         ids=["plain", "edge", "mask"])
@pytest.mark.parametrize("heads,channels", [(2, 3), (8, 8)], ids=["2x3", "8x8"])
def test_gat_variants_with_large_logits_under_cuda_emulation(monkeypatch, heads, channels, with_edge, with_mask,
                                                              dtype, target):
    """The layers' own GAT programs with attention dropout (the variants setup.py builds, 8 x 8 with
    its pinned kernels), in the CUDA dialect under the emulator, against torch's softmax with the
    program's draws replayed, forward and backward."""
    from seastar_layers.nn.programs import gat_attention

    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    compute = COMPUTE_DTYPE[dtype]
    slope, keep = torch.tensor(0.2, dtype=compute), torch.tensor(0.5, dtype=compute)
    ei, feats = gat_variant_inputs(heads, channels, with_edge, with_mask, target, dtype)
    variant = dict(with_dst=True, with_edge=with_edge, with_mask=with_mask, slope=slope, keep=keep)
    zero_logits = {k: torch.zeros_like(v) if k.startswith("a_") else v for k, v in feats.items()}
    torch.manual_seed(3)
    kept = gat_attention(**variant, with_attention=True)(ei, **zero_logits)[1] != 0
    assert 0 < kept.sum() < kept.numel()
    leaves = {k: v.clone().requires_grad_() for k, v in feats.items()}
    torch.manual_seed(3)
    out, alpha = gat_attention(**variant, with_attention=True, for_backward=True)(ei, **leaves)
    wide = {k: v.double().requires_grad_() for k, v in feats.items()}
    expected, expected_alpha = gat_reference(ei, wide, kept, 0.2)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), expected.detach(), atol=tol * 4, rtol=tol)
    torch.testing.assert_close(alpha.double(), expected_alpha.detach(), atol=tol, rtol=tol)
    weights = integers(out.shape, torch.Generator().manual_seed(4))
    got = torch.autograd.grad((out * weights.to(dtype)).sum(), list(leaves.values()))
    want = torch.autograd.grad((expected * weights).sum(), list(wide.values()))
    grad_tol = tol * max(1.0, target / 100)
    for g, w, name in zip(got, want, leaves):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w, atol=grad_tol * (w.abs().max().item() + 1), rtol=grad_tol,
                                   msg=name)
    torch.manual_seed(3)
    plain = gat_attention(**variant)(ei, **feats)  # the inference variant, without the attention
    torch.testing.assert_close(plain.double(), expected.detach(), atol=tol * 4, rtol=tol)


def pyg_case(options, dtype, target, with_attention):
    gen = torch.Generator().manual_seed(0)
    ref, ours, args = pyg_layers(options, dtype, target, gen)
    kept = kept_coefficients(ours, _cast(args, dtype), 7, _pyg_attention)
    kwargs = dict(return_attention_weights=True) if with_attention else {}
    got, want = compare(ref, ours, args, dtype, kept, target, **kwargs)
    if with_attention:
        torch.testing.assert_close(got[1].double(), want[1], atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    # without a backward to record, the forward runs its inference variant
    with torch.no_grad():
        torch.manual_seed(7)
        result = ours(*_cast(args, dtype), **kwargs)
    assert torch.isfinite(result[0] if with_attention else result).all()


@pytest.mark.parametrize("dtype,target", SCALES, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("options", [dict(heads=2), dict(heads=8, out=8)], ids=["heads=2", "heads=8,out=8"])
@pytest.mark.parametrize("with_attention", [False, True], ids=["out", "attention"])
def test_dgl_gat_dropout_with_large_logits(options, dtype, target, with_attention):
    gen = torch.Generator().manual_seed(0)
    ref, ours, args = dgl_layers(options, dtype, target, gen)
    kept = kept_coefficients(ours, _cast(args, dtype), 7, _dgl_attention)
    kwargs = dict(get_attention=True) if with_attention else {}
    got, want = compare(ref, ours, args, dtype, kept, target, **kwargs)
    if with_attention:
        torch.testing.assert_close(got.double(), want, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


def test_issue_38_reproduction():
    from torch_geometric.nn import GATConv as PygGAT

    torch.manual_seed(0)
    ei = torch.randint(0, 20, (2, 80))
    x = torch.randn(20, 16) * 30
    ours = sl.GATConv(16, 8, heads=2, dropout=0.6).train()
    ref = PygGAT(16, 8, heads=2, dropout=0.6).train()
    ref.load_state_dict(ours.state_dict())
    assert torch.isfinite(ours(x, ei)).all() and torch.isfinite(ref(x, ei)).all()


# --- custom programs with their own dropout ------------------------------------------------------
KEEP = 0.6


def dropout_kept_branch(v):
    weights = [torch.exp(e.src.s + v.d) for e in v.inedges]
    total = sum(weights)
    kept = [torch.where(torch.rand_like(w) < KEEP, w, 0) for w in weights]
    return torch.where(len(v.innbs) > 0, sum(k * e.src.h for k, e in zip(kept, v.inedges)) / total, 0), \
        [k / total for k in kept]


def dropout_zero_branch_first(v):
    weights = [torch.exp(e.src.s + v.d) for e in v.inedges]
    kept = [torch.where(torch.rand_like(w) >= KEEP, 0, w) for w in weights]
    total = sum(weights)
    return torch.where(len(v.innbs) > 0, sum(k * e.src.h for k, e in zip(kept, v.inedges)) / total, 0), \
        [k / total for k in kept]


def dropout_of_the_exponential(v):
    # the exp inside the dropout, summed only through it and through relu (positively homogeneous)
    kept = [torch.where(torch.rand_like(e.src.s) < KEEP, torch.exp(e.src.s + v.d), 0) for e in v.inedges]
    weights = [torch.relu(torch.exp(e.src.s + v.d)) for e in v.inedges]
    total = sum(weights)
    return torch.where(len(v.innbs) > 0, sum(k * e.src.h for k, e in zip(kept, v.inedges)) / total, 0), \
        [k / total for k in kept]


def log_sum_exp(v):
    return torch.log(sum(torch.exp(e.src.s + v.d) for e in v.inedges))


PROGRAMS = [dropout_kept_branch, dropout_zero_branch_first, dropout_of_the_exponential]


def program_inputs(target: float, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    s, d = integers((N, 2, 1), gen, -4, 4), integers((N, 2, 1), gen, -4, 4)
    ei = random_graph(N, N, E, seed=2)
    k = math.ceil(target / (s[ei[0]] + d[ei[1]]).abs().max().item())
    return ei, dict(s=(s * k).to(dtype), d=(d * k).to(dtype), h=integers((N, 2, 3), gen).to(dtype))


def reference(ei, s, d, h, kept):
    """Softmax over each row's in-edges in float64 (torch's, which subtracts the max), dropped where
    the program dropped, weighting h."""
    src, dst = ei
    logits = (s[src] + d[dst]).double()
    alpha = torch.zeros_like(logits)
    for v in range(N):
        rows = dst == v
        if rows.any():
            alpha[rows] = torch.softmax(logits[rows], dim=0)
    alpha = alpha * kept
    out = torch.zeros(N, 2, 3, dtype=torch.float64).index_add(0, dst, alpha * h[src].double())
    return out, alpha


@pytest.mark.parametrize("dtype,target", SCALES, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_custom_dropout_programs_with_large_logits(fn, dtype, target):
    custom_program_case(fn, dtype, target)


@pytest.mark.parametrize("dtype,target", EMULATED, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("fn", PROGRAMS[:2], ids=lambda f: f.__name__)
def test_custom_dropout_programs_with_large_logits_under_cuda_emulation(monkeypatch, fn, dtype, target):
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    custom_program_case(fn, dtype, target)


def custom_program_case(fn, dtype, target):
    prog = sl.compile(fn)
    ei, features = program_inputs(target, dtype)
    zeros = {**features, "s": torch.zeros_like(features["s"]), "d": torch.zeros_like(features["d"])}
    torch.manual_seed(5)
    kept = prog(ei, **zeros)[1] != 0
    assert 0 < kept.sum() < kept.numel()  # some dropped, some kept
    leaves = {k: v.detach().clone().requires_grad_() for k, v in features.items()}
    torch.manual_seed(5)
    out, alpha = prog(ei, **leaves)
    expected, expected_alpha = reference(ei, *(features[k].double().requires_grad_() for k in "sdh"), kept)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), expected.detach(), atol=tol * 4, rtol=tol)
    torch.testing.assert_close(alpha.double(), expected_alpha.detach(), atol=tol, rtol=tol)
    weights = integers(out.shape, torch.Generator().manual_seed(3))
    got = torch.autograd.grad((out * weights.to(dtype)).sum(), list(leaves.values()))
    ref_leaves = [features[k].double().requires_grad_() for k in "sdh"]
    want = torch.autograd.grad((reference(ei, *ref_leaves, kept)[0] * weights).sum(), ref_leaves)
    for g, w, name in zip(got, want, "sdh"):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w, atol=tol * (w.abs().max().item() + 1), rtol=tol, msg=name)


@pytest.mark.parametrize("target", [100.0, 1e4])
def test_log_sum_exp_is_shifted_back(target):
    """log(sum(exp(x))) is computed as m + log(sum(exp(x - m))): exact, and finite where exp(x) is not."""
    ei, features = program_inputs(target, torch.float32)
    leaves = {k: features[k].clone().requires_grad_() for k in "sd"}
    out = sl.compile(log_sum_exp)(ei, **leaves)
    src, dst = ei
    logits = (features["s"][src] + features["d"][dst]).double()
    expected = torch.stack([torch.logsumexp(logits[dst == v], 0) if (dst == v).any()
                            else torch.full((2, 1), -math.inf, dtype=torch.float64) for v in range(N)])
    has_edges = torch.bincount(dst, minlength=N) > 0
    torch.testing.assert_close(out[has_edges].double(), expected[has_edges], atol=1e-6 * target, rtol=1e-6)
    out[has_edges].sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves.values())


# --- the CUDA dialect's online softmax: the row max taken in the sweep of its sums -----------------
def attention_concentration(v):
    """sum_e alpha_e^2: a sum of squared exponentials, which the running max rescales by its step squared."""
    weights = [torch.exp(e.src.s + v.d) for e in v.inedges]
    total = sum(weights)
    return sum(w * w for w in weights) / (total * total)


def two_softmaxes(v):
    """sum_e alpha_e beta_e of two softmaxes: a sum two maxima scale, which a running max cannot
    rescale alone, so the maxima keep a sweep of their own."""
    first = [torch.exp(e.src.s + v.d) for e in v.inedges]
    second = [torch.exp(e.src.s * 2 - v.d) for e in v.inedges]
    return sum(a * b for a, b in zip(first, second)) / (sum(first) * sum(second))


def online_reference(fn, ei, s, d):
    src, dst = ei
    first = s[src] + d[dst]
    out = torch.zeros(N, 2, 1, dtype=torch.float64)
    for v in range(N):
        rows = dst == v
        if rows.any():
            p = torch.softmax(first[rows], dim=0)
            q = p if fn is attention_concentration else torch.softmax((s[src] * 2 - d[dst])[rows], dim=0)
            out[v] = (p * q).sum(0)
    return out


def test_every_gat_variant_sweeps_its_edges_once_on_cuda():
    """On the CUDA dialect each GAT variant's forward takes its row max in the sweep of its sums (a
    second sweep only writes the attention weights, which read the final sum); the CPU's keeps its
    max sweep."""
    from seastar_layers.nn.programs import GAT_ATTENTION

    for options, _, program, features in GAT_ATTENTION.variants((torch.float32,)):
        sweeps = 1 + ("with_attention" in options)
        for target, expected in (("cuda", sweeps), ("cpu", sweeps + 1)):
            (kernel,) = program.generate(features, target).forward.kernels
            assert len(kernel.loops) == expected, (options, target)
        assert program.generate(features, "cuda").forward.kernels[0].loops[0].running, options


@pytest.mark.parametrize("hub", [False, True], ids=["", "hub"])
@pytest.mark.parametrize("target", [100.0, 1e4])
@pytest.mark.parametrize("fn,online", [(attention_concentration, True), (two_softmaxes, False)],
                         ids=["concentration", "two_softmaxes"])
def test_online_softmax_under_cuda_emulation(monkeypatch, fn, online, target, hub):
    """Rows whose max rises at every edge (head 0) and at the first edge only (head 1), logits past
    target, under the emulator: forward and gradients equal torch's softmax in float64. With a hub,
    whose edges the block's groups split: their running maxima differ, and their sums are rescaled
    to the row's when they combine."""
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    ei = random_graph(N, N, E, seed=2)
    if hub:
        sources = torch.randint(0, N, (SPLIT_DEGREE + E,), generator=torch.Generator().manual_seed(3))
        ei = torch.cat([ei, torch.stack([sources, torch.zeros_like(sources)])], dim=1)
    ei = ei[:, ei[0].argsort(stable=True)]  # each row's sources ascend, whatever order its CSR keeps
    u = torch.arange(N, dtype=torch.float64) * math.ceil(target / N)
    s = torch.stack([u, -u], 1).unsqueeze(-1)  # integers: every logit exact in float32
    d = integers((N, 2, 1), torch.Generator().manual_seed(1), -4, 4)
    prog = sl.compile(fn)
    features = dict(s=s.float(), d=d.float())
    (kernel,) = prog.generate(features, "cuda").forward.kernels
    assert bool(kernel.loops[0].running) == online and len(kernel.loops) == (1 if online else 2)
    leaves = {k: v.clone().requires_grad_() for k, v in features.items()}
    out = prog(ei, **leaves)
    wide = [s.clone().requires_grad_(), d.clone().requires_grad_()]
    expected = online_reference(fn, ei, *wide)
    has_edges = torch.bincount(ei[1], minlength=N) > 0
    torch.testing.assert_close(out[has_edges].double(), expected[has_edges].detach(), atol=1e-6, rtol=1e-5)
    weights = integers(out.shape, torch.Generator().manual_seed(4)) * has_edges.view(N, 1, 1)
    got = torch.autograd.grad((out[has_edges] * weights[has_edges].float()).sum(), list(leaves.values()))
    want = torch.autograd.grad((expected[has_edges] * weights[has_edges]).sum(), wide)
    for g, w, name in zip(got, want, "sd"):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w, atol=1e-5 * (w.abs().max().item() + 1), rtol=1e-5, msg=name)


# --- what cannot be stabilised says so ------------------------------------------------------------
def unnormalised_exp_sum(v):
    return sum(torch.exp(e.src.s + v.d) * e.src.h for e in v.inedges)


def thresholded_weights(v):
    weights = [torch.exp(e.src.s + v.d) for e in v.inedges]
    total = sum(weights)
    big = [torch.where(w > 2.0, w, 0) for w in weights]
    return sum(b * e.src.h for b, e in zip(big, v.inedges)) / total


@pytest.mark.filterwarnings("default::seastar_layers.UnstabilisedSoftmaxWarning")
@pytest.mark.parametrize("fn,line,reason", [
    (unnormalised_exp_sum, "return sum(torch.exp", "a result that scales with the exponentials"),
    (thresholded_weights, "big = [torch.where(w > 2.0", "gt of values scaled differently"),
])
def test_a_softmax_that_cannot_be_stabilised_warns_at_its_line(fn, line, reason):
    ei, features = program_inputs(1.0, torch.float32)
    with pytest.warns(sl.UnstabilisedSoftmaxWarning, match=reason) as caught:
        sl.compile(fn)(ei, **features)
    message = str(caught[0].message)
    assert os.path.basename(__file__) in message and line in message
    with open(__file__) as f:  # the warning is reported at that line of this file
        assert line in f.readlines()[caught[0].lineno - 1] and caught[0].filename == __file__
