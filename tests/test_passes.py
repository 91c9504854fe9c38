"""Each pass on small hand-built IR: what it must rewrite, what it must leave alone."""
import warnings

import pytest
import torch

from seastar_layers.ir import Builder, BufferKey, Kind, Op, Program, Role, Space, verify
from seastar_layers.passes.autodiff import adjoint_key, autodiff, gradient_key
from seastar_layers.passes.canonicalize import canonicalize
from seastar_layers.passes.factor import factor_reductions
from seastar_layers.passes.hoist import hoist_params
from seastar_layers.passes.precompute import move_to_forward, pull_row_factors
from seastar_layers.passes.schedule import schedule
from seastar_layers.passes.softmax import stabilise_softmax
from seastar_layers.errors import UnstabilisedSoftmaxWarning

OUT = BufferKey(Role.OUTPUT, "out0", Space.DST)


def feature(b: Builder, name: str, space: Space, shape=(2,)) -> int:
    return b.input(BufferKey(Role.FEATURE, name, space), shape)


def ops_of(prog: Program) -> list[Op]:
    return [n.op for n in prog.nodes]


def gat(b: Builder, heads=2, channels=3) -> Program:
    """softmax over in-edges of leaky_relu(a_src + a_dst), weighting h_src (GAT)."""
    a_src = feature(b, "a_src", Space.SRC, (heads, 1))
    a_dst = feature(b, "a_dst", Space.DST, (heads, 1))
    h = feature(b, "h", Space.SRC, (heads, channels))
    score = b.emit(Op.LEAKY_RELU, (b.add(a_src, a_dst),), slope=0.2)
    weight = b.emit(Op.EXP, (score,))
    total = b.aggregate(Op.AGG_SUM, weight, Space.DST)
    out = b.aggregate(Op.AGG_SUM, b.mul(b.mul(weight, b.recip(total)), h), Space.DST)
    return b.program([(OUT, out)])


# --- canonicalize ------------------------------------------------------------------------------
def test_canonicalize_leaves_no_sub_or_div():
    b = Builder()
    x, y = feature(b, "x", Space.SRC), feature(b, "y", Space.DST)
    out = b.aggregate(Op.AGG_SUM, b.emit(Op.DIV, (b.emit(Op.SUB, (x, y)), y)), Space.DST)
    prog = canonicalize(b.program([(OUT, out)]))
    verify(prog, "canonicalize")
    assert Op.SUB not in ops_of(prog) and Op.DIV not in ops_of(prog)
    assert {Op.NEG, Op.RECIP} <= set(ops_of(prog))


# --- softmax stabilisation -----------------------------------------------------------------------
def test_softmax_gets_a_stop_gradient_row_max():
    prog = stabilise_softmax(gat(Builder()))
    verify(prog, "stabilise_softmax")
    maxes = [n for n in prog.nodes if n.op is Op.AGG_MAX]
    assert len(maxes) == 1 and maxes[0].attr("stop_gradient")
    exps = [n for n in prog.nodes if n.op is Op.EXP]
    assert len(exps) == 1 and exps[0].attr("stabilised")
    # exp's operand is now score + (-max)
    (arg,) = exps[0].args
    assert prog.nodes[arg].op is Op.ADD and any(prog.nodes[a].op is Op.NEG for a in prog.nodes[arg].args)


def test_an_unnormalised_exp_sum_is_left_alone():
    b = Builder()
    x = feature(b, "x", Space.SRC)
    out = b.aggregate(Op.AGG_SUM, b.emit(Op.EXP, (x,)), Space.DST)  # sum(exp(x)): not scale invariant
    prog = b.program([(OUT, out)])
    with pytest.warns(UnstabilisedSoftmaxWarning, match="not normalised by their sum"):
        assert stabilise_softmax(prog) == prog


def test_a_nonlinearity_of_the_normalised_weights_is_left_alone():
    b = Builder()
    x = feature(b, "x", Space.SRC)
    w = b.emit(Op.EXP, (x,))
    total = b.aggregate(Op.AGG_SUM, w, Space.DST)
    out = b.aggregate(Op.AGG_SUM, b.emit(Op.EXP, (w,)), Space.DST)  # exp(exp(x)) is not invariant
    out = b.add(out, total)
    prog = b.program([(OUT, out)])
    with pytest.warns(UnstabilisedSoftmaxWarning, match="exp of the unnormalised exponentials"):
        assert not any(n.op is Op.AGG_MAX for n in stabilise_softmax(prog).nodes)


