"""stabilise_softmax: exp(x) / sum(exp(x)) over a neighbourhood, computed with the row max subtracted.

exp(x - m) / sum(exp(x - m)) equals exp(x) / sum(exp(x)) for any per-row m, so the rewrite is exact
wherever every use of exp(x) ends in a quantity that is invariant under scaling it by a positive
per-destination factor c = exp(-m). We track that as a degree: a value of degree d is scaled by c**d.
exp(x) has degree 1; sums over neighbours, maxima and positively homogeneous maps (relu, abs, leaky
relu) keep it; products add degrees, reciprocals negate them, powers by a constant multiply them;
a comparison of two values of one degree, and a literal zero (zero scaled is zero, so it takes any
degree: dropout's `where(keep, w, 0)`), are unaffected by c. log of a degree-d value is shifted by
-d*m, which the rewrite adds back (log-sum-exp). Any other use of a scaled value, or a result of
nonzero degree, leaves the exp as written, and compiling says so (`UnstabilisedSoftmaxWarning`).
The new max is a stop-gradient: the result does not depend on it.
"""
from __future__ import annotations

import warnings
from fractions import Fraction

from ..errors import UnstabilisedSoftmaxWarning
from ..ir import Kind, Op, Program, Space
from ..ir.program import rebuild

_SAME_DEGREE = {Op.ADD, Op.MAXIMUM, Op.MINIMUM}
_COMPARISONS = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE}
# f(c x) = c f(x) for every c > 0
_POSITIVELY_HOMOGENEOUS = {Op.NEG, Op.RELU, Op.ABS, Op.LEAKY_RELU, Op.BROADCAST, Op.DETACH}
_MAX_DEGREE = 2


class _Unstable(Exception):
    def __init__(self, node: int, reason: str):
        self.node, self.reason = node, reason


def _is_zero(prog: Program, i: int) -> bool:
    n = prog.nodes[i]
    return n.op is Op.CONST and n.attr("value") == 0


def _one_degree(prog: Program, i: int, args, deg) -> Fraction:
    """The common degree of `args`, literal zeros taking any; raises if they differ."""
    found = {deg[a] for a in args if not _is_zero(prog, a)}
    if len(found) > 1:
        raise _Unstable(i, f"{prog.nodes[i].op.value} of values scaled differently by the shift")
    return found.pop() if found else Fraction(0)


def _node_degree(prog: Program, i: int, deg: dict[int, Fraction]) -> Fraction:
    n = prog.nodes[i]
    ds = [deg[a] for a in n.args]
    if not any(ds):
        return Fraction(0)
    if n.op.kind == Kind.AGGREGATION:
        if n.attr("to") != "dst":
            raise _Unstable(i, "an aggregation of the exponentials to the sources, not the destinations")
        return ds[0]
    if n.op in _POSITIVELY_HOMOGENEOUS:
        return ds[0]
    if n.op is Op.MUL:
        return ds[0] + ds[1]
    if n.op is Op.RECIP:
        return -ds[0]
    if n.op is Op.SQRT:
        return ds[0] / 2
    if n.op is Op.POW and ds[1] == 0 and prog.nodes[n.args[1]].op is Op.CONST:
        return ds[0] * Fraction(prog.nodes[n.args[1]].attr("value"))
    if n.op in _SAME_DEGREE:
        return _one_degree(prog, i, n.args, deg)
    if n.op in _COMPARISONS:
        _one_degree(prog, i, n.args, deg)
        return Fraction(0)
    if n.op is Op.WHERE:
        if ds[0]:
            raise _Unstable(i, "a condition on the unnormalised exponentials")
        return _one_degree(prog, i, n.args[1:], deg)
    if n.op is Op.LOG:
        return Fraction(0)  # shifted, not scaled: the rewrite adds the shift back
    raise _Unstable(i, f"{n.op.value} of the unnormalised exponentials")


def _degrees(prog: Program, seed: int) -> dict[int, Fraction]:
    """Degree of every node in the scaling of node `seed`; raises _Unstable if the rewrite would not be exact."""
    deg = _scaling(prog, {seed})
    for _, i in prog.outputs:
        if deg[i]:
            raise _Unstable(i, "a result that scales with the exponentials (not normalised by their sum)")
    return deg


def _scaling(prog: Program, seeds: set[int]) -> dict[int, Fraction]:
    deg: dict[int, Fraction] = {}
    for i in range(len(prog.nodes)):
        deg[i] = Fraction(1) if i in seeds else _node_degree(prog, i, deg)
        if abs(deg[i]) > _MAX_DEGREE:
            raise _Unstable(i, f"a power {deg[i]} of the exponentials")
    return deg


def scaling_degrees(prog: Program, seeds: set[int]) -> dict[int, Fraction] | None:
    """How each value scales when the exponentials `seeds` are all scaled by one positive factor c
    (degree d: by c**d), or None where some use of them is not a scaling (online_softmax reads it)."""
    try:
        return _scaling(prog, seeds)
    except _Unstable:
        return None


def reaches_a_sum(prog: Program, seed: int) -> bool:
    """Whether node `seed` flows into a neighbourhood sum: the exponentials this pass considers."""
    reached = {seed}
    for i, n in enumerate(prog.nodes):
        if i > seed and any(a in reached for a in n.args):
            if n.op is Op.AGG_SUM:
                return True
            reached.add(i)
    return False


def stabilise_softmax(prog: Program) -> Program:
    i = 0
    while i < len(prog.nodes):
        n = prog.nodes[i]
        if n.op is Op.EXP and n.space in (Space.EDGE, Space.SRC) and not n.attr("stabilised") \
                and reaches_a_sum(prog, i):
            try:
                deg = _degrees(prog, i)
            except _Unstable as why:
                _warn(prog, i, why)
            else:
                prog = _rewrite(prog, i, deg)
        i += 1
    return prog


def _warn(prog: Program, exp_id: int, why: _Unstable) -> None:
    where = prog.nodes[why.node].loc or prog.nodes[exp_id].loc
    at = f" at line {where.lineno} of {where.filename}" if where else ""
    shown = f"\n{where.render()}" if where else ""
    text = (f"the exponential summed over in-neighbours is not stabilised (no row max subtracted): {why.reason}{at}; "
            f"its kernel overflows once exp's argument passes about 88 in float32 (11 in float16). Normalise by the "
            f"exponentials' sum, or subtract a per-row bound yourself{shown}")
    if where is None:
        warnings.warn(text, UnstabilisedSoftmaxWarning, stacklevel=2)
    else:  # reported at the user's line, where warning filters and tracebacks look
        warnings.warn_explicit(text, UnstabilisedSoftmaxWarning, where.filename, where.lineno)


def _rewrite(prog: Program, exp_id: int, deg: dict[int, Fraction]) -> Program:
    row_max = None

    def visit(b, i, node, args):
        nonlocal row_max
        if i == exp_id:
            (x,) = args
            row_max = b.aggregate(Op.AGG_MAX, x, Space.DST, stop_gradient=True)
            return b.emit(Op.EXP, (b.add(x, b.neg(row_max)),), stabilised=True)
        if node.op is Op.LOG and deg[node.args[0]]:
            # log(c**d s) = log(s) - d m: add d m back
            shift = deg[node.args[0]]
            back = row_max if shift == 1 else b.mul(row_max, b.const(float(shift)))
            return b.add(b.emit(Op.LOG, args), back)
        return None

    b, remap = rebuild(prog, visit)
    return b.program((name, remap[i]) for name, i in prog.outputs)
