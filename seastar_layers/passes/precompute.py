"""precompute: edge sums of the backward that need no gradient are summed by the forward and saved.

GAT's backward sweeps the destinations only for the attention's destination term:

    d a_dst[v] = g_v . (sum_e f'_e x_u)  +  D_v * (sum_e f'_e),   f'_e = leaky'(s_e) * exp(s_e - max_v)

where g_v (the output's adjoint) and D_v (a row value made from it) are the same on every edge of v,
and the two sums read forward values alone. factor_reductions has already moved g_v out of the
first sum; `pull_row_factors` moves D_v out of the second (any row value the sum is linear in). What
is then left inside a destination sum is a function of the forward's inputs and saved values, which
the forward computes anyway in its last loop over the same edges (the exp is shared). So the forward
sums it there and saves it (one row per vertex), and the backward reads it: its destination sweep
over the edges, with its exps, goes away, and the backward is one sweep over the sources. It runs only
for a forward that a backward follows (compiler.Compilation.for_backward): the extra sums make GAT's
forward take about 60% longer, which a forward in inference would pay for nothing.
"""
from __future__ import annotations

from ..ir import Kind, Op, Program, Role, Space
from ..ir.program import Builder, rebuild
from .autodiff import Backward, saved_key
from .factor import linear_split, plus_remainder, row_times_sum


def _adjoint_dependent(prog: Program) -> set[int]:
    found: set[int] = set()
    for i, n in enumerate(prog.nodes):
        if (n.op is Op.INPUT and n.attr("key").role is Role.ADJOINT) or any(a in found for a in n.args):
            found.add(i)
    return found


def _row_factor(prog: Program, x: int, to: Space, dependent: set[int]):
    """(c, its LinearSplit) for a row value c in `to`, depending on an adjoint, that the edge value x
    is affine in with a derivative that reads no adjoint; None if there is none."""
    seen, stack, rows = set(), [x], []
    while stack:
        i = stack.pop()
        if i in seen or prog.nodes[i].space is not Space.EDGE:
            continue
        seen.add(i)
        for a in prog.nodes[i].args:
            if prog.nodes[a].space is to and a in dependent and a not in rows:
                rows.append(a)
            stack.append(a)
    for c in rows:
        split = linear_split(prog, x, c)
        if split is not None and not split.derivative_reads() & dependent:
            return c, split
    return None


def pull_row_factors(prog: Program) -> Program:
    """sum_e f(c) = c * sum_e f' + sum_e f(0) for a row value c that f is linear in (f' free of
    adjoints), so that the sums left read no adjoint."""
    for _ in range(len(prog.nodes)):  # each rewrite may leave a remainder sum with another factor
        dependent = _adjoint_dependent(prog)
        remap: dict[int, int] = {}
        changed = False

        def visit(b: Builder, i: int, n, args):
            nonlocal changed
            # only destination sums can move into the forward's sweeps
            if changed or n.op is not Op.AGG_SUM or n.attr("to") != Space.DST.value or n.args[0] not in dependent:
                return None
            to = Space.DST
            found = _row_factor(prog, n.args[0], to, dependent)
            if found is None:
                return None
            c, split = found
            changed = True
            summed = b.aggregate(Op.AGG_SUM, split.derivative(b, remap), to)
            return plus_remainder(b, row_times_sum(b, remap[c], summed), split.at_zero(b, remap), to)

        b, _ = rebuild(prog, visit, remap)
        prog = b.program((key, remap[i]) for key, i in prog.outputs)
        if not changed:
            return prog
    return prog


def move_to_forward(fwd: Program, backward: Backward) -> tuple[Program, Backward]:
    """Destination sums of the backward that read no adjoint and no other sum of the backward are
    computed by the forward (its nodes, shared where they are the same) and saved for the backward."""
    bwd = backward.program
    dependent = _adjoint_dependent(bwd)
    forward_inputs = {n.attr("key"): i for i, n in fwd.inputs()}

    def movable(i: int) -> bool:
        n = bwd.nodes[i]
        if n.op is not Op.AGG_SUM or n.attr("to") != Space.DST.value or i in dependent:
            return False
        seen, stack = set(), list(n.args)
        while stack:
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            m = bwd.nodes[j]
            if m.op.kind == Kind.AGGREGATION:
                return False
            if m.op is Op.INPUT and m.attr("key").role is not Role.SAVED and m.attr("key") not in forward_inputs:
                return False  # the forward would need a new input
            stack.extend(m.args)
        return True

    moved = [i for i in range(len(bwd.nodes)) if movable(i)]
    if not moved:
        return fwd, backward
    b, same = rebuild(fwd, lambda *_: None)
    assert all(k == v for k, v in same.items()), "the forward program is not in canonical form"
    into_forward: dict[int, int] = {}

    def copy(i: int) -> int:
        if i not in into_forward:
            n = bwd.nodes[i]
            b.loc = n.loc
            if n.op is Op.INPUT:
                key = n.attr("key")
                into_forward[i] = int(key.name) if key.role is Role.SAVED else forward_inputs[key]
            else:
                typed = (n.space, n.shape) if n.op is Op.CONST else None
                into_forward[i] = b.emit(n.op, [copy(a) for a in n.args], typed, **dict(n.attrs))
        return into_forward[i]

    for i in moved:
        copy(i)
    forward = Program(tuple(b.nodes), fwd.outputs)  # the moved sums become outputs as saved values
    saved = list(backward.saved)

    def visit(bb: Builder, i: int, n, args):
        if i not in moved:
            return None
        j = into_forward[i]
        if j not in saved:
            saved.append(j)
        return bb.input(saved_key(forward, j), n.shape)

    bb, remap = rebuild(bwd, visit)
    return forward, Backward(bb.program((k, remap[i]) for k, i in bwd.outputs), tuple(saved))