def softmax_weighting(b: Builder, weigh) -> Program:
    """sum_e weigh(exp(s_e)) * h_u / sum_e exp(s_e): GAT's softmax, its weights passed through `weigh`."""
    s = b.add(feature(b, "s", Space.SRC, (2, 1)), feature(b, "d", Space.DST, (2, 1)))
    h = feature(b, "h", Space.SRC, (2, 3))
    w = b.emit(Op.EXP, (s,))
    total = b.aggregate(Op.AGG_SUM, w, Space.DST)
    out = b.aggregate(Op.AGG_SUM, b.mul(b.mul(weigh(b, w), b.recip(total)), h), Space.DST)
    return b.program([(OUT, out)])


def dropped(b: Builder, w: int, zero_first: bool = False) -> int:
    draw = b.emit(Op.UNIFORM, (b.input(BufferKey(Role.SEED, "seed", Space.PARAM), ()),), space="edge", shape=(2, 1),
                  draw=1)
    keep = b.emit(Op.LT, (draw, b.const(0.6)))
    return b.where(keep, b.const(0.0), w) if zero_first else b.where(keep, w, b.const(0.0))


SHIFT_INVARIANT_FORMS = {
    "dropout": lambda b, w: dropped(b, w),
    "dropout, zero branch first": lambda b, w: dropped(b, w, zero_first=True),
    "relu": lambda b, w: b.unary(Op.RELU, w),
    "abs": lambda b, w: b.unary(Op.ABS, w),
    "maximum with 0": lambda b, w: b.emit(Op.MAXIMUM, (w, b.const(0.0))),
    "a comparison of equal degrees": lambda b, w: b.mul(w, b.emit(Op.GT, (w, b.const(0.0)))),
    "square over sqrt": lambda b, w: b.mul(b.mul(w, w), b.recip(b.unary(Op.SQRT, b.mul(w, w)))),
}


@pytest.mark.parametrize("form", SHIFT_INVARIANT_FORMS)
def test_shift_invariant_forms_are_stabilised(form):
    prog = softmax_weighting(Builder(), SHIFT_INVARIANT_FORMS[form])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnstabilisedSoftmaxWarning)
        stable = stabilise_softmax(prog)
    verify(stable, "stabilise_softmax")
    assert [n.attr("stabilised") for n in stable.nodes if n.op is Op.EXP] == [True]


@pytest.mark.parametrize("form,reason", [
    ("where on a threshold", "gt of values scaled differently"),
    ("nonzero other branch", "where of values scaled differently"),
    ("exp of the weights", "exp of the unnormalised exponentials"),
])
def test_forms_that_depend_on_the_scale_warn(form, reason):
    weigh = {"where on a threshold": lambda b, w: b.where(b.emit(Op.GT, (w, b.const(2.0))), w, b.const(0.0)),
             "nonzero other branch": lambda b, w: b.where(b.emit(Op.GT, (w, w)), w, b.const(1.0)),
             "exp of the weights": lambda b, w: b.emit(Op.EXP, (w,))}[form]
    prog = softmax_weighting(Builder(), weigh)
    with pytest.warns(UnstabilisedSoftmaxWarning, match=reason):
        stable = stabilise_softmax(prog)
    assert not any(n.attr("stabilised") for n in stable.nodes)


def test_log_of_a_scaled_sum_gets_the_max_added_back():
    b = Builder()
    s = feature(b, "s", Space.SRC, (2, 1))
    total = b.aggregate(Op.AGG_SUM, b.emit(Op.EXP, (s,)), Space.DST)
    prog = stabilise_softmax(b.program([(OUT, b.unary(Op.LOG, total))]))
    verify(prog, "stabilise_softmax")
    (row_max,) = [i for i, n in enumerate(prog.nodes) if n.op is Op.AGG_MAX]
    (result,) = [i for _, i in prog.outputs]
    assert prog.nodes[result].op is Op.ADD and row_max in prog.nodes[result].args


