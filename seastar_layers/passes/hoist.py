"""hoist_params: computations on closed-over tensors alone run once in torch, before the kernel.

After this pass every parameter-space value a kernel reads is an input; torch's own autograd
carries gradients from those inputs back to the user's parameters, so the compiler never
differentiates parameter-only arithmetic.
"""
from __future__ import annotations

from ..ir import BufferKey, Op, Program, Role, Space
from ..ir.program import dead_code_elimination, rebuild


def hoist_params(prog: Program) -> tuple[Program, Program]:
    """Returns (program with hoisted inputs, prelude computing them from the original params)."""
    users = prog.users()
    # a detached value stays in the kernel, where autodiff sees that nothing flows back through it
    # (hoisted, the kernel would compute a gradient for its input that torch then drops)
    hoisted = [i for i, n in enumerate(prog.nodes)
               if n.space is Space.PARAM and n.op not in (Op.INPUT, Op.DETACH)
               and any(prog.nodes[u].space is not Space.PARAM or prog.nodes[u].op is Op.DETACH for u in users[i])]
    keys = {i: BufferKey(Role.PARAM, f"#param{i}", Space.PARAM) for i in hoisted}
    prelude = dead_code_elimination(Program(prog.nodes, tuple((keys[i], i) for i in hoisted)))

    def visit(b, i, node, args):
        if i in keys:
            return b.input(keys[i], node.shape)
        return None

    b, remap = rebuild(prog, visit)
    return b.program((name, remap[i]) for name, i in prog.outputs), prelude
