"""autodiff: the backward of a vertex program is another vertex program.

Reverse mode over the forward IR. The adjoint of an aggregation over in-edges reaches its operand
per edge; where that operand is a source value the contributions are summed over the source's
out-edges (an aggregation to src), so backward kernels are sweeps over the reversed graph with no
atomics. Parameter gradients are summed per row by the kernels and over rows by the runtime.

Save planning lives here too, in `Autodiff.primal`: the backward recomputes every forward value it
needs from the inputs, except aggregation results, which the forward saves (O(rows) each).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import OPS, Builder, BufferKey, Kind, Op, Program, Role, Space


@dataclass(frozen=True)
class Backward:
    program: Program  # outputs: one GRADIENT per differentiable forward input (see gradient_key)
    saved: tuple[int, ...]  # forward node ids the forward must also output (as SAVED)


def gradient_key(input_key: BufferKey, bucket: Space | None = None) -> BufferKey:
    """The backward output holding the gradient of one forward input.

    A parameter's gradient comes as per-row partial sums, one output per row space (bucket)."""
    return BufferKey(Role.GRADIENT, input_key.name, input_key.space, bucket)


def saved_key(fwd: Program, i: int) -> BufferKey:
    return BufferKey(Role.SAVED, str(i), fwd.nodes[i].space)


def adjoint_key(output_key: BufferKey) -> BufferKey:
    return BufferKey(Role.ADJOINT, output_key.name, output_key.space)


class Expr:
    """A value of the backward program under construction; arithmetic on it emits IR in the
    canonical forms the later passes expect (a - b as a + -b, a / b as a * recip(b))."""

    __slots__ = ("b", "id")

    def __init__(self, b: Builder, id: int):
        self.b, self.id = b, id

    def lift(self, x) -> "Expr":
        return x if isinstance(x, Expr) else Expr(self.b, self.b.const(float(x)))

    def __add__(self, o):
        return Expr(self.b, self.b.add(self.id, self.lift(o).id))

    def __radd__(self, o):
        return self.lift(o) + self

    def __neg__(self):
        return Expr(self.b, self.b.neg(self.id))

    def __sub__(self, o):
        return self + (-self.lift(o))

    def __rsub__(self, o):
        return self.lift(o) + (-self)

    def __mul__(self, o):
        return Expr(self.b, self.b.mul(self.id, self.lift(o).id))

    def __rmul__(self, o):
        return self.lift(o) * self

    def __truediv__(self, o):
        return self * Expr(self.b, self.b.recip(self.lift(o).id))

    def __rtruediv__(self, o):
        return self.lift(o) * Expr(self.b, self.b.recip(self.id))

    def __gt__(self, o):
        return Expr(self.b, self.b.binary(Op.GT, self.id, self.lift(o).id))

    def __lt__(self, o):
        return Expr(self.b, self.b.binary(Op.LT, self.id, self.lift(o).id))


class RuleContext:
    """What a gradient rule (ir/ops.py) sees of one forward node: its adjoint, primals and attributes."""

    def __init__(self, ad: "Autodiff", i: int, g: int):
        self.ad, self.i, self.node = ad, i, ad.fwd.nodes[i]
        self.g = Expr(ad.b, g)

    def arg(self, k: int) -> Expr:
        return Expr(self.ad.b, self.ad.primal(self.node.args[k]))

    @property
    def out(self) -> Expr:
        return Expr(self.ad.b, self.ad.primal(self.i))

    def attr(self, name: str):
        return self.node.attr(name)

    def arg_shape(self, k: int):
        return self.ad.fwd.nodes[self.node.args[k]].shape

    def is_const(self, k: int) -> bool:
        return self.ad.fwd.nodes[self.node.args[k]].op is Op.CONST

    def op(self, op: Op, *args, **attrs) -> Expr:
        ids = [self.g.lift(a).id for a in args]
        b = self.ad.b
        return Expr(b, b.binary(op, *ids) if OPS[op].arity == 2 and not attrs else b.emit(op, ids, **attrs))

    def where(self, cond, a, b) -> Expr:
        return self.op(Op.WHERE, cond, a, b)

    def exp(self, x) -> Expr:
        return self.op(Op.EXP, x)

    def reshape(self, x: Expr, shape) -> Expr:
        return Expr(self.ad.b, self.ad.b.reshape(x.id, shape))

    def broadcast(self, x: Expr, shape) -> Expr:
        return Expr(self.ad.b, self.ad.b.broadcast(x.id, shape))

    def aggregate(self, op: Op, x: Expr, to: Space) -> Expr:
        return Expr(self.ad.b, self.ad.b.aggregate(op, x.id, to))


