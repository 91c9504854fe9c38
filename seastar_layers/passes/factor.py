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
    split = LinearSplit(prog, x, r, kind)
    reduction = prog.nodes[r]
    scaled = b.aggregate(Op.AGG_SUM, b.mul(split.derivative(b, remap), remap[q]), to)
    dot = b.reduce_sum(row_times_sum(b, remap[p], scaled), reduction.attr("axes"), keepdim=True)
    return plus_remainder(b, dot, split.at_zero(b, remap), to)


def row_times_sum(b: Builder, row: int, summed: int) -> int:
    """row * summed, 0 where the edge sum is 0: a row without edges sums nothing, whatever the row
    value holds there (GAT's 1 / total is inf, a row factor made from it NaN)."""
    zero = b.const(0.0)
    return b.where(b.binary(Op.NE, summed, zero), b.mul(row, summed), zero)


def plus_remainder(b: Builder, value: int, remainder: int, to: Space) -> int:
    """value + sum_e f(0) over the edges into `to`, where f(0) is not the constant 0."""
    return value if b.is_const(remainder, 0.0) else b.add(value, b.aggregate(Op.AGG_SUM, remainder, to))


def linear_split(prog: Program, x: int, r: int) -> "LinearSplit | None":
    """x as r * f' + f(0) where x is affine in node r (see LinearSplit), else None."""
    linear, kind = _linear_in(prog, x, r)
    return LinearSplit(prog, x, r, kind) if linear else None


class LinearSplit:
    """An edge value x that is affine in node r along elementwise paths: x = r * f' + f(0), f' its
    derivative in r (forward mode, r's elements broadcast as x's) and f(0) the rest, both built
    into a new program from the copies (`remap`) of the nodes they read."""

    def __init__(self, prog: Program, x: int, r: int, kind):
        self.prog, self.x, self.r, self.kind = prog, x, r, kind

    def derivative_reads(self) -> set[int]:
        """The nodes independent of r that f' reads (factors, divisors and conditions on r's paths)."""
        reads, seen, stack = set(), set(), [self.x]
        while stack:
            i = stack.pop()
            if i in seen or i == self.r or self.kind(i) == "const":
                continue
            seen.add(i)
            n = self.prog.nodes[i]
            operands = n.args[:1] if n.op is Op.WHERE else n.args
            reads.update(a for a in operands if self.kind(a) == "const" and n.op is not Op.ADD
                         and n.op is not Op.SUB and n.op is not Op.NEG)
            stack.extend(a for a in n.args if self.kind(a) == "linear")
        return reads

    def derivative(self, b: Builder, remap: dict) -> int:
        prog, kind, zero = self.prog, self.kind, b.const(0.0)

        @functools.cache
        def d(i: int) -> int | None:  # d i / d r, None where it is 0
            if i == self.r:
                return b.const(1.0)
            if kind(i) == "const":
                return None
            n = prog.nodes[i]
            da = [d(a) for a in n.args]
            if n.op is Op.ADD:
                return da[0] if da[1] is None else da[1] if da[0] is None else b.add(da[0], da[1])
            if n.op is Op.SUB:
                return da[0] if da[1] is None else b.neg(da[1]) if da[0] is None else b.binary(Op.SUB, da[0], da[1])
            if n.op is Op.NEG:
                return b.neg(da[0])
            if n.op is Op.MUL:
                return b.mul(da[0], remap[n.args[1]]) if da[1] is None else b.mul(remap[n.args[0]], da[1])
            if n.op is Op.DIV:
                return b.binary(Op.DIV, da[0], remap[n.args[1]])
            assert n.op is Op.WHERE, n.op
            return b.where(remap[n.args[0]], zero if da[1] is None else da[1], zero if da[2] is None else da[2])

        found = d(self.x)
        return zero if found is None else found

    def at_zero(self, b: Builder, remap: dict) -> int:
        """x with r = 0; products and quotients of 0 are 0 (as the sum they leave is summed with r's
        part, a non-finite factor there is the caller's to guard)."""
        prog, kind = self.prog, self.kind

        @functools.cache
        def z(i: int) -> int:
            if i == self.r:
                return b.const(0.0)
            if kind(i) == "const":
                return remap[i]
            n = prog.nodes[i]
            args = tuple(z(a) for a in n.args)
            if n.op is Op.MUL and any(b.is_const(a, 0.0) for a in args) or n.op is Op.DIV and b.is_const(args[0], 0.0):
                return b.const(0.0)
            if n.op is Op.WHERE and b.is_const(args[1], 0.0) and b.is_const(args[2], 0.0):
                return b.const(0.0)
            return b.emit(n.op, args, **dict(n.attrs))

        return z(self.x)
