"""The layers' programs as registered torch ops (torch.ops.seastar_layers.*): every specialisation the
extension holds against the same program run through the compiler's own path, opcheck on every op,
the checks of the C++ entry points, and calls from TorchScript and a fresh process."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import checked_variants, random_graph

import seastar_layers as sl
from seastar_layers.base import COMPUTE_DTYPE, FOR_BACKWARD, variant_key
from seastar_layers.runtime import library
from seastar_layers.graph import csr_layouts
from seastar_layers.nn.programs import FAMILIES, GAT_ATTENTION, WEIGHTED_SUM, prebuilt_variants

N = 9
EI = random_graph(N, N, 30, seed=3)
GRAPH = sl.Graph.from_edge_index(EI, N)
OPS = torch.ops.seastar_layers


# sizes for each variant's declared shapes: heads and channels apart, then equal, then 1
SIZES = [{2: 3, 3: 5}, {2: 4, 3: 4}, {2: 1, 3: 1}]


def random_inputs(family, features, seed, sizes=SIZES[0], options=()):
    """Random features of the variant's declared shapes on GRAPH (the examples' sizes 2 and 3
    replaced by `sizes`), random parameters (the optional ones in `options`), and where the
    variant draws random numbers, a seed."""
    gen = torch.Generator().manual_seed(seed)
    rows = {3: N, 4: GRAPH.num_edges}  # the examples' rows: 3 per vertex, 4 per edge
    tensors = {}
    for name, t in features.items():
        shape = [sizes.get(d, d) for d in t.shape[1:]]
        tensors[name] = torch.randn(rows[t.shape[0]], *shape, generator=gen, dtype=t.dtype)
    dtype = next(iter(features.values())).dtype
    for p in family.params + tuple(p for p in family.optional_params if p in options):
        tensors[p] = torch.rand((), generator=gen, dtype=COMPUTE_DTYPE[dtype])
    if family.seeded_by in options:
        tensors["seed"] = torch.randint(0, 2**62, (), generator=gen)
    return tensors


def tolerance(dtype):
    """Both paths run the same kernel; half-precision gradients may sum in another order."""
    return {"rtol": 0, "atol": 0} if dtype in (torch.float32, torch.float64) else {}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_variant_equals_its_program(family):
    """The entry point chooses the variant, binds its sizes and wires its buffers: results and
    gradients equal the program's through the compiler's path, for every specialisation compiled
    into the extension (every option and switch) and those compiled on first use (checked_variants),
    and several sizes each."""
    for k, (options, dtype, program, features) in enumerate(checked_variants(family)):
        if FOR_BACKWARD in options:
            continue  # the autograd kernel turns it on: the calls below that record a backward run these
        for sizes in SIZES:
            tensors = random_inputs(family, features, k, sizes, options)
            tensors.pop("seed", None)  # each path draws one from torch's generator: seeded alike below
            tensors = {n: t.requires_grad_() for n, t in tensors.items()}
            feats = {n: t for n, t in tensors.items() if family.is_feature(n)}
            switches = {s: True for s in family.switches if s in options}

            def program(for_backward: bool):
                recorded = {FOR_BACKWARD: for_backward} if FOR_BACKWARD in family.switches else {}
                return family.build(**{flag: feature in options for feature, flag in family.optional}, **switches,
                                    **recorded, **{p: tensors[p] for p in family.params},
                                    **{p: tensors.get(p) for p in family.optional_params})

            def results(outputs):
                return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]

            with torch.no_grad():  # nothing recorded: the variant without the backward's sums
                torch.manual_seed(k)
                ours = family(GRAPH, **tensors, **switches)
                torch.manual_seed(k)
                theirs = results(program(False)(GRAPH, **feats))
            for got, want in zip(ours, theirs, strict=True):
                torch.testing.assert_close(got, want, **tolerance(dtype))
            torch.manual_seed(k)
            ours = family(GRAPH, **tensors, **switches)
            torch.manual_seed(k)
            theirs = results(program(True)(GRAPH, **feats))
            assert len(ours) == len(theirs)
            for got, want in zip(ours, theirs):
                torch.testing.assert_close(got, want, **tolerance(dtype))
            projections = [torch.randn_like(r) for r in ours]
            got = torch.autograd.grad(sum((r * p).sum() for r, p in zip(ours, projections)), list(tensors.values()),
                                      allow_unused=True)
            want = torch.autograd.grad(sum((r * p).sum() for r, p in zip(theirs, projections)),
                                       list(tensors.values()), allow_unused=True)
            for name, g, w in zip(tensors, got, want, strict=True):
                if w is None:  # a parameter the program reads only through others
                    w = torch.zeros_like(tensors[name])
                torch.testing.assert_close(g, w, **tolerance(dtype),
                                           msg=lambda m, name=name: f"{family.name} {options} {dtype} {name}: {m}")


def opcheck_cases():
    return [pytest.param(family, options, features, id=f"{family.name}-{'-'.join(options)}-{dtype}")
            for family in FAMILIES for options, dtype, _, features in checked_variants(family)
            if dtype in (torch.float32, torch.float16)]


def op_args(family, options, tensors):
    return ([GRAPH.tensors()] + [tensors.get(name) for name in family.arguments]
            + [s in options for s in family.switches])


@pytest.mark.parametrize("family,options,features", opcheck_cases())
def test_opcheck(family, options, features):
    """Schema, fake implementation, autograd registration and AOT dispatch of the forward op, then
    of the backward op, for each set of options (float32 and float16). A variant with the switch
    for_backward off is for calls autograd does not record: it has no backward, and says so."""
    tensors = random_inputs(family, features, seed=1, options=options)
    args = op_args(family, options, {n: t.detach().requires_grad_() if t.is_floating_point() else t
                                     for n, t in tensors.items()})
    forward = getattr(OPS, family.name)
    torch.library.opcheck(forward, tuple(args))
    results, saved = forward(*op_args(family, options, tensors))
    grads = [torch.randn_like(r) for r in results]
    backward_args = tuple(op_args(family, options, tensors) + [saved, grads])
    if FOR_BACKWARD in family.switches and FOR_BACKWARD not in options:
        with pytest.raises(ValueError, match="computes no backward .* pass for_backward=True"):
            getattr(OPS, f"{family.name}_backward")(*backward_args)
        return
    torch.library.opcheck(getattr(OPS, f"{family.name}_backward"), backward_args)


@pytest.mark.parametrize("num_src,num_dst,edges,with_listed", [
    (N, N, 30, False), (N, N, 30, True), (7, 4, 50, True), (5, 3, 0, False), (0, 6, 0, True), (1, 1, 9, True),
], ids=["square", "listed", "bipartite", "no edges", "no sources", "one vertex"])
@pytest.mark.parametrize("by_neighbour", [False, True], ids=["edge order", "by neighbour"])
def test_csr_layouts_op_builds_what_torch_builds(num_src, num_dst, edges, with_listed, by_neighbour):
    """seastar_layers::csr_layouts (the extension's counting sort, which Graph.from_edges uses in
    eager mode on the CPU) gives graph.csr_layouts' arrays, element for element: each row's edges in
    edge order, or by neighbour, then edge id; edges not listed after every row in edge order; and
    passes opcheck."""
    gen = torch.Generator().manual_seed(num_src * 100 + edges)
    src = torch.randint(0, max(num_src, 1), (edges,), generator=gen)
    dst = torch.randint(0, max(num_dst, 1), (edges,), generator=gen)
    listed = torch.rand(edges, generator=gen) < 0.7 if with_listed else None
    ours = OPS.csr_layouts(src, dst, num_src, num_dst, listed, by_neighbour=by_neighbour)
    theirs = csr_layouts(src, dst, num_src, num_dst, listed, by_neighbour)
    for k, (got, want) in enumerate(zip(ours, theirs, strict=True)):
        assert torch.equal(got, want), (k, got, want)
    is_listed = torch.ones(edges, dtype=torch.bool) if listed is None else listed
    for (indptr, others, eids), keys, other_ends in ((ours[:3], dst, src), (ours[3:], src, dst)):
        for r in range(indptr.numel() - 1):
            row = slice(int(indptr[r]), int(indptr[r + 1]))
            expected = [(int(other_ends[k]), k) for k in range(edges) if is_listed[k] and keys[k] == r]
            expected = sorted(expected) if by_neighbour else expected
            assert list(zip(others[row].tolist(), eids[row].tolist())) == expected
        assert eids[int(indptr[-1]):].tolist() == (~is_listed).nonzero().flatten().tolist()
    torch.library.opcheck(OPS.csr_layouts, (src, dst, num_src, num_dst, listed, 0, None, False, by_neighbour))
    narrow = OPS.csr_layouts(src, dst, num_src, num_dst, listed, 0, torch.int32, by_neighbour=by_neighbour)
    assert all(t.dtype == torch.int32 and torch.equal(t, w) for t, w in zip(narrow, ours, strict=True))
    torch.library.opcheck(OPS.csr_layouts, (src, dst, num_src, num_dst, listed, 0, torch.int32, False,
                                            by_neighbour))
    if by_neighbour:  # what from_edges builds: graphs this small keep edge order
        return
    built = sl.Graph.from_edges(src, dst, num_src, num_dst, listed)
    assert all(a.dtype == torch.int32 and torch.equal(a, b) for a, b in zip(built.tensors(), ours, strict=True))


def test_graph_arrays_are_int32_where_the_sizes_fit():
    """index_dtype: int32 while every vertex, edge id and row pointer fits, int64 beyond; every
    constructor that builds the arrays builds them so, whatever the dtype it is given."""
    from seastar_layers.graph import index_dtype

    limit = 2**31 - 1
    assert index_dtype(limit, limit, limit) == torch.int32
    for sizes in [(limit + 1, 1, 1), (1, limit + 1, 1), (1, 1, limit + 1)]:
        assert index_dtype(*sizes) == torch.int64, sizes
    built = [sl.Graph.from_edge_index(EI, N), sl.Graph.from_edge_index(EI.int(), N),
             sl.Graph.from_edges(EI[0], EI[1], N, N, loops=N), sl.Graph(*[t.long() for t in GRAPH.tensors()], N, N)]
    for graph in built:
        assert {t.dtype for t in graph.tensors(with_orders=True)} == {torch.int32}, graph
    src, dst = GRAPH.endpoints()  # int64, as torch's index ops take them
    assert src.dtype == dst.dtype == torch.int64 and torch.equal(src, EI[0]) and torch.equal(dst, EI[1])


def test_int32_and_int64_graphs_give_the_same_results():
    """One kernel reads either index dtype (codegen/cstyle.py: seastar_indices): every family's
    prebuilt variants on GRAPH's int32 arrays and on the same arrays in int64 (as a DGL graph or
    a PyG EdgeIndex shares them) give the same bits, forward and backward."""
    wide = sl.Graph._from_checked([t.long() for t in GRAPH.tensors()], N, N)
    assert GRAPH.in_src.dtype == torch.int32 and wide.in_src.dtype == torch.int64
    for family in FAMILIES:
        prebuilt = [(options, dtype, features) for f, options, dtype, _, features in prebuilt_variants() if f is family]
        for k, (options, dtype, features) in enumerate(prebuilt):
            tensors = {n: t.requires_grad_() for n, t in random_inputs(family, features, k, SIZES[0], options).items()
                       if n != "seed"}
            switches = {s: True for s in family.switches if s in options}
            results = []
            for graph in (GRAPH, wide):
                torch.manual_seed(k)
                out = family(graph, **tensors, **switches)
                projections = [torch.ones_like(r) for r in out]
                grads = torch.autograd.grad(sum((r * p).sum() for r, p in zip(out, projections)),
                                            list(tensors.values()), allow_unused=True)
                results.append([*out, *[g for g in grads if g is not None]])
            for got, want in zip(*results, strict=True):
                torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"{family.name} {options}")


@pytest.mark.parametrize("num_src,num_dst,edges,loops", [(N, N, 30, N), (7, 4, 50, 4), (5, 5, 0, 5), (6, 6, 9, 2)],
                         ids=["square", "bipartite", "no edges", "fewer loops"])
@pytest.mark.parametrize("by_neighbour", [False, True], ids=["edge order", "by neighbour"])
def test_csr_layouts_op_appends_self_loops(num_src, num_dst, edges, loops, by_neighbour):
    """With `loops`, the op appends PyG's self-loop slots by count, without a copy of the edges: the
    same arrays as the torch build over with_self_loops' slots, element for element, whether the
    edges that are loops come unlisted in `listed` or the op leaves them out (unlist_self_loops), and
    Graph.from_edges(loops=...) lists the same slots (its `listed`, derived from the rows); opcheck
    passes."""
    from seastar_layers.nn.edges import listed_with_self_loops, with_self_loops

    gen = torch.Generator().manual_seed(edges + loops)
    src = torch.randint(0, num_src, (edges,), generator=gen)
    dst = torch.randint(0, num_dst, (edges,), generator=gen)
    src[:edges // 4] = dst[:edges // 4] = torch.randint(0, min(num_src, num_dst), (edges // 4,), generator=gen)
    slot_src, slot_dst, listed = with_self_loops(src, dst, loops)
    expected = csr_layouts(slot_src, slot_dst, num_src, num_dst, listed, by_neighbour)
    args = (src, dst, num_src, num_dst, listed_with_self_loops(src, dst, loops), loops, None, False, by_neighbour)
    unlisted_here = (src, dst, num_src, num_dst, None, loops, None, True, by_neighbour)  # the op finds the loops
    for case in (args, unlisted_here):
        for k, (got, want) in enumerate(zip(OPS.csr_layouts(*case), expected, strict=True)):
            assert torch.equal(got, want), (k, got, want)
        torch.library.opcheck(OPS.csr_layouts, case)
    if by_neighbour:  # what from_edges builds: graphs this small keep edge order
        return
    built = sl.Graph.from_edges(src, dst, num_src, num_dst, loops=loops)
    assert all(torch.equal(a, b) for a, b in zip(built.tensors(), expected, strict=True))
    assert torch.equal(built.listed, listed)


@pytest.mark.parametrize("args,error,words", [
    ((torch.tensor([0, 9]), torch.tensor([1, 2]), N, N), ValueError, ["'src' holds 9 at edge 1", "outside [0, 9)"]),
    ((torch.tensor([0, 1]), torch.tensor([-1, 2]), N, N), ValueError, ["'dst' holds -1 at edge 0"]),
    ((torch.tensor([0, 1]), torch.tensor([1]), N, N), ValueError, ["same number of edges", "2 and 1"]),
    ((torch.tensor([0, 1]).int(), torch.tensor([1, 2]), N, N), TypeError, ["'src' must hold int64 indices"]),
    ((torch.tensor([0, 1]), torch.tensor([1, 2]), N, N, torch.ones(2)), TypeError, ["'listed' must be a bool"]),
    ((torch.tensor([0, 1]), torch.tensor([1, 2]), N, -1), ValueError, ["must be >= 0"]),
    ((torch.tensor([0, 1]), torch.tensor([1, 2]), N, 4, None, 5), ValueError, ["'loops'", "[0, 4]", "got 5"]),
    ((torch.tensor([0, 1]), torch.tensor([1, 2]), N, N, torch.ones(2, dtype=torch.bool), 3), ValueError,
     ["one entry per edge slot (5)", "[2]"]),
    ((torch.tensor([0, 1]), torch.tensor([1, 2]), N, N, None, 0, torch.float32), TypeError,
     ["'dtype' must be torch.int32 or torch.int64", "torch.float32"]),
    ((torch.tensor([0, 1]), torch.tensor([1, 2]), 2**31, N, None, 0, torch.int32), ValueError,
     ["2147483648 sources", "do not fit int32", "dtype=torch.int64"]),
], ids=["source", "negative", "lengths", "int32", "listed dtype", "size", "loops", "listed with loops", "dtype",
        "too large for int32"])
def test_csr_layouts_op_refuses_bad_edges(args, error, words):
    with pytest.raises(error) as info:
        OPS.csr_layouts(*args)
    for word in words:
        assert word in str(info.value), str(info.value)


def appnp_reference(h, src_scale, dst_scale, alpha, steps):
    """APPNP's degree-normalised steps with a dense adjacency: plain torch."""
    adjacency = torch.zeros(N, N, dtype=h.dtype).index_put_((EI[1], EI[0]), torch.ones(EI.size(1), dtype=h.dtype),
                                                            accumulate=True)
    out = h
    for _ in range(steps):
        out = (1 - alpha) * dst_scale * (adjacency @ (src_scale * out)) + alpha * h
    return out


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_appnp_propagate_composite(steps):
    """seastar_layers::appnp_propagate (csrc/layer_ops.cpp), APPNP's K steps looped in C++ over the
    weighted_sum op: equal to plain torch in value and gradient (gradcheck in float64), recorded by
    autograd through the ops it calls, and passes opcheck."""
    gen = torch.Generator().manual_seed(steps)
    h = torch.randn(N, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    src_scale, dst_scale = (torch.rand(N, 1, dtype=torch.float64, generator=gen) + 0.5 for _ in range(2))
    src_scale.requires_grad_()

    def propagate(h, src_scale):
        return OPS.appnp_propagate(GRAPH.tensors(), h, src_scale, dst_scale, 0.15, steps)

    torch.testing.assert_close(propagate(h, src_scale), appnp_reference(h, src_scale, dst_scale, 0.15, steps))
    assert torch.autograd.gradcheck(propagate, (h, src_scale))
    assert torch._C._dispatch_has_kernel_for_dispatch_key("seastar_layers::appnp_propagate",
                                                          "CompositeImplicitAutograd")
    torch.library.opcheck(OPS.appnp_propagate, (GRAPH.tensors(), h.detach().float().requires_grad_(),
                                                src_scale.detach().float(), dst_scale.float(), 0.15, steps))
    with pytest.raises(ValueError, match="'steps' must be >= 0, got -1"):
        OPS.appnp_propagate(GRAPH.tensors(), h, src_scale, dst_scale, 0.15, -1)


def test_appnp_propagate_inference_steps_equal_the_recorded_ones():
    """Where no gradient is wanted on a small graph, appnp_propagate runs its steps in one plain loop
    (csrc/layer_ops.cpp: appnp_steps) instead of four ops a step: equal to the recorded ops in float32
    and float64, and the loop is what runs (no weighted_sum, no addcmul). A graph whose steps are past
    torch's grain size goes through the program's op, with the same result."""
    gen = torch.Generator().manual_seed(21)
    large_ei = random_graph(300, 300, 3000, seed=5)
    for graph, rows, ei in ((GRAPH, N, EI), (sl.Graph.from_edge_index(large_ei, 300), 300, large_ei)):
        for dtype in (torch.float32, torch.float64):
            h = torch.randn(rows, 16, dtype=dtype, generator=gen)
            # APPNP's scales, deg^-1/2: the steps keep the features' magnitude, and so float32's rounding
            degree = torch.zeros(rows, dtype=dtype).index_add_(0, ei[1], torch.ones(ei.size(1), dtype=dtype))
            src_scale = dst_scale = degree.clamp(min=1).rsqrt().view(rows, 1)
            with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                plain = OPS.appnp_propagate(graph.tensors(), h, src_scale, dst_scale, 0.1, 5)
            ran = {event.name for event in profile.events()}
            assert ("seastar_layers::weighted_sum" in ran) == (rows == 300), ran
            assert ("aten::addcmul" in ran) == (rows == 300), ran
            # the scales wanting a gradient: the recorded ops, not the loop's own node
            recorded = OPS.appnp_propagate(graph.tensors(), h, src_scale.clone().requires_grad_(), dst_scale, 0.1, 5)
            assert recorded.grad_fn.name() == "AddcmulBackward0"
            torch.testing.assert_close(plain, recorded.detach())
    # the loop checks the graph as the program's op does: an index out of range raises, naming the array
    broken = [t.clone() for t in GRAPH.tensors()]
    broken[1][0] = N + 3
    h, scale = torch.randn(N, 4), torch.ones(N, 1)
    with torch.no_grad(), pytest.raises(ValueError, match=r"appnp_propagate: graph\[1\] \(in_src\) holds 12"):
        OPS.appnp_propagate(broken, h, scale, scale, 0.1, 2)
    # scales of another shape broadcast in the ops, as before
    with torch.no_grad():
        torch.testing.assert_close(OPS.appnp_propagate(GRAPH.tensors(), h, torch.full((4,), 2.0), scale, 0.1, 2),
                                   OPS.appnp_propagate(GRAPH.tensors(), h, torch.full((N, 4), 2.0), scale, 0.1, 2))


BIPARTITE_EI = random_graph(N, 5, 24, seed=4)
BIPARTITE = sl.Graph.from_edge_index(BIPARTITE_EI, (N, 5))


def gat_reference(ei, num_dst, x_src, x_dst, weight_src, weight_dst, att_src, att_dst, a_edge, mask, residual, bias,
                  slope, concat):
    """GATConv's forward in plain torch over the (2, E) edges ei: projections, scores, leaky relu,
    softmax over each destination's in-edges, the mask after it, aggregation, head merge (averaged
    heads: concat=False), residual and bias; rows without in-edges get 0 before the residual."""
    heads, channels = att_src.shape[1:]
    h_src = (x_src @ weight_src.T if weight_src is not None else x_src).reshape(x_src.size(0), -1, heads, channels)
    groups = h_src.size(1)
    if x_dst is None:
        h_dst = h_src[:num_dst]
    else:
        w = weight_dst if weight_dst is not None else weight_src
        h_dst = (x_dst @ w.T if w is not None else x_dst).reshape(x_dst.size(0), groups, heads, channels)
    src, dst = ei
    logits = (h_src * att_src).sum(-1).reshape(-1, groups * heads)[src]
    if att_dst is not None:
        logits = logits + (h_dst * att_dst).sum(-1).reshape(-1, groups * heads)[dst]
    if a_edge is not None:
        logits = logits + a_edge.reshape(-1, groups * heads)
    logits = torch.where(logits > 0, logits, logits * slope)
    top = torch.full((num_dst, groups * heads), -torch.inf, dtype=logits.dtype).scatter_reduce(
        0, dst[:, None].expand_as(logits), logits, "amax")
    weights = torch.exp(logits - top[dst])
    total = torch.zeros(num_dst, groups * heads, dtype=logits.dtype).index_add(0, dst, weights)
    alpha = weights / total[dst]
    if mask is not None:
        alpha = alpha * mask.reshape(-1, groups * heads)
    messages = alpha[:, :, None] * h_src.reshape(-1, groups * heads, channels)[src]
    out = torch.zeros(num_dst, groups * heads, channels, dtype=messages.dtype).index_add(0, dst, messages)
    out = out.reshape(num_dst, -1) if concat else out.mean(1)
    if residual is not None:
        out = out + residual
    if bias is not None:
        out = (out.reshape(num_dst, groups, -1) + bias).reshape(num_dst, -1)
    return out, alpha[:, :, None]


def gat_conv_case(name, dtype=torch.float64):
    """(graph, edge_index, gat_conv's arguments by name) of one configuration on a 9-vertex graph."""
    gen = torch.Generator().manual_seed(len(name))
    heads, channels, features = 2, 3, 4

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    args = dict(x_src=rand(N, features), x_dst=None, weight_src=rand(heads * channels, features), weight_dst=None,
                att_src=rand(1, heads, channels), att_dst=rand(1, heads, channels), a_edge=None, mask=None,
                residual=None, bias=rand(heads * channels), negative_slope=0.2, dropout=0.0, concat=True,
                with_attention=True)
    graph, ei, num_edges = GRAPH, EI, EI.size(1)
    if name == "bipartite":  # PyG's pair of features with separate projections
        graph, ei, num_edges = BIPARTITE, BIPARTITE_EI, BIPARTITE_EI.size(1)
        args.update(x_dst=rand(5, 7), weight_dst=rand(heads * channels, 7), residual=rand(5, heads * channels))
    elif name == "no destination scores":  # PyG's (x_src, None), on a block: destinations first
        graph, ei, num_edges = BIPARTITE, BIPARTITE_EI, BIPARTITE_EI.size(1)
        args.update(att_dst=None)
    elif name == "edges and mask":
        args.update(a_edge=rand(num_edges, heads, 1), mask=rand(num_edges, heads, 1).abs())
    elif name == "averaged heads":
        args.update(concat=False, bias=rand(channels), residual=rand(N, channels))
    elif name == "projected":  # the caller projected (a module that cannot be bypassed)
        args.update(x_src=rand(N, heads * channels), weight_src=None)
    elif name == "groups":  # DGL's (N, *, D) features: the middle axis folds into the heads
        args.update(x_src=rand(N, 3, features), bias=rand(heads * channels), residual=rand(N, 3 * heads * channels))
    return graph, ei, args


GAT_CONV_CASES = ["plain", "bipartite", "no destination scores", "edges and mask", "averaged heads", "projected",
                  "groups"]


@pytest.mark.parametrize("case", GAT_CONV_CASES)
def test_gat_conv_composite(case):
    """seastar_layers::gat_conv (csrc/layer_ops.cpp), GATConv's projections, scores, program, head
    merge, residual and bias in one call: equal to plain torch in value and attention, gradcheck in
    float64 through the ops it calls, and opcheck."""
    graph, ei, args = gat_conv_case(case)
    num_dst = graph.num_dst
    out, alpha = OPS.gat_conv(graph.tensors(), **args)
    want_out, want_alpha = gat_reference(ei, num_dst, *[args[k] for k in (
        "x_src", "x_dst", "weight_src", "weight_dst", "att_src", "att_dst", "a_edge", "mask", "residual", "bias",
        "negative_slope", "concat")])
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(alpha, want_alpha)
    differentiable = [k for k, v in args.items() if isinstance(v, torch.Tensor)]
    for name in differentiable:
        args[name].requires_grad_()

    def conv(*tensors):
        return OPS.gat_conv(graph.tensors(), **dict(args, **dict(zip(differentiable, tensors))))[0]

    assert torch.autograd.gradcheck(conv, [args[k] for k in differentiable])
    assert torch._C._dispatch_has_kernel_for_dispatch_key("seastar_layers::gat_conv", "CompositeImplicitAutograd")
    single = {k: v.detach().float().requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    torch.library.opcheck(OPS.gat_conv, (graph.tensors(),), single)


def _grad_fn_names(tensor) -> set:
    """The names of the autograd nodes behind tensor."""
    seen, todo = {}, [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and id(node) not in seen:
            seen[id(node)] = node
            todo += [next_node for next_node, _ in node.next_functions]
    return {node.name() for node in seen.values()}


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gat_conv_scores_node_equals_the_ops_over_many_rows(groups, dtype):
    """On a graph past the plain loops' size, gat_conv's scores are one loop recorded as one node
    (GatScoresBackward), its vectors' gradient summed in chunks of 1024 rows: equal to plain torch
    (gat_reference) in value and in every gradient, over 2,500 source rows with a vertex without
    in-edges, DGL's middle axis folded into the heads or not; the output and the gradients of x and
    of the vectors the same bits on 1 and 2 threads."""
    gen = torch.Generator().manual_seed(groups)
    heads, channels, features, n, num_dst = 4, 5, 6, 2500, 2400
    src = torch.randint(0, n, (20000,), generator=gen)
    dst = torch.randint(0, num_dst - 1, (20000,), generator=gen)  # the last destination has no in-edges
    graph = sl.Graph.from_edges(src, dst, n, num_dst)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    args = dict(x_src=rand(n, groups, features) if groups > 1 else rand(n, features), x_dst=None,
                weight_src=rand(heads * channels, features), weight_dst=None, att_src=rand(1, heads, channels),
                att_dst=rand(1, heads, channels), a_edge=None, mask=None, residual=None,
                bias=rand(heads * channels), negative_slope=0.2, concat=True)
    wanted = ["x_src", "weight_src", "att_src", "att_dst", "bias"]
    grad = torch.randn(num_dst, groups * heads * channels, generator=gen, dtype=dtype)
    results, threads_before = [], torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            leaves = {k: v.detach().clone().requires_grad_() if k in wanted else v for k, v in args.items()}
            (out,) = OPS.gat_conv(graph.tensors(), **leaves, dropout=0.0, with_attention=False)
            assert "seastar_layers::gat_conv scores_backward" in _grad_fn_names(out)
            results.append([out, *torch.autograd.grad(out, [leaves[k] for k in wanted], grad)])
    finally:
        torch.set_num_threads(threads_before)
    for a, b, name in zip(*results, ["out", *wanted], strict=True):
        if name not in ("weight_src", "bias"):  # those come from BLAS and torch's sum
            assert torch.equal(a, b), name
    leaves = {k: v.detach().clone().requires_grad_() if k in wanted else v for k, v in args.items()}
    want = gat_reference(torch.stack([src, dst]), num_dst, *[leaves[k] for k in (
        "x_src", "x_dst", "weight_src", "weight_dst", "att_src", "att_dst", "a_edge", "mask", "residual", "bias",
        "negative_slope", "concat")])[0].reshape(num_dst, -1)
    expected = [want, *torch.autograd.grad(want, [leaves[k] for k in wanted], grad)]
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    for got, e, name in zip(results[0], expected, ["out", *wanted], strict=True):
        torch.testing.assert_close(got, e.reshape(got.shape), **tolerance, msg=name)


@pytest.mark.parametrize("case", GAT_CONV_CASES)
def test_gat_conv_inference_loops_equal_the_recorded_ops(case):
    """Where no gradient is wanted, gat_conv projects, computes the scores and adds the bias in plain
    loops (csrc/layer_ops.cpp: plain_values) instead of ATen ops: equal to what the ops compute when a
    gradient is wanted, in float32 and float64; and the loops are what inference runs (no aten::mul,
    which the recorded scores call, and for a matrix of features no aten::mm)."""
    for dtype in (torch.float32, torch.float64):
        graph, _, args = gat_conv_case(case, dtype)
        with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            plain = OPS.gat_conv(graph.tensors(), **args)
        ran = {event.name for event in profile.events()}
        assert "aten::mul" not in ran
        if args["weight_src"] is not None and args["x_src"].dim() == 2:
            assert "aten::mm" not in ran
        wanting = {k: v.clone().requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        recorded = OPS.gat_conv(graph.tensors(), **wanting)
        assert recorded[0].requires_grad
        for got, want in zip(plain, recorded):
            torch.testing.assert_close(got, want.detach())


def test_inference_projection_takes_small_products_only():
    """The projection loop (csrc/layer_ops.cpp: plain_project) takes small products of matching
    shapes: a large one goes to BLAS (aten::mm) with the same result, and shapes that do not multiply
    fail in at::mm, saying so, whether or not a gradient is wanted."""
    graph, _, args = gat_conv_case("plain", torch.float32)
    gen = torch.Generator().manual_seed(11)
    wide = dict(args, x_src=torch.randn(N, 8000, generator=gen), weight_src=torch.randn(6, 8000, generator=gen))
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        out = OPS.gat_conv(graph.tensors(), **wide)[0]
    assert "aten::mm" in {event.name for event in profile.events()}
    torch.testing.assert_close(out, OPS.gat_conv(graph.tensors(), **dict(wide, bias=wide["bias"].clone()
                                                                          .requires_grad_()))[0].detach())
    for wanting in (False, True):
        weight = torch.randn(6, 5, generator=gen).requires_grad_(wanting)
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            OPS.gat_conv(graph.tensors(), **dict(args, weight_src=weight))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_plain_projection_sums_each_output_in_input_order(dtype):
    """The plain loops' projection (csrc/layer_ops.cpp: dot_rows) sums each output's products in input
    order, in register blocks of outputs and a tail after them: bit for bit the products added one
    input at a time, for widths below, at and past a block (32 floats, 16 doubles) and both weight
    layouts (torch.nn.Linear's (out, in); DGL's (in, out), weight_transposed). On a graph whose only
    edges are self-loops gcn_conv's output is the projection itself."""
    loops = sl.Graph.from_edge_index(torch.arange(N).repeat(2, 1), N)
    gen = torch.Generator().manual_seed(13)
    for width_in, width_out in [(1, 1), (7, 5), (3, 32), (64, 33), (64, 64), (9, 70)]:
        x = torch.randn(N, width_in, dtype=dtype, generator=gen)
        weight = torch.randn(width_out, width_in, dtype=dtype, generator=gen)
        want = torch.zeros(N, width_out, dtype=dtype)
        for i in range(width_in):
            want = want + x[:, i:i + 1] * weight[:, i]
        with torch.no_grad():
            linear = OPS.gcn_conv(loops.tensors(), x, weight, None, None, None, None)
            held = OPS.gcn_conv(loops.tensors(), x, weight.t().contiguous(), None, None, None, None, True)
        assert torch.equal(linear, want), (width_in, width_out)
        assert torch.equal(held, want), (width_in, width_out)


def test_gcn_conv_inference_projection_equals_the_recorded_one():
    """gcn_conv projects through the same loop in inference: equal to the recorded projection."""
    gen = torch.Generator().manual_seed(12)
    x, weight = torch.randn(N, 5, generator=gen), torch.randn(7, 5, generator=gen)
    scale = torch.rand(N, 1, generator=gen)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        plain = OPS.gcn_conv(GRAPH.tensors(), x, weight, scale, scale, None, None)
    assert "aten::mm" not in {event.name for event in profile.events()}
    # a scale wanting a gradient takes the recorded ops (the plain loops' node takes only x, weight and bias)
    recorded = OPS.gcn_conv(GRAPH.tensors(), x, weight, scale.clone().requires_grad_(), scale, None, None)
    assert recorded.grad_fn.name() == "MulBackward0"
    torch.testing.assert_close(plain, recorded.detach())


@pytest.mark.parametrize("edge_weights", [False, True], ids=["degree scales", "edge weights"])
@pytest.mark.parametrize("projected", [False, True], ids=["features", "projection"])
def test_small_recorded_gcn_conv_is_one_node(edge_weights, projected):
    """On a small graph where x, the weight and the bias want gradients (the scales and edge weights
    are constants, as the layers pass them), gcn_conv takes its plain path and records one node whose
    backward is its transpose (no mm; the weighted_sum program's kernels run without its op's dispatch
    either way): equal to the
    recorded ops (a scale wanting a gradient takes those) in float32 and float64, whichever of x,
    weight and bias want gradients; gradcheck in float64; a second and a double backward raise as
    the programs' ops do."""
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(N, 5, dtype=dtype, generator=gen)
        weight = torch.randn(7, 5, dtype=dtype, generator=gen) if projected else None
        bias = torch.randn(7 if projected else 5, dtype=dtype, generator=gen)
        src_scale, dst_scale = (torch.rand(N, 1, dtype=dtype, generator=gen) + 0.5 for _ in range(2))
        w = torch.rand(GRAPH.num_edges, dtype=dtype, generator=gen) if edge_weights else None
        for wanted in ([x, weight, bias], [x], [bias], [weight]):
            wanted = [t for t in wanted if t is not None]
            if not wanted:
                continue
            for t in (x, weight, bias):
                if t is not None:
                    t.requires_grad_(any(t is u for u in wanted))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                out = OPS.gcn_conv(GRAPH.tensors(), x, weight, src_scale, dst_scale, w, bias)
                grad = torch.randn_like(out)
                got = torch.autograd.grad(out, wanted, grad)
            ran = {event.name for event in profile.events()}
            assert not {"aten::mm", "seastar_layers::weighted_sum", "seastar_layers::weighted_sum_backward"} & ran
            assert out.grad_fn.name() == "seastar_layers::gcn_conv_backward"
            recorded = OPS.gcn_conv(GRAPH.tensors(), x, weight, src_scale.clone().requires_grad_(), dst_scale, w, bias)
            torch.testing.assert_close(out, recorded)
            for g, e in zip(got, torch.autograd.grad(recorded, wanted, grad), strict=True):
                torch.testing.assert_close(g, e)
    x, bias = x.detach().requires_grad_(), bias.detach().requires_grad_()
    weight = None if weight is None else weight.detach().requires_grad_()
    given = [t for t in (x, weight, bias) if t is not None]

    def conv(*tensors):
        it = iter(tensors)
        pick = [next(it) if t is not None else None for t in (x, weight, bias)]
        return OPS.gcn_conv(GRAPH.tensors(), pick[0], pick[1], src_scale, dst_scale, w, pick[2])

    assert torch.autograd.gradcheck(conv, given)
    loss = conv(*given).pow(2).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    (grad,) = torch.autograd.grad(conv(*given).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="seastar_layers::gcn_conv has no double backward"):
        grad.sum().backward()


@pytest.mark.parametrize("edge_weights", [False, True], ids=["degree scales", "edge weights"])
def test_small_and_large_gcn_paths_give_the_same_bits(edge_weights):
    """gcn_conv's small-graph path sums the edges with the weighted_sum program's kernels, as the recorded
    ops do on any graph: given the features projected (the projections' orders differ), both compute every
    element in the same order, so output and gradients are equal bit for bit, not only close. A scale
    wanting a gradient takes the recorded ops on the same small graph."""
    gen = torch.Generator().manual_seed(21)
    x = torch.randn(N, 6, generator=gen, requires_grad=True)
    bias = torch.randn(6, generator=gen, requires_grad=True)
    src_scale, dst_scale = (torch.rand(N, 1, generator=gen) + 0.5 for _ in range(2))
    w = torch.rand(GRAPH.num_edges, generator=gen) if edge_weights else None
    small = OPS.gcn_conv(GRAPH.tensors(), x, None, src_scale, dst_scale, w, bias)
    assert small.grad_fn.name() == "seastar_layers::gcn_conv_backward"
    recorded = OPS.gcn_conv(GRAPH.tensors(), x, None, src_scale.clone().requires_grad_(), dst_scale, w, bias)
    assert recorded.grad_fn.name() != "seastar_layers::gcn_conv_backward"
    assert torch.equal(small, recorded)
    grad = torch.randn_like(small)
    for got, want in zip(torch.autograd.grad(small, [x, bias], grad), torch.autograd.grad(recorded, [x, bias], grad),
                         strict=True):
        assert torch.equal(got, want)


def test_one_thread_and_a_team_give_the_same_bits():
    """A CPU kernel's rows run on the calling thread where the work is small or one thread is allowed (the
    serial entry: no parallel region), else on a team taking chunks of rows; each row is one thread's work
    in its edges' order, so both give the same bits, forward and backward, for every program."""
    graph = sl.Graph.from_edge_index(random_graph(3000, 3000, 24000, seed=5), 3000)
    gen = torch.Generator().manual_seed(8)
    a_src, a_dst = torch.randn(3000, 8, 1, generator=gen), torch.randn(3000, 8, 1, generator=gen)
    h = torch.randn(3000, 8, 8, generator=gen, requires_grad=True)
    slope = torch.tensor(0.2)

    def run():
        out = OPS.gat_attention(graph.tensors(), a_src, h, slope, a_dst)[0][0]
        summed = OPS.weighted_sum(graph.tensors(), h.flatten(1))[0][0]
        grads = torch.autograd.grad((out * out).sum() + (summed * summed).sum(), h)
        return out.detach(), summed.detach(), *grads

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        serial = run()
        torch.set_num_threads(max(threads, 2))
        team = run()
    finally:
        torch.set_num_threads(threads)
    for one, many in zip(serial, team, strict=True):
        assert torch.equal(one, many)


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("projected", [False, True])
@pytest.mark.parametrize("dst_scores", [True, False])
def test_small_gat_conv_runs_in_plain_loops_as_one_node(concat, projected, dst_scores):
    """On a small graph with one matrix of features, no edge scores, mask, residual, dropout or returned
    attention (the drop-ins' usual call), gat_conv runs in plain loops (no aten::mm, no gat_attention
    program either way) and, where any of x, weight, att_src, att_dst and bias want gradients, records one
    node whose backward runs in plain loops: equal to the recorded ops (returning the attention takes them)
    in float32 and float64 with and without gradients, whichever inputs want them, on a graph with a
    vertex without in-edges and one destination fewer than sources; gradcheck in float64; a second and a
    double backward raise as the programs' ops do."""
    gen = torch.Generator().manual_seed(7)
    heads, channels, features = 2, 3, 4
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 1, 2, 0], [1, 2, 3, 4, 5, 6, 6, 0, 0, 1, 3, 1, 2]])
    graph = sl.Graph.from_edge_index(ei, (N, N - 1))  # destination 7 has no in-edges
    for dtype in (torch.float32, torch.float64):
        def rand(*shape):
            return torch.randn(*shape, dtype=dtype, generator=gen)

        args = dict(x_src=rand(N, heads * channels if projected else features), x_dst=None,
                    weight_src=None if projected else rand(heads * channels, features), weight_dst=None,
                    att_src=rand(1, heads, channels), att_dst=rand(1, heads, channels) if dst_scores else None,
                    a_edge=None, mask=None, residual=None, bias=rand(heads * channels if concat else channels),
                    negative_slope=0.2, dropout=0.0, concat=concat, with_attention=False)
        names = [k for k in ("x_src", "weight_src", "att_src", "att_dst", "bias") if args[k] is not None]
        for wanted in (names, ["x_src"], ["att_src"], ["bias"], names[1:2], []):
            for k in names:
                args[k].requires_grad_(k in wanted)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                (out,) = OPS.gat_conv(graph.tensors(), **args)
                grad = torch.randn_like(out)
                got = torch.autograd.grad(out, [args[k] for k in wanted], grad) if wanted else ()
            ran = {event.name for event in profile.events()}
            assert not {"aten::mm", "seastar_layers::gat_attention", "seastar_layers::gat_attention_backward"} & ran
            assert (out.grad_fn.name() if wanted else None) == ("seastar_layers::gat_conv_backward" if wanted else None)
            recording = {k: v.clone().requires_grad_() if k in names else v for k, v in args.items()}
            recorded = OPS.gat_conv(graph.tensors(), **dict(recording, with_attention=True))[0]
            torch.testing.assert_close(out, recorded.detach())
            expected = torch.autograd.grad(recorded, [recording[k] for k in wanted], grad) if wanted else ()
            for g, e in zip(got, expected, strict=True):
                torch.testing.assert_close(g, e)
    for k in names:
        args[k] = args[k].detach().requires_grad_()

    def conv(*tensors):
        return OPS.gat_conv(graph.tensors(), **dict(args, **dict(zip(names, tensors))))[0]

    given = [args[k] for k in names]
    assert torch.autograd.gradcheck(conv, given)
    loss = conv(*given).pow(2).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    (grad,) = torch.autograd.grad(conv(*given).pow(2).sum(), given[0], create_graph=True)
    with pytest.raises(RuntimeError, match="seastar_layers::gat_conv has no double backward"):
        grad.sum().backward()


def test_plain_loops_take_a_transposed_weight():
    """The plain loops read a weight held as (in, out) and passed transposed (DGL's GraphConv) through
    its strides: gcn_conv and gat_conv stay one plain node and equal the same weight made contiguous,
    in value and gradient."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(N, 5, dtype=torch.float64, generator=gen)
    held = torch.randn(5, 6, dtype=torch.float64, generator=gen)  # (in, out)
    att = torch.randn(1, 2, 3, dtype=torch.float64, generator=gen)
    scale = torch.rand(N, 1, dtype=torch.float64, generator=gen) + 0.5
    calls = [lambda w: OPS.gcn_conv(GRAPH.tensors(), x, w, scale, scale, None, None),
             lambda w: OPS.gat_conv(GRAPH.tensors(), x, None, w, None, att, att, None, None, None, None, 0.2, 0.0,
                                    True, False)[0]]
    for call, node in zip(calls, ["seastar_layers::gcn_conv_backward", "seastar_layers::gat_conv_backward"]):
        transposed = held.clone().requires_grad_()
        contiguous = held.t().contiguous().requires_grad_()
        out, want = call(transposed.t()), call(contiguous)
        assert out.grad_fn.name() == node
        grad = torch.randn_like(out)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(torch.autograd.grad(out, transposed, grad)[0],
                                   torch.autograd.grad(want, contiguous, grad)[0].t())


@pytest.mark.parametrize("recorded", [False, True], ids=["plain loops", "recorded ops"])
def test_gcn_conv_takes_a_weight_held_as_in_out(recorded):
    """weight_transposed=True: a weight held as (in, out) (DGL's GraphConv's) gives what its transpose
    gives, bit for bit, in value and in every gradient; the plain loops' node feeds the weight's own
    gradient accumulator (no transpose node between, no copy of its gradient); gradcheck and opcheck.
    Recorded: a scale that wants a gradient takes the calls off the plain loops."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(N, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    held = torch.randn(5, 6, dtype=torch.float64, generator=gen, requires_grad=True)  # (in, out)
    scale = (torch.rand(N, 1, dtype=torch.float64, generator=gen) + 0.5).requires_grad_(recorded)
    bias = torch.randn(6, dtype=torch.float64, generator=gen, requires_grad=True)
    out = OPS.gcn_conv(GRAPH.tensors(), x, held, scale, scale, None, bias, True)
    want = OPS.gcn_conv(GRAPH.tensors(), x, held.t(), scale, scale, None, bias)
    assert torch.equal(out, want)
    inputs = (x, held, bias, scale) if recorded else (x, held, bias)
    grad = torch.randn_like(out)
    for got, expected in zip(torch.autograd.grad(out, inputs, grad), torch.autograd.grad(want, inputs, grad)):
        assert torch.equal(got, expected)
    if not recorded:
        assert out.grad_fn.name() == "seastar_layers::gcn_conv_backward"
        assert out.grad_fn.next_functions[1][0].variable is held
    assert torch.autograd.gradcheck(
        lambda *t: OPS.gcn_conv(GRAPH.tensors(), t[0], t[1], scale, scale, None, t[2], True), (x, held, bias))
    torch.library.opcheck(OPS.gcn_conv, (GRAPH.tensors(), x.detach().float().requires_grad_(),
                                         held.detach().float().requires_grad_(), scale.detach().float(),
                                         scale.detach().float(), None, None, True))
    with pytest.raises(ValueError, match=r"'weight' held as \(in, out\).*must be a matrix"):
        OPS.gcn_conv(GRAPH.tensors(), x, held[0], scale, scale, None, None, True)


@pytest.mark.parametrize("grad_mode", [True, False])
def test_forward_mode_ad_is_refused_by_name(grad_mode):
    """The programs' ops have no forward-mode derivative: a dual tensor (torch.autograd.forward_ad)
    reaching one is refused (NotImplementedError naming the op and the argument), never run with its
    tangent dropped; the composites' plain loops on small graphs leave dual tensors to those ops, so a
    layer's call refuses them too, whether or not gradients are recorded."""
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(N, 6, dtype=torch.float64, generator=gen)
    scale = torch.rand(N, 1, dtype=torch.float64, generator=gen) + 0.5
    att = torch.randn(1, 2, 3, dtype=torch.float64, generator=gen)
    with torch.set_grad_enabled(grad_mode), torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones_like(x))
        sums = "seastar_layers::weighted_sum: 'x'"
        attention = "seastar_layers::gat_attention: 'a_src'"
        calls = [(sums, lambda: OPS.weighted_sum(GRAPH.tensors(), dual, None)),
                 (sums, lambda: OPS.gcn_conv(GRAPH.tensors(), dual, None, scale, scale, None, None)),
                 (sums, lambda: OPS.appnp_propagate(GRAPH.tensors(), dual, scale, scale, 0.1, 3)),
                 (attention, lambda: OPS.gat_conv(GRAPH.tensors(), dual, None, None, None, att, att, None, None, None,
                                                  None, 0.2, 0.0, True, False)),
                 (attention, lambda: sl.GATConv(6, 3, heads=2).double()(dual, EI))]
        for message, call in calls:
            with pytest.raises(NotImplementedError, match=message + " is a dual tensor"):
                call()