# --- hoisting ----------------------------------------------------------------------------------
def test_parameter_only_arithmetic_moves_to_the_prelude():
    b = Builder()
    w = b.input(BufferKey(Role.PARAM, "w", Space.PARAM), (2,))
    x = feature(b, "x", Space.SRC)
    scaled = b.emit(Op.SIGMOID, (b.mul(w, b.const(3.0)),))  # only parameters: torch computes it
    out = b.aggregate(Op.AGG_SUM, b.mul(x, scaled), Space.DST)
    prog, prelude = hoist_params(b.program([(OUT, out)]))
    verify(prog, "hoist")
    verify(prelude, "prelude")
    assert Op.SIGMOID not in ops_of(prog) and Op.SIGMOID in ops_of(prelude)
    hoisted = [n.attr("key") for n in prog.nodes if n.op is Op.INPUT and n.space is Space.PARAM]
    assert [k.name for k, _ in prelude.outputs] == [k.name for k in hoisted if k.name.startswith("#param")]


# --- autodiff and save planning ----------------------------------------------------------------
def test_backward_of_a_weighted_sum_sums_over_out_edges():
    b = Builder()
    x = feature(b, "x", Space.SRC)
    w = feature(b, "w", Space.EDGE, ())
    out = b.aggregate(Op.AGG_SUM, b.mul(x, w), Space.DST)
    bwd = autodiff(b.program([(OUT, out)]))
    verify(bwd.program, "autodiff")
    assert bwd.saved == ()  # a plain sum needs nothing from the forward
    grads = dict(bwd.program.outputs)
    dx = grads[gradient_key(BufferKey(Role.FEATURE, "x", Space.SRC))]
    dw = grads[gradient_key(BufferKey(Role.FEATURE, "w", Space.EDGE))]
    # dx: per edge g_dst * w, summed over the source's out-edges (a sweep over sources, no atomics)
    assert bwd.program.nodes[dx].op is Op.AGG_SUM and bwd.program.nodes[dx].attr("to") == "src"
    # dw: per edge g_dst . x_src, reduced over the feature axis
    assert bwd.program.nodes[dw].space is Space.EDGE and bwd.program.nodes[dw].shape == ()
    inputs = {n.attr("key") for n in bwd.program.nodes if n.op is Op.INPUT}
    assert adjoint_key(OUT) in inputs


def test_softmax_saves_only_aggregation_results():
    prog = canonicalize(stabilise_softmax(gat(Builder())))
    bwd = autodiff(prog)
    verify(bwd.program, "autodiff")
    saved = [prog.nodes[i] for i in bwd.saved]
    assert saved and all(n.op.kind == Kind.AGGREGATION for n in saved)
    assert all(n.space is Space.DST for n in saved)  # O(rows): never per edge
    assert {n.op for n in saved} == {Op.AGG_MAX, Op.AGG_SUM}


def test_max_aggregation_gradient_is_shared_among_winners():
    b = Builder()
    x = feature(b, "x", Space.SRC)
    out = b.aggregate(Op.AGG_MAX, x, Space.DST)
    bwd = autodiff(b.program([(OUT, out)]))
    ops = ops_of(bwd.program)
    assert Op.EQ in ops  # winners found by comparing with the saved max
    assert len(bwd.saved) == 1


def test_stop_gradient_max_gets_no_adjoint():
    prog = canonicalize(stabilise_softmax(gat(Builder())))
    bwd = autodiff(prog)
    # the stabilising max must not be differentiated: no EQ-based winner search in the backward
    assert Op.EQ not in ops_of(bwd.program)


@pytest.mark.parametrize("op", [Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.SIGMOID, Op.ABS, Op.RELU, Op.ERF])
def test_unary_rules_build_verifiable_backward(op):
    b = Builder()
    x = feature(b, "x", Space.SRC)
    out = b.aggregate(Op.AGG_SUM, b.emit(op, (x,)), Space.DST)
    bwd = autodiff(b.program([(OUT, out)]))
    verify(bwd.program, f"autodiff of {op.name}")
    assert gradient_key(BufferKey(Role.FEATURE, "x", Space.SRC)) in dict(bwd.program.outputs)


def test_parameter_gradients_come_as_per_row_partials():
    b = Builder()
    w = b.input(BufferKey(Role.PARAM, "w", Space.PARAM), (2,))
    x = feature(b, "x", Space.SRC)
    y = feature(b, "y", Space.DST)
    out = b.add(b.aggregate(Op.AGG_SUM, b.mul(x, w), Space.DST), b.mul(y, w))
    bwd = autodiff(b.program([(OUT, out)]))
    keys = [k for k, _ in bwd.program.outputs if k.role is Role.GRADIENT and k.space is Space.PARAM]
    # y * w is per destination; x * w is per source (summed over its out-edges' adjoints): one partial
    # sum per row of each, which the runtime adds up in torch
    assert {k.bucket for k in keys} == {Space.DST, Space.SRC}


