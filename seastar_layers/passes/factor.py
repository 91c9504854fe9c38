"""factor_reductions: a per-edge dot product that an edge sum only scales moves out of the edge loop.

An aggregation sum_e f(R_e) where R_e = sum_c P[c] * Q_e[c] is a reduction over features, P is the
same on every edge the aggregation sums (a value of the rows it aggregates into), and f is linear
in R (sums, products with what does not depend on R, selects on conditions that do not) equals

    sum_c P[c] * (sum_e f'_e * Q_e[c])  +  sum_e f_e(0)

with f' the derivative of f in R (forward mode along the paths from R) and f(0) the rest. The
edge loop then accumulates f' * Q across all the features, which vectorises like a neighbour sum,
instead of a horizontal sum per edge; the dot product with P runs once per row. GAT's backward
takes two such dot products per edge and head (the adjoint with the source's features, for the
gradients of both attention vectors).
"""
from __future__ import annotations

import functools

from ..ir import Op, Program, Space
from ..ir.program import Builder, rebuild

_LINEAR = (Op.ADD, Op.SUB, Op.NEG, Op.MUL, Op.DIV, Op.WHERE)


def _factorable(prog: Program, r: int, to: Space) -> tuple[int, int] | None:
    """(P, Q) if reduction r is a dot product over features with P constant along the edges of an
    aggregation into `to`."""
    n = prog.nodes[r]
    if n.op is not Op.REDUCE_SUM or n.space is not Space.EDGE or not n.attr("keepdim"):
        return None
    product = prog.nodes[n.args[0]]
    if product.op is not Op.MUL or all(product.shape[d] == 1 for d in n.attr("axes")):
        return None
    for p, q in (product.args, product.args[::-1]):
        if prog.nodes[p].space in (to, Space.PARAM, Space.CONST) and prog.nodes[q].shape == product.shape:
            return p, q
    return None


def _linear_in(prog: Program, x: int, r: int):
    """Whether x is an affine function of r (every path from r to x through _LINEAR ops, linearly),
    and the classification of nodes it used ("const": independent of r, "linear", "other")."""
    memo: dict[int, str] = {}

    def kind(i: int) -> str:  # "const" (independent of r), "linear", or "other"
        if i in memo:
            return memo[i]
        n = prog.nodes[i]
        if i == r:
            found = "linear"
        elif i < r or not n.args or n.space is not Space.EDGE:
            # a row's values (aggregations of R among them) are the same on each of its edges
            found = "const"
        else:
            kinds = [kind(a) for a in n.args]
            if all(k == "const" for k in kinds):
                found = "const"
            elif "other" in kinds or n.op not in _LINEAR:
                found = "other"
            elif n.op is Op.MUL:
                found = "linear" if "const" in kinds else "other"
            elif n.op is Op.DIV:
                found = "linear" if kinds[1] == "const" else "other"
            elif n.op is Op.WHERE:
                found = "linear" if kinds[0] == "const" else "other"
            else:
                found = "linear"
        memo[i] = found
        return found

    return kind(x) == "linear", kind


def _candidate(prog: Program, x: int, to: Space):
    """The first reduction in x's cone that factors out of an aggregation of x into `to`."""
    seen, stack = set(), [x]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        pq = _factorable(prog, i, to)
        if pq is not None and prog.nodes[i].shape == prog.nodes[x].shape:
            linear, kind = _linear_in(prog, x, i)
            if linear:
                return i, pq, kind
        stack.extend(prog.nodes[i].args)
    return None


def factor_reductions(prog: Program) -> Program:
    remap: dict[int, int] = {}

    def visit(b: Builder, i: int, n, args):
        found = _candidate(prog, n.args[0], Space(n.attr("to"))) if n.op is Op.AGG_SUM else None
        return None if found is None else _factored(prog, b, remap, n, *found)

    b, _ = rebuild(prog, visit, remap)
    return b.program((key, remap[i]) for key, i in prog.outputs)


def _factored(prog: Program, b: Builder, remap: dict, agg, r: int, pq: tuple[int, int], kind) -> int:
    """sum_c P * (sum_e f' * Q) + sum_e f(0), for the aggregation `agg` of f(R) (R = node r)."""
    (x,), to, (p, q) = agg.args, Space(agg.attr("to")), pq

    @functools.cache
    def derivative(i: int) -> int | None:  # d i / d R, None where it is 0
        if i == r:
            return b.const(1.0)
        if kind(i) == "const":
            return None
        n = prog.nodes[i]
        d = [derivative(a) for a in n.args]
        zero = b.const(0.0)
        if n.op is Op.ADD:
            return d[0] if d[1] is None else d[1] if d[0] is None else b.add(d[0], d[1])
        if n.op is Op.SUB:
            return d[0] if d[1] is None else b.neg(d[1]) if d[0] is None else b.binary(Op.SUB, d[0], d[1])
        if n.op is Op.NEG:
            return b.neg(d[0])
        if n.op is Op.MUL:
            return b.mul(d[0], remap[n.args[1]]) if d[1] is None else b.mul(remap[n.args[0]], d[1])
        if n.op is Op.DIV:
            return b.binary(Op.DIV, d[0], remap[n.args[1]])
        assert n.op is Op.WHERE, n.op
        return b.where(remap[n.args[0]], zero if d[1] is None else d[1], zero if d[2] is None else d[2])

    @functools.cache
    def at_zero(i: int) -> int:  # i with R = 0
        if i == r:
            return b.const(0.0)
        if kind(i) == "const":
            return remap[i]
        n = prog.nodes[i]
        return b.emit(n.op, tuple(at_zero(a) for a in n.args), **dict(n.attrs))

    reduction = prog.nodes[r]
    scaled = b.aggregate(Op.AGG_SUM, b.mul(derivative(x), remap[q]), to)
    # a row without edges sums nothing, whatever P holds there (GAT's 1 / total is inf)
    zero = b.const(0.0)
    terms = b.where(b.binary(Op.NE, scaled, zero), b.mul(remap[p], scaled), zero)
    dot = b.reduce_sum(terms, reduction.attr("axes"), keepdim=True)
    remainder = at_zero(x)
    if b.is_const(remainder, 0.0):
        return dot
    return b.add(dot, b.aggregate(Op.AGG_SUM, remainder, to))
