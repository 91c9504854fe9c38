"""canonicalize: sub and div into the small core (add, neg, mul, recip), so later passes see fewer ops."""
from __future__ import annotations

from ..ir import Op, Program
from ..ir.program import rebuild


def canonicalize(prog: Program) -> Program:
    def visit(b, i, node, args):
        if node.op is Op.SUB:
            return b.add(args[0], b.neg(args[1]))
        if node.op is Op.DIV:
            return b.mul(args[0], b.recip(args[1]))
        return None

    b, remap = rebuild(prog, visit)
    return b.program((name, remap[i]) for name, i in prog.outputs)