# --- factor_reductions -------------------------------------------------------------------------
def edge_reductions(prog: Program) -> list[int]:
    return [i for i, n in enumerate(prog.nodes) if n.op is Op.REDUCE_SUM and n.space is Space.EDGE]


def test_gat_backward_takes_no_dot_product_per_edge():
    """The weights' adjoint is adjoint . h per edge (a sum over channels) and the attention
    gradients only scale it: the sums move after the edge loops, which accumulate products."""
    bwd = autodiff(canonicalize(stabilise_softmax(gat(Builder())))).program
    assert edge_reductions(bwd)
    factored = factor_reductions(bwd)
    verify(factored, "factor_reductions")
    assert not edge_reductions(factored)
    assert [key for key, _ in factored.outputs] == [key for key, _ in bwd.outputs]
    wide = [n for n in factored.nodes if n.op is Op.AGG_SUM and n.shape == (2, 3)]
    assert {n.attr("to") for n in wide} == {"dst", "src"}


@pytest.mark.parametrize("case", ["nonlinear", "no_row_constant_operand"])
def test_dot_products_that_do_not_factor_stay_per_edge(case):
    b = Builder()
    x, y = feature(b, "x", Space.SRC), feature(b, "y", Space.DST)
    if case == "nonlinear":  # exp(x . y): the sum is needed per edge
        per_edge = b.emit(Op.EXP, (b.reduce_sum(b.mul(x, y), (0,), keepdim=True),))
    else:  # x . w with w per edge: neither operand is the same on every edge of a row
        w = feature(b, "w", Space.EDGE)
        per_edge = b.reduce_sum(b.mul(x, w), (0,), keepdim=True)
    prog = b.program([(OUT, b.aggregate(Op.AGG_SUM, per_edge, Space.DST))])
    assert edge_reductions(factor_reductions(prog)) == edge_reductions(prog) != []


def test_gat_layers_compute_no_gradient_for_the_slope():
    """The prebuilt GAT program reads its negative slope detached: its backward has no slope output,
    so no per-edge accumulator for a gradient that nothing reads."""
    from seastar_layers.nn import programs

    prog = programs.gat_attention(True, True, False, torch.tensor(0.2), for_backward=True)
    feats = {"a_src": torch.randn(3, 2, 1), "x": torch.randn(3, 2, 3), "a_dst": torch.randn(3, 2, 1),
             "a_edge": torch.randn(4, 2, 1)}
    outputs = {key.name for key, _ in prog.generate(feats).backward.program.outputs}
    assert outputs == {"a_src", "x", "a_dst", "a_edge"}


# --- precompute --------------------------------------------------------------------------------
def dst_sums(prog: Program) -> list[int]:
    return [i for i, n in enumerate(prog.nodes) if n.op is Op.AGG_SUM and n.attr("to") == "dst"]


def precomputed(fwd: Program):
    """The forward and backward after every pass up to save planning (as the pipeline runs them)."""
    bwd = autodiff(fwd)
    bwd = type(bwd)(factor_reductions(bwd.program), bwd.saved)
    bwd = type(bwd)(pull_row_factors(bwd.program), bwd.saved)
    return move_to_forward(fwd, bwd)


def test_gat_backward_sums_no_destination_edges():
    """d a_dst = g_v . sum_e f'_e h_u + D_v * sum_e f'_e with g_v and D_v the same on every edge of v:
    both sums read forward values alone, so the forward sums them (sharing its exps) and saves them,
    and the backward's one edge sweep is over the sources."""
    fwd = canonicalize(stabilise_softmax(gat(Builder())))
    before = autodiff(fwd)
    assert dst_sums(before.program)
    forward, backward = precomputed(fwd)
    verify(forward, "precompute (forward)")
    verify(backward.program, "precompute (backward)")
    assert not dst_sums(backward.program)
    assert [key for key, _ in backward.program.outputs] == [key for key, _ in before.program.outputs]
    # the new sums are the forward's, over its own exps: one exp node in all
    new = [i for i in backward.saved if i not in before.saved]
    assert new and all(forward.nodes[i].op is Op.AGG_SUM for i in new)
    assert [n.op for n in forward.nodes].count(Op.EXP) == 1
    # the forward stays one dst kernel of as many loops (which sum the new values too); the backward
    # is row work then one src sweep
    def loops(prog: Program, saved) -> list[int]:
        saves = tuple((BufferKey(Role.SAVED, str(i), prog.nodes[i].space), i) for i in saved)
        (kernel,) = schedule(Program(prog.nodes, prog.outputs + saves)).kernels
        assert kernel.direction is Space.DST
        return [len(loop.aggs) for loop in kernel.loops]

    grown = [after - was for after, was in zip(loops(forward, backward.saved), loops(fwd, before.saved), strict=True)]
    assert sum(grown) == len(new)
    bwd_sched = schedule(backward.program)
    assert [k.direction for k in bwd_sched.kernels if k.loops] == [Space.SRC]