def test_gat_conv_dropout_is_the_programs():
    """With attention dropout the op draws the program's seed from torch's generator (as the layers
    did before) and scales what it keeps by 1 / (1 - p): the gat_attention op on the same seed,
    scaled; p = 1 drops everything. The features come projected, so that both see the same ones."""
    _, _, args = gat_conv_case("plain", torch.float32)
    h = (args["x_src"] @ args["weight_src"].T).view(N, 2, 3)
    args.update(x_src=h.reshape(N, 6), weight_src=None)
    for p in (0.4, 1.0):
        torch.manual_seed(5)
        out, alpha = OPS.gat_conv(GRAPH.tensors(), **dict(args, dropout=p, bias=None))
        torch.manual_seed(5)
        results = OPS.gat_attention(GRAPH.tensors(), (h * args["att_src"]).sum(-1, keepdim=True), h,
                                    torch.tensor(0.2), (h * args["att_dst"]).sum(-1, keepdim=True), None, None,
                                    torch.tensor(1 - p), library.draw_seed(h.device), True)[0]
        scale = 1 / (1 - p) if p < 1 else 0.0
        torch.testing.assert_close(out, (results[0] * scale).reshape(N, -1), rtol=0, atol=0)
        torch.testing.assert_close(alpha, results[1] * scale, rtol=0, atol=0)
    assert not bool((out != 0).any())


