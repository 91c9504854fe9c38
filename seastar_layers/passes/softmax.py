"""stabilise_softmax: exp(x) / sum(exp(x)) over a neighbourhood, computed with the row max subtracted.

exp(x - m) / sum(exp(x - m)) equals exp(x) / sum(exp(x)) for any per-row m, so the rewrite is exact
wherever every use of exp(x) ends in a quantity that is invariant under scaling it by a positive
per-destination factor. We track that as a degree: exp(x) has degree 1, sum over neighbours keeps
the degree, products add degrees, reciprocals negate them; anything leaving the analysable ops, or
any result, must have degree 0. The new max is a stop-gradient: the result does not depend on it.
"""
from __future__ import annotations

from ..ir import Kind, Op, Program, Space
from ..ir.program import rebuild

_BAD = None
_SAME_DEGREE = {Op.ADD, Op.MAXIMUM, Op.MINIMUM}


def _degrees(prog: Program, seed: int) -> dict[int, int] | None:
    """Degree of every node in the scaling of node `seed`, or None if the rewrite would not be exact."""
    deg: dict[int, int] = {}
    for i, n in enumerate(prog.nodes):
        if i == seed:
            deg[i] = 1
            continue
        ds = [deg.get(a, 0) for a in n.args]
        if not any(ds):
            deg[i] = 0
            continue
        if n.op.kind == Kind.AGGREGATION:
            if n.attr("to") != "dst":
                return _BAD
            deg[i] = ds[0]
        elif n.op is Op.NEG:
            deg[i] = ds[0]
        elif n.op is Op.MUL:
            deg[i] = ds[0] + ds[1]
        elif n.op is Op.RECIP:
            deg[i] = -ds[0]
        elif n.op in _SAME_DEGREE and len(set(ds)) == 1:
            deg[i] = ds[0]
        elif n.op is Op.WHERE and ds[0] == 0 and ds[1] == ds[2]:
            deg[i] = ds[1]
        elif n.op is Op.BROADCAST:
            deg[i] = ds[0]
        else:
            return _BAD  # a reduction, reshape or nonlinearity of a scaled value
        if abs(deg[i]) > 2:
            return _BAD
    if any(deg[i] for _, i in prog.outputs):
        return _BAD
    return deg


def stabilise_softmax(prog: Program) -> Program:
    for i, n in enumerate(prog.nodes):
        if n.op is not Op.EXP or n.space not in (Space.EDGE, Space.SRC) or n.attr("stabilised"):
            continue
        users = prog.users()
        if not any(prog.nodes[u].op is Op.AGG_SUM for u in users[i]):
            continue
        if _degrees(prog, i) is None:
            continue
        prog = _rewrite(prog, i)
    return prog


def _rewrite(prog: Program, exp_id: int) -> Program:
    def visit(b, i, node, args):
        if i != exp_id:
            return None
        (x,) = args
        row_max = b.aggregate(Op.AGG_MAX, x, Space.DST, stop_gradient=True)
        return b.emit(Op.EXP, (b.add(x, b.neg(row_max)),), stabilised=True)

    b, remap = rebuild(prog, visit)
    return b.program((name, remap[i]) for name, i in prog.outputs)