def test_edge_adjoints_keep_their_destination_sweep():
    """With the attention weights returned per edge their adjoint differs on each edge: the sums that
    read it stay in the backward."""
    b = Builder()
    a_src, a_dst = feature(b, "a_src", Space.SRC, (2, 1)), feature(b, "a_dst", Space.DST, (2, 1))
    h = feature(b, "h", Space.SRC, (2, 3))
    weight = b.emit(Op.EXP, (b.add(a_src, a_dst),))
    out = b.aggregate(Op.AGG_SUM, b.mul(weight, h), Space.DST)
    fwd = b.program([(OUT, out), (BufferKey(Role.OUTPUT, "out1", Space.EDGE), weight)])
    forward, backward = precomputed(fwd)
    adjoint = {i for i, n in backward.program.inputs() if n.attr("key").role is Role.ADJOINT
               and n.space is Space.EDGE}

    def reads(i: int, j: int) -> bool:
        return i == j or any(reads(a, j) for a in backward.program.nodes[i].args)

    assert any(reads(i, a) for i in dst_sums(backward.program) for a in adjoint)


# --- scheduling --------------------------------------------------------------------------------
def test_gat_forward_is_one_kernel_of_three_loops():
    prog = canonicalize(stabilise_softmax(gat(Builder())))
    sched = schedule(prog)
    assert len(sched.kernels) == 1
    kern = sched.kernels[0]
    assert kern.direction is Space.DST
    assert [len(loop.aggs) for loop in kern.loops] == [1, 1, 1]  # max, sum, weighted sum
    assert {b.role for b in sched.buffers} == {Role.FEATURE, Role.OUTPUT}


def test_online_softmax_takes_the_row_max_in_the_sweep_of_its_sum():
    """With online_softmax (the CUDA dialect's) the max joins the loop of the sum it shifts, which is
    rescaled as the max rises (exp(x - m) has degree 1); the weighted sum reads the total, so it stays
    a loop after. Without it the max keeps its loop."""
    prog = canonicalize(stabilise_softmax(gat(Builder())))
    assert [len(loop.aggs) for loop in schedule(prog).kernels[0].loops] == [1, 1, 1]
    (kern,) = schedule(prog, online_softmax=True).kernels
    assert [len(loop.aggs) for loop in kern.loops] == [2, 1]
    (row_max,) = kern.loops[0].running
    (total,) = [a for a in kern.loops[0].aggs if a != row_max]
    assert prog.nodes[row_max].op is Op.AGG_MAX and kern.loops[0].rescaled == {total: (row_max, 1)}
    assert not kern.loops[1].running and not kern.loops[1].rescaled


def test_gat_backward_sweeps_destinations_then_sources():
    prog = canonicalize(stabilise_softmax(gat(Builder())))
    bwd = autodiff(prog)
    sched = schedule(bwd.program)
    directions = [k.direction for k in sched.kernels]
    assert directions[0] is Space.DST and Space.SRC in directions
    # values crossing from a dst sweep to a src sweep go through temp buffers of O(rows)
    temps = [b for b in sched.buffers if b.role is Role.TEMP]
    assert all(b.rows in (Space.DST, Space.SRC) for b in temps)
    # the source gradients are written by src sweeps, per row: no edge-sized buffer but the inputs
    assert not [b for b in sched.buffers if b.rows is Space.EDGE and not b.is_input]


def test_edge_outputs_are_written_in_the_loop_that_computes_them():
    b = Builder()
    x, y = feature(b, "x", Space.SRC), feature(b, "y", Space.DST)
    per_edge = b.mul(x, y)
    out = b.aggregate(Op.AGG_SUM, per_edge, Space.DST)
    edge_key = BufferKey(Role.OUTPUT, "out1", Space.EDGE)
    sched = schedule(b.program([(OUT, out), (edge_key, per_edge)]))
    (kern,) = sched.kernels
    assert kern.loops[0].edge_writes == [(edge_key, per_edge)]