@pytest.mark.parametrize("overrides,words", [
    (dict(att_src=torch.randn(2, 3)), ["'att_src' must have shape (1, heads, channels)", "[2, 3]"]),
    (dict(x_src=torch.randn(N, 5), weight_src=None), ["'x_src' projected to shape [9, 5]", "2 heads of 3 channels"]),
    (dict(dropout=1.5), ["'dropout' must be in [0, 1], got 1.5"]),
    (dict(x_src=torch.randn(N, 3, 4), concat=False), ["averaged (concat=False) only without middle axes"]),
], ids=["att_src", "split", "dropout", "averaged groups"])
def test_gat_conv_refuses_bad_arguments(overrides, words):
    _, _, args = gat_conv_case("plain", torch.float32)
    with pytest.raises(ValueError) as info:
        OPS.gat_conv(GRAPH.tensors(), **dict(args, **overrides))
    for word in words:
        assert word in str(info.value), str(info.value)


def test_gat_conv_refuses_a_bias_it_cannot_broadcast_with_or_without_a_gradient():
    """A bias of 3 values for 6 output columns: torch's add refuses it; the inference loops, which
    could repeat it along a row, refuse it the same way (they take only what the add takes as is)."""
    _, _, args = gat_conv_case("plain", torch.float32)
    args["bias"] = torch.randn(3)
    for wanting in (False, True):
        tensors = {k: v.clone().requires_grad_(wanting) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        with pytest.raises(RuntimeError, match="must match the size of tensor"):
            OPS.gat_conv(GRAPH.tensors(), **tensors)


@pytest.mark.parametrize("case", ["plain", "edge weights", "projected", "features axes"])
def test_gcn_conv_composite(case):
    """seastar_layers::gcn_conv (csrc/layer_ops.cpp), PyG's GCNConv after its normalisation: projection,
    degree scales, the weighted sum and bias in one call, equal to plain torch, gradcheck in float64,
    opcheck."""
    gen = torch.Generator().manual_seed(len(case))
    x = torch.randn(N, 4, dtype=torch.float64, generator=gen)
    weight = torch.randn(6, 4, dtype=torch.float64, generator=gen)
    scale = torch.rand(N, 1, dtype=torch.float64, generator=gen) + 0.5
    bias = torch.randn(6, dtype=torch.float64, generator=gen)
    w = torch.rand(EI.size(1), dtype=torch.float64, generator=gen) if case == "edge weights" else None
    if case == "projected":
        x, weight = x @ weight.T, None
    if case == "features axes":  # rows of (2, 3) features: the axes after the first fold into one
        x, weight, bias = torch.randn(N, 2, 3, dtype=torch.float64, generator=gen), None, torch.randn(
            3, dtype=torch.float64, generator=gen)
        scale = scale[:, :, None]
    adjacency = torch.zeros(N, N, dtype=torch.float64).index_put_(
        (EI[1], EI[0]), w if w is not None else torch.ones(EI.size(1), dtype=torch.float64), accumulate=True)
    h = x @ weight.T if weight is not None else x
    want = scale * (adjacency @ (scale * h).reshape(N, -1)).reshape(h.shape) + bias
    torch.testing.assert_close(OPS.gcn_conv(GRAPH.tensors(), x, weight, scale, scale, w, bias), want)
    tensors = [t.requires_grad_() for t in (x, weight, scale, w, bias) if t is not None]

    def conv(*given):
        it = iter(given)
        pick = [next(it) if t is not None else None for t in (x, weight, scale, w, bias)]
        return OPS.gcn_conv(GRAPH.tensors(), pick[0], pick[1], pick[2], pick[2], pick[3], pick[4])

    assert torch.autograd.gradcheck(conv, tensors)
    single = [None if t is None else t.detach().float().requires_grad_() for t in (x, weight, scale, scale, w, bias)]
    torch.library.opcheck(OPS.gcn_conv, (GRAPH.tensors(), *single))


def gat_args(**overrides):
    gen = torch.Generator().manual_seed(0)
    args = {"a_src": torch.randn(N, 2, 1, generator=gen), "x": torch.randn(N, 2, 5, generator=gen),
            "slope": torch.tensor(0.2), "a_dst": torch.randn(N, 2, 1, generator=gen)}
    args.update(overrides)
    return args


def call_gat(graph=None, **overrides):
    args = gat_args(**overrides)
    return OPS.gat_attention(GRAPH.tensors() if graph is None else graph, args.pop("a_src"), args.pop("x"),
                             args.pop("slope"), **args)


def test_a_recorded_call_runs_the_variant_that_sums_for_its_backward():
    """GAT's autograd kernel turns for_backward on where it records a backward: that forward also saves
    the destinations' sums its backward would sweep the edges for (d a_dst's); a call under no_grad,
    or with nothing requiring grad, runs the forward that computes and keeps only the results (it has
    no backward). Results are the same bits either way."""
    args = gat_args()
    plain, plain_saved = call_gat(**args)
    assert plain_saved == []
    recorded = {n: t.clone().requires_grad_() for n, t in args.items()}
    results, saved = call_gat(**recorded)
    # the row max and sum, the weighted sum, and sum_e f'_e x_u and sum_e f'_e, f' = leaky'(s_e) exp(s_e - max)
    assert len(saved) == 5
    assert torch.equal(results[0], plain[0])
    with torch.no_grad():
        assert call_gat(**recorded)[1] == []
    assert len(call_gat(**args, for_backward=True)[1]) == len(saved)  # for callers of the backward op
    # without the destinations' scores the backward sums nothing over them, and saves what it reads
    assert len(call_gat(**dict(recorded, a_dst=None))[1]) == 3 and call_gat(**dict(args, a_dst=None))[1] == []


@pytest.mark.parametrize("overrides,error,words", [
    ({"x": torch.randn(N + 1, 2, 5)}, ValueError, ["'x'", "source vertex", "10"]),
    ({"a_dst": torch.randn(N, 3, 1)}, ValueError, ["'a_dst' has heads = 3", "'a_src' has heads = 2", "must agree"]),
    ({"a_dst": torch.randn(N, 2, 4)}, ValueError, ["'a_dst' must have per-row shape (heads, 1)", "[2, 4]"]),
    ({"x": torch.randn(N, 2, 5).double()}, TypeError, ["share one dtype", "'x'", "torch.float64"]),
    ({"a_src": torch.randn(N, 2, 1).int(), "x": torch.randn(N, 2, 5).int(), "a_dst": torch.randn(N, 2, 1).int()},
     TypeError, ["'a_src' of dtype torch.int32", "float32, float64, float16 or bfloat16"]),
    ({"x": torch.randn(N, 5, 2).transpose(1, 2)}, ValueError, ["'x' must be contiguous", "x.contiguous()"]),
    ({"slope": torch.tensor([0.2])}, ValueError, ["parameter 'slope'", "shape []"]),
    ({"slope": torch.tensor(0.2, dtype=torch.float64)}, TypeError, ["parameter 'slope' must be torch.float32"]),
    ({"x": torch.randn(N)}, ValueError, ["'x' must have shape (rows, heads, channels)"]),
    ({"keep": torch.tensor(0.5)}, ValueError, ["draws random numbers and needs 'seed'", "0-d int64"]),
    ({"keep": torch.tensor(0.5), "seed": torch.tensor(7.0)}, TypeError, ["'seed' must be a 0-d int64 tensor",
                                                                         "torch.float32"]),
], ids=["rows", "sizes disagree", "declared 1", "mixed dtypes", "dtype", "contiguity", "param shape", "param dtype",
        "rank", "no seed", "seed dtype"])
def test_entry_point_refuses_bad_arguments(overrides, error, words):
    with pytest.raises(error) as info:
        call_gat(**overrides)
    for word in words:
        assert word in str(info.value), str(info.value)


def bad_graph(slot, value):
    graph = [t.clone() for t in GRAPH.tensors()]
    graph[slot][0] = value
    return graph


@pytest.mark.parametrize("graph,words", [
    (bad_graph(1, N), ["graph[1] (in_src)", "outside [0, 9)"]),
    (bad_graph(1, -1), ["graph[1] (in_src)", "-1"]),
    (bad_graph(2, 10**6), ["graph[2] (in_eid)"]),
    (bad_graph(4, N + 5), ["graph[4] (out_dst)"]),
    (bad_graph(0, 1), ["graph[0] (in_indptr)", "must start at 0"]),
    (GRAPH.tensors()[:5], ["'graph' must hold the 6 CSR arrays"]),
    ([t.float() for t in GRAPH.tensors()], ["graph[0] (in_indptr) must hold int32 or int64 indices"]),
    ([t.long() if k == 0 else t.int() for k, t in enumerate(GRAPH.tensors())],
     ["graph[1] (in_src) holds torch.int32 indices but graph[0] torch.int64", "one index dtype"]),
    ([torch.where(GRAPH.in_indptr == GRAPH.num_edges, GRAPH.num_edges - 1, GRAPH.in_indptr)] + GRAPH.tensors()[1:],
     ["the two layouts", "same number of edges"]),
], ids=["source", "negative", "edge id", "destination", "indptr", "count", "float", "mixed", "layouts"])
def test_entry_point_refuses_bad_graphs(graph, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call_gat(graph)
    for word in words:
        assert word in str(info.value), str(info.value)


def test_a_checked_graph_is_checked_again_after_an_edit():
    """The ops check a graph's arrays once while they stay as checked (csrc/seastar_ops.h:
    CheckedGraphs); an in-place edit bumps an array's version and the next call checks it again,
    forward and backward alike, however many graphs were checked in between."""
    arrays = [t.clone() for t in GRAPH.tensors()]
    x = torch.randn(N, 3, requires_grad=True)
    OPS.weighted_sum(arrays, x)[0][0].sum().backward()
    others = [sl.Graph.from_edge_index(random_graph(N, N, 20, seed=k), N).tensors() for k in range(40)]
    for graph in others:
        OPS.weighted_sum(graph, x)
    arrays[1][0] = N
    with pytest.raises(ValueError, match=r"graph\[1\] \(in_src\) holds 9 at position 0, outside \[0, 9\)"):
        OPS.weighted_sum(arrays, x)
    _, saved = OPS.weighted_sum(GRAPH.tensors(), x.detach())
    with pytest.raises(ValueError, match=r"graph\[1\] \(in_src\)"):
        OPS.weighted_sum_backward(arrays, x.detach(), None, saved, [torch.ones(N, 3)])
    arrays[1][0] = 0
    OPS.weighted_sum(arrays, x)  # checked again, and in range


def test_inference_graphs_are_checked_on_every_call():
    """Inference tensors have no version counter, so an edit inside inference mode is invisible
    to it: graphs made of them are checked on every call."""
    with torch.inference_mode():
        arrays = [t.clone() for t in GRAPH.tensors()]
        x = torch.randn(N, 3)
        OPS.weighted_sum(arrays, x)
        arrays[4][2] = N + 5
        with pytest.raises(ValueError, match=r"graph\[4\] \(out_dst\) holds 14 at position 2"):
            OPS.weighted_sum(arrays, x)


def test_unlisted_edges_are_absent_and_get_zero_gradients():
    """A graph may hold edges in no row (the layers drop self-loops this way, with static sizes):
    the result is the graph without them, and their per-edge gradients are zero."""
    listed = EI[0] != EI[1]
    partial = sl.Graph._from_checked(csr_layouts(EI[0], EI[1], N, N, listed), N, N)
    reduced = sl.Graph.from_edge_index(EI[:, listed], N)
    x = torch.randn(N, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(EI.shape[1], dtype=torch.float64, requires_grad=True)
    out = WEIGHTED_SUM(partial, x=x, w=w)[0]
    torch.testing.assert_close(out, WEIGHTED_SUM(reduced, x=x, w=w[listed])[0])
    grad_w, = torch.autograd.grad(out.sum(), [w])
    assert bool((grad_w[~listed] == 0).all()) and bool((grad_w[listed] != 0).any())


def test_variant_keys_name_dtype_and_options():
    assert variant_key(torch.float32, ()) == "float32"
    assert variant_key(torch.bfloat16, ("a_dst", "mask", "with_attention")) == "bfloat16|a_dst|mask|with_attention"
    tensors, options = GAT_ATTENTION.split([torch.zeros(1), torch.zeros(1), torch.zeros(()), None, torch.zeros(1)])
    assert sorted(tensors) == ["a_edge", "a_src", "slope", "x"] and options == ("a_edge",)
    optional = len(GAT_ATTENTION.arguments) - 3
    assert GAT_ATTENTION.split([torch.zeros(1)] * 3 + [None] * optional + [True])[1] == ("with_attention",)
    # the seed selects no variant: the optional parameter that makes the program draw does
    keep, seed = torch.zeros(()), torch.zeros((), dtype=torch.int64)
    assert GAT_ATTENTION.split([torch.zeros(1)] * 3 + [None] * (optional - 2) + [keep, seed])[1] == ("keep",)


def test_one_kernel_per_option_and_dtype():
    """Declared shapes: the extension holds one variant per set of options and dtype (288 in all;
    for_backward doubles GAT's, and those it leaves the same share their kernels). In FAMILIES' order:
    GAT's attention, the weighted sum, the mean, the max, APPNP's step."""
    assert [len(list(f.variants())) for f in FAMILIES] == [256, 8, 8, 8, 8]
    # the install compiles float32's on the CPU, without attention weights or masks; every one for CUDA
    assert [sum(v[0] is f for v in prebuilt_variants("cpu")) for f in FAMILIES] == [16, 2, 2, 2, 2]
    assert [sum(v[0] is f for v in prebuilt_variants("cuda")) for f in FAMILIES] == [256, 8, 8, 8, 8]


FIRST_USE = textwrap.dedent("""
    import sys, torch
    from torch_geometric.utils import softmax
    import seastar_layers as sl
    from seastar_layers.nn.programs import GAT_ATTENTION
    from seastar_layers.runtime import jit
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    graph = sl.Graph.from_edge_index(ei, 3)
    a_src, a_dst = torch.randn(3, 2, 1, dtype=torch.float64), torch.randn(3, 2, 1, dtype=torch.float64)
    x = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
    for _ in range(2):
        out, alpha = GAT_ATTENTION(graph, a_src=a_src, x=x, a_dst=a_dst, slope=torch.tensor(0.2, dtype=torch.float64),
                                   with_attention=True)
        out.sum().backward()
    logits = torch.nn.functional.leaky_relu(a_src[ei[0]] + a_dst[ei[1]], 0.2)
    torch.testing.assert_close(alpha, softmax(logits, ei[1], num_nodes=3))
    print("builds", jit.build_count)
""")


def test_a_variant_the_install_leaves_out_is_compiled_once_on_first_use(tmp_path):
    """A float64 variant (not prebuilt on the CPU): the op compiles it on its first call, through the
    JIT into the disk cache, serves every later call from the same tables (forward and backward),
    and a new process loads it from the cache without compiling."""
    script = tmp_path / "first_use.py"
    script.write_text(FIRST_USE)
    env = dict(os.environ, SEASTAR_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "builds 1" in runs[0].stdout and "builds 0" in runs[1].stdout, [r.stdout for r in runs]
    assert "compiling gat_attention (float64|a_dst|with_attention|for_backward) for the CPU on first use" in \
        runs[0].stderr
    assert "compiling" not in runs[1].stderr


def test_without_the_jit_a_variant_left_out_says_what_to_do(monkeypatch):
    """SEASTAR_NO_JIT=1 and a float16 variant with options the extension does not hold: the op raises,
    naming the variant, the variable and what needs no compiler; a prebuilt float32 variant runs."""
    monkeypatch.setenv("SEASTAR_NO_JIT", "1")
    x = torch.randn(N, 3, 2)
    with pytest.raises(RuntimeError, match=r"float16\|a_edge\|mask\|with_attention and could not compile it on first "
                                           r"use: .*prebuilds the layers' CPU kernels in float32, except those with "
                                           r"mask or with_attention, .*SEASTAR_NO_JIT"):
        GAT_ATTENTION(GRAPH, a_src=x[..., :1].half(), x=x.half(), slope=torch.tensor(0.2), a_edge=torch.randn(
            GRAPH.num_edges, 3, 1).half(), mask=torch.ones(GRAPH.num_edges, 3, 1).half(), with_attention=True)
    out, = GAT_ATTENTION(GRAPH, a_src=x[..., :1], x=x, slope=torch.tensor(0.2))
    assert out.shape == (N, 3, 2)


def test_torchscript_calls_a_registered_op():
    @torch.jit.script
    def propagate(graph: list[torch.Tensor], x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.ops.seastar_layers.weighted_sum(graph, x, w)[0][0]

    x, w = torch.randn(N, 4), torch.rand(GRAPH.num_edges)
    torch.testing.assert_close(propagate(GRAPH.tensors(), x, w), WEIGHTED_SUM(GRAPH, x=x, w=w)[0])


def test_ops_exist_right_after_import():
    script = textwrap.dedent("""
        import torch, seastar_layers
        for name in ("gat_attention", "weighted_sum", "appnp_step"):
            for op in (name, name + "_backward"):
                print(getattr(torch.ops.seastar_layers, op).default._schema)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "seastar_layers::gat_attention(Tensor[] graph, Tensor a_src, Tensor x, Tensor slope, Tensor? a_dst=None, " \
           "Tensor? a_edge=None, Tensor? mask=None, Tensor? keep=None, Tensor? seed=None, bool with_attention=False, " \
           "bool for_backward=False) " \
           "-> (Tensor[], Tensor[])" in result.stdout
    assert result.stdout.count("seastar_layers::") == 6


def test_a_graph_built_in_inference_mode_serves_training_later():
    """The ops save the graph for backward, and tensors made in inference mode cannot be saved:
    evaluating a layer under torch.inference_mode() must not break training on the same graph."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from seastar_layers.compat import import_dgl

        dgl = import_dgl()
        import seastar_layers.dgl as sd
    x = torch.randn(N, 6)
    g = dgl.add_self_loop(dgl.graph((EI[0], EI[1]), num_nodes=N))
    for layer, args in [(sl.GCNConv(6, 3), (x, EI)), (sl.GATConv(6, 3), (x, EI)), (sd.GraphConv(6, 3), (g, x))]:
        with torch.inference_mode():
            layer(*args)
        layer(*args).sum().backward()
        assert all(p.grad is not None for p in layer.parameters())


def test_autograd_is_the_extensions_own():
    """The ops' autograd kernel is C++ (csrc/seastar_ops.h: with_autograd): the results' node is the
    backward op's, and it behaves as torch's own nodes do: a second backward raises torch's error,
    retain_graph keeps it, saved-tensor hooks and checkpointing see its saved tensors, and
    differentiating its gradients again raises, naming the op, instead of treating them as constants."""
    for name in ("gat_attention", "weighted_sum", "appnp_step"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"seastar_layers::{name}", "Autograd")
    x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
    w = torch.rand(GRAPH.num_edges, dtype=torch.float64)

    def propagate(x):
        return OPS.weighted_sum(GRAPH.tensors(), x, w)[0][0]

    out = propagate(x)
    assert out.grad_fn.name() == "seastar_layers::weighted_sum_backward"
    assert not w.requires_grad and out.grad_fn.next_functions[1] == (None, 0)
    loss = out.pow(2).sum()
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    assert torch.autograd.gradcheck(propagate, (x,))

    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        out = propagate(x)
    assert any(t is x for t in packed)  # the op saves its feature through the hooks
    x.grad = None
    torch.utils.checkpoint.checkpoint(propagate, x, use_reentrant=False).sum().backward()
    torch.testing.assert_close(x.grad, torch.autograd.grad(propagate(x).sum(), x)[0])

    (grad,) = torch.autograd.grad(propagate(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="seastar_layers::weighted_sum has no double backward"):
        grad.sum().backward()


def _saved_storages(call) -> set:
    """The storages of the tensors call() saves for its backward (through saved-tensor hooks)."""
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        out = call()
    return out, {t.untyped_storage().data_ptr() for t in packed if t.numel()}


def test_the_backward_keeps_only_the_arguments_it_reads():
    """A sum's backward reads no features: the op keeps x as its shape alone (APPNP's K steps would
    otherwise hold K feature-sized tensors until the backward), so x may even change in place after
    the forward; with edge weights the backward reads x (for the weights' gradient) and keeps it. The
    gradients are those of the plain-PyTorch sum either way."""
    src, dst = GRAPH.endpoints()
    w = torch.rand(GRAPH.num_edges, dtype=torch.float64, requires_grad=True)
    for weighted in (False, True):
        x = torch.randn(N, 4, dtype=torch.float64, requires_grad=True)
        x_used = x.detach().clone().requires_grad_()
        out, saved = _saved_storages(lambda: OPS.weighted_sum(GRAPH.tensors(), x, w if weighted else None)[0][0])
        assert (x.untyped_storage().data_ptr() in saved) == weighted
        message = x_used[src] * (w[:, None] if weighted else 1)
        want = torch.zeros(N, 4, dtype=torch.float64).index_add(0, dst, message)
        grad = torch.randn_like(want)
        expected = torch.autograd.grad(want, [x_used] + [w] * weighted, grad)
        if not weighted:
            with torch.no_grad():
                x.mul_(3)  # not needed by the backward: no version-counter error, the same gradient
        got = torch.autograd.grad(out, [x] + [w] * weighted, grad)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e)


def test_appnp_keeps_no_step_features_for_its_backward():
    """appnp_propagate's K recorded sums keep none of their inputs: its backward holds the degree
    scales and the graph, no feature-sized tensor (before, one per step). 1024 features put the steps
    past torch's grain size, where they run as recorded ops, not as plain loops."""
    x = torch.randn(N, 1024, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(N, 1, dtype=torch.float64)
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        out = OPS.appnp_propagate(GRAPH.tensors(), x, scale, scale, 0.1, 10)
    assert out.grad_fn.name() == "AddcmulBackward0"
    assert packed and max(t.untyped_storage().nbytes() for t in packed) < x.nbytes
    reference = x.detach().clone().requires_grad_()
    grad = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, x, grad)[0], torch.autograd.grad(
        appnp_reference(reference, scale, scale, 0.1, 10), reference, grad)[0])


def test_small_recorded_appnp_steps_are_one_node():
    """On a small graph where only h wants a gradient, appnp_propagate runs its steps in the plain loop
    and records one node, whose backward is their transpose in plain loops (no weighted_sum, no
    addcmul either way): equal to the recorded ops (the scales wanting gradients takes those) in
    float32 and float64, gradcheck in float64; a second backward and a double backward raise as the
    programs' ops do."""
    gen = torch.Generator().manual_seed(8)
    for dtype in (torch.float32, torch.float64):
        h = torch.randn(N, 16, dtype=dtype, generator=gen, requires_grad=True)
        src_scale, dst_scale = (torch.rand(N, 1, dtype=dtype, generator=gen) + 0.5 for _ in range(2))
        grad = torch.randn(N, 16, dtype=dtype, generator=gen)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            out = OPS.appnp_propagate(GRAPH.tensors(), h, src_scale, dst_scale, 0.1, 6)
            (got,) = torch.autograd.grad(out, h, grad)
        ran = {event.name for event in profile.events()}
        assert not {"seastar_layers::weighted_sum", "seastar_layers::weighted_sum_backward", "aten::addcmul"} & ran
        assert out.grad_fn.name() == "seastar_layers::appnp_propagate_backward"
        recorded = OPS.appnp_propagate(GRAPH.tensors(), h, src_scale.clone().requires_grad_(), dst_scale, 0.1, 6)
        assert recorded.grad_fn.name() == "AddcmulBackward0"
        torch.testing.assert_close(out, recorded)
        torch.testing.assert_close(got, torch.autograd.grad(recorded, h, grad)[0])
    h = torch.randn(N, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    scale = torch.rand(N, 1, dtype=torch.float64, generator=gen)
    assert torch.autograd.gradcheck(lambda h: OPS.appnp_propagate(GRAPH.tensors(), h, scale, scale, 0.2, 4), (h,))
    loss = OPS.appnp_propagate(GRAPH.tensors(), h, scale, scale, 0.2, 4).pow(2).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    out = OPS.appnp_propagate(GRAPH.tensors(), h, scale, scale, 0.2, 4)
    (grad,) = torch.autograd.grad(out.pow(2).sum(), h, create_graph=True)
    with pytest.raises(RuntimeError, match="seastar_layers::appnp_propagate has no double backward"):
        grad.sum().backward()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_cuda_without_cuda_kernels_runs_the_jit(family, monkeypatch):
    """Where the extension has no CUDA kernels, the ops' CUDA implementation compiles the variant's
    program through the path custom programs take (nvcc, the disk cache), announced once. Here it
    runs under SEASTAR_EMULATE_CUDA=1 (the CUDA dialect on CPU tensors, as CI tests CUDA logic)
    and must equal the extension's CPU kernels, forward and backward, every option on."""
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"seastar_layers::{family.name}", "CUDA")
    assert not library.prebuilt_cuda_kernels()  # this extension was built without them
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    monkeypatch.setattr(library, "_warned_jit", False)
    options = family.options
    features = family.examples(options, torch.float64)
    args = op_args(family, options, random_inputs(family, features, seed=4, options=options))
    graph = GRAPH.tensors(with_orders=True)
    with pytest.warns(RuntimeWarning, match="has no CUDA kernels.*FORCE_CUDA=1"):
        results, saved = library._jit_forward(family, graph, *args[1:])
    want, want_saved = getattr(OPS, family.name)(*args)
    for got, expected in zip(results, want, strict=True):
        torch.testing.assert_close(got, expected)
    grads = [torch.randn_like(r) for r in results]
    got = library._jit_backward(family, graph, *args[1:], saved, grads)
    expected = getattr(OPS, f"{family.name}_backward")(*args, want_saved, grads)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_degree_scales_equal_the_layers_torch_formulas(dtype, index_dtype):
    """degree_scales gives the bits of the formulas the drop-ins replace: PyG's gcn_norm (degree^-1/2,
    0 where a vertex has no edges) and DGL's GraphConv (degrees clamped to 1, then ^-1/2 or 1/degree),
    in a plain loop (float32, float64) and through ATen ops (half types, and traced: opcheck)."""
    degrees = torch.tensor([0, 1, 2, 3, 0, 7, 100, 1025, 4097])
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), degrees.cumsum(0)]).to(index_dtype)
    as_float = degrees.to(dtype)
    pyg = as_float.pow(-0.5)
    pyg = pyg.masked_fill(pyg == float("inf"), 0)
    clamped = as_float.clamp(min=1)
    cases = [((-0.5, 0.0), pyg), ((-0.5, 1.0), torch.pow(clamped, -0.5)), ((-1.0, 1.0), 1.0 / clamped)]
    for (exponent, isolated), expected in cases:
        got = OPS.degree_scales(indptr, dtype, exponent, isolated)
        assert got.dtype == dtype and got.shape == degrees.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=f"{exponent}, {isolated}")
        torch.library.opcheck(OPS.degree_scales, (indptr, dtype, exponent, isolated))
        for dims in (2, 3):  # shaped to scale the rows of features of that many dimensions
            shaped = OPS.degree_scales(indptr, dtype, exponent, isolated, dims)
            assert shaped.shape == degrees.shape + (1,) * (dims - 1) and shaped.is_contiguous()
            torch.testing.assert_close(shaped.flatten(), expected, rtol=0, atol=0)
            torch.library.opcheck(OPS.degree_scales, (indptr, dtype, exponent, isolated, dims))


@pytest.mark.parametrize("args,error,words", [
    ((torch.tensor([0, 1]), torch.float32, 0.5, 0.0), ValueError, ["'exponent' must be -0.5 or -1", "0.5"]),
    ((torch.tensor([0.0, 1.0]), torch.float32, -0.5, 0.0), TypeError, ["'indptr' must hold int32 or int64",
                                                                       "torch.float32"]),
    ((torch.tensor([0, 1]), torch.int64, -0.5, 0.0), TypeError, ["'dtype' must be a floating dtype", "torch.int64"]),
    ((torch.zeros(0, dtype=torch.int64), torch.float32, -0.5, 0.0), ValueError, ["at least one row pointer"]),
    ((torch.tensor([0, 1]), torch.float32, -0.5, 0.0, 0), ValueError, ["'dims'", "must be >= 1, got 0"]),
], ids=["exponent", "indptr dtype", "dtype", "empty", "dims"])
def test_degree_scales_refuses_bad_arguments(args, error, words):
    with pytest.raises(error) as info:
        OPS.degree_scales(*args)
    for word in words:
        assert word in str(info.value), str(info.value)