class Autodiff:
    def __init__(self, fwd: Program):
        self.fwd = fwd
        self.b = Builder()
        self._primal: dict[int, int] = {}
        self.saved: list[int] = []

    def primal(self, i: int) -> int:
        """The forward value i inside the backward program: recomputed, or saved if an aggregation."""
        if i in self._primal:
            return self._primal[i]
        n = self.fwd.nodes[i]
        if n.op is Op.INPUT:
            out = self.b.input(n.attr("key"), n.shape)
        elif n.op is Op.CONST:
            out = self.b.const(n.attr("value"))
        elif n.op.kind == Kind.AGGREGATION:
            self.saved.append(i)
            out = self.b.input(saved_key(self.fwd, i), n.shape)
        else:
            out = self.b.emit(n.op, [self.primal(a) for a in n.args], **dict(n.attrs))
        self._primal[i] = out
        return out

    def shape(self, i: int):
        return self.b.node(i).shape

    def fit(self, c: int, shape) -> int:
        """Undo broadcasting: sum a contribution down to the operand's feature shape (or expand it)."""
        shape = tuple(shape)
        cs = self.shape(c)
        if cs == shape:
            return c
        lead = len(cs) - len(shape)
        axes = [k for k in range(len(cs)) if k < lead or (shape[k - lead] == 1 and cs[k] != 1)]
        if axes:
            c = self.b.reduce_sum(c, axes, keepdim=True)
            c = self.b.reshape(c, self.shape(c)[max(lead, 0):])
        if self.shape(c) != shape:
            c = self.b.broadcast(c, shape)
        return c


def autodiff(fwd: Program) -> Backward:
    ad = Autodiff(fwd)
    b = ad.b
    adj: dict[int, int] = {}
    param_adj: dict[tuple[int, Space], int] = {}

    def accumulate(target: int, c: int, ctx: Space):
        t = fwd.nodes[target]
        if t.space is Space.CONST:
            return
        b.loc = t.loc
        if t.space is Space.PARAM:
            bucket = Space.DST if ctx is Space.EDGE else ctx
            if ctx is Space.EDGE:
                # summed over the edges at the edge value's shape, then reduced to the parameter's
                # once per row: a per-edge reduction (GAT's slope over its heads) would keep the
                # edge loop from running with its accumulators in registers
                c = b.aggregate(Op.AGG_SUM, c, Space.DST)
            c = ad.fit(c, t.shape)
            key = (target, bucket)
            param_adj[key] = b.add(param_adj[key], c) if key in param_adj else c
            return
        c = ad.fit(c, t.shape)
        if ctx is Space.EDGE and t.space in (Space.SRC, Space.DST):
            c = b.aggregate(Op.AGG_SUM, c, t.space)
        adj[target] = b.add(adj[target], c) if target in adj else c

    for key, i in fwd.outputs:
        n = fwd.nodes[i]
        accumulate(i, b.input(adjoint_key(key), n.shape), key.space)

    for i in reversed(range(len(fwd.nodes))):
        n = fwd.nodes[i]
        if i not in adj or n.op.kind == Kind.LEAF:
            continue
        rule = OPS[n.op].grad
        if rule is None:
            raise NotImplementedError(f"no gradient rule for {n.op.name}")
        b.loc = n.loc
        ctx = Space.EDGE if n.op.kind == Kind.AGGREGATION else n.space
        for arg, c in zip(n.args, rule(RuleContext(ad, i, adj[i])), strict=True):
            if c is not None:
                accumulate(arg, c.id, ctx)

    outputs = []
    for i, n in fwd.inputs():
        key = n.attr("key")
        if key.role is Role.PARAM:
            for bucket in (Space.DST, Space.SRC):
                if (i, bucket) in param_adj:
                    outputs.append((gradient_key(key, bucket), param_adj[(i, bucket)]))
        elif key.role is Role.FEATURE and i in adj:
            outputs.append((gradient_key(key), adj[i]))
    return Backward(b.program(outputs), tuple(ad.saved))


