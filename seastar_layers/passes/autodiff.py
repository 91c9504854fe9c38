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

from ..ir import Builder, Op, Program, Space

GRAD_RULES = {}


def grad_rule(*ops):
    def register(fn):
        for op in ops:
            GRAD_RULES[op] = fn
        return fn

    return register


GRAD_PREFIX = "#grad:"
SAVED_PREFIX = "#saved:"


@dataclass(frozen=True)
class Backward:
    program: Program  # outputs: see grad_output_name
    saved: tuple[int, ...]  # forward node ids the forward must also output


def grad_output_name(input_name: str, space: Space, bucket: Space | None = None) -> str:
    """Output of the backward program holding the gradient of one forward input node.

    A parameter's gradient comes as per-row partial sums, one output per row space (bucket)."""
    return f"d{input_name}@{space.value}" + (f"/{bucket.value}" if bucket else "")


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
            out = self.b.input(n.attr("name"), n.space, n.shape)
        elif n.op is Op.CONST:
            out = self.b.const(n.attr("value"))
        elif n.op in (Op.AGG_SUM, Op.AGG_MAX, Op.AGG_MIN):
            self.saved.append(i)
            out = self.b.input(f"{SAVED_PREFIX}{i}", n.space, n.shape)
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
        c = ad.fit(c, t.shape)
        if t.space is Space.PARAM:
            bucket = Space.DST if ctx is Space.EDGE else ctx
            if ctx is Space.EDGE:
                c = b.aggregate(Op.AGG_SUM, c, Space.DST)
            key = (target, bucket)
            param_adj[key] = b.add(param_adj[key], c) if key in param_adj else c
            return
        if ctx is Space.EDGE and t.space in (Space.SRC, Space.DST):
            c = b.aggregate(Op.AGG_SUM, c, t.space)
        adj[target] = b.add(adj[target], c) if target in adj else c

    for k, (name, i) in enumerate(fwd.outputs):
        n = fwd.nodes[i]
        accumulate(i, b.input(f"{GRAD_PREFIX}{k}", n.space, n.shape), n.space)

    for i in reversed(range(len(fwd.nodes))):
        n = fwd.nodes[i]
        if i not in adj or n.op in (Op.INPUT, Op.CONST):
            continue
        rule = GRAD_RULES.get(n.op)
        if rule is None:
            raise NotImplementedError(f"no gradient rule for {n.op.name}")
        b.loc = n.loc
        ctx = Space.EDGE if n.op in (Op.AGG_SUM, Op.AGG_MAX, Op.AGG_MIN) else n.space
        for arg, c in zip(n.args, rule(ad, i, n, adj[i]), strict=True):
            if c is not None:
                accumulate(arg, c, ctx)

    outputs = []
    for i, n in fwd.inputs():
        name = n.attr("name")
        if n.space is Space.PARAM:
            for bucket in (Space.DST, Space.SRC):
                if (i, bucket) in param_adj:
                    outputs.append((grad_output_name(name, n.space, bucket), param_adj[(i, bucket)]))
        elif i in adj:
            outputs.append((grad_output_name(name, n.space), adj[i]))
    return Backward(b.program(outputs), tuple(ad.saved))


# gradient rules: rule(ad, node_id, node, g) -> one contribution (or None) per argument ------------
def _gt0(ad, x):
    return ad.b.emit(Op.GT, (ad.primal(x), ad.b.const(0.0)))


@grad_rule(Op.ADD)
def _add(ad, i, n, g):
    return [g, g]


@grad_rule(Op.NEG)
def _neg(ad, i, n, g):
    return [ad.b.neg(g)]


@grad_rule(Op.MUL)
def _mul(ad, i, n, g):
    a, c = n.args
    return [ad.b.mul(g, ad.primal(c)), ad.b.mul(g, ad.primal(a))]


@grad_rule(Op.RECIP)
def _recip(ad, i, n, g):
    y = ad.primal(i)
    return [ad.b.neg(ad.b.mul(g, ad.b.mul(y, y)))]


@grad_rule(Op.EXP)
def _exp(ad, i, n, g):
    return [ad.b.mul(g, ad.primal(i))]


@grad_rule(Op.LOG)
def _log(ad, i, n, g):
    return [ad.b.mul(g, ad.b.recip(ad.primal(n.args[0])))]


@grad_rule(Op.SQRT)
def _sqrt(ad, i, n, g):
    return [ad.b.mul(g, ad.b.mul(ad.b.const(0.5), ad.b.recip(ad.primal(i))))]


@grad_rule(Op.ABS)
def _abs(ad, i, n, g):
    x = ad.primal(n.args[0])
    zero = ad.b.const(0.0)
    sign = ad.b.add(ad.b.emit(Op.GT, (x, zero)), ad.b.neg(ad.b.emit(Op.LT, (x, zero))))
    return [ad.b.mul(g, sign)]


@grad_rule(Op.SIGMOID)
def _sigmoid(ad, i, n, g):
    s = ad.primal(i)
    return [ad.b.mul(g, ad.b.mul(s, ad.b.add(ad.b.const(1.0), ad.b.neg(s))))]


@grad_rule(Op.TANH)
def _tanh(ad, i, n, g):
    t = ad.primal(i)
    return [ad.b.mul(g, ad.b.add(ad.b.const(1.0), ad.b.neg(ad.b.mul(t, t))))]


@grad_rule(Op.RELU)
def _relu(ad, i, n, g):
    return [ad.b.mul(g, _gt0(ad, n.args[0]))]


@grad_rule(Op.LEAKY_RELU)
def _leaky_relu(ad, i, n, g):
    slope = ad.b.where(_gt0(ad, n.args[0]), ad.b.const(1.0), ad.b.const(n.attr("slope")))
    return [ad.b.mul(g, slope)]


@grad_rule(Op.ELU)
def _elu(ad, i, n, g):
    x = ad.primal(n.args[0])
    negative = ad.b.mul(ad.b.const(n.attr("alpha")), ad.b.unary(Op.EXP, x))
    return [ad.b.mul(g, ad.b.where(_gt0(ad, n.args[0]), ad.b.const(1.0), negative))]


@grad_rule(Op.POW)
def _pow(ad, i, n, g):
    a, e = (ad.primal(x) for x in n.args)
    b = ad.b
    da = b.mul(g, b.mul(e, b.binary(Op.POW, a, b.add(e, b.const(-1.0)))))
    de = None if b.is_const(e) else b.mul(g, b.mul(ad.primal(i), b.unary(Op.LOG, a)))
    return [da, de]


@grad_rule(Op.MAXIMUM, Op.MINIMUM)
def _extremum(ad, i, n, g):
    # as torch: the gradient goes to the larger (smaller) operand, split in half on ties
    a, c = (ad.primal(x) for x in n.args)
    b = ad.b
    wins = Op.GT if n.op is Op.MAXIMUM else Op.LT
    tie = b.mul(b.emit(Op.EQ, (a, c)), b.const(0.5))
    return [b.mul(g, b.add(b.emit(wins, (a, c)), tie)), b.mul(g, b.add(b.emit(wins, (c, a)), tie))]


@grad_rule(Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE)
def _comparison(ad, i, n, g):
    return [None, None]


@grad_rule(Op.WHERE)
def _where(ad, i, n, g):
    cond = ad.primal(n.args[0])
    zero = ad.b.const(0.0)
    return [None, ad.b.where(cond, g, zero), ad.b.where(cond, zero, g)]


@grad_rule(Op.REDUCE_SUM)
def _reduce_sum(ad, i, n, g):
    x_shape = ad.fwd.nodes[n.args[0]].shape
    kept = tuple(1 if k in n.attr("axes") else d for k, d in enumerate(x_shape))
    return [ad.b.broadcast(ad.b.reshape(g, kept), x_shape)]


@grad_rule(Op.RESHAPE)
def _reshape(ad, i, n, g):
    return [ad.b.reshape(g, ad.fwd.nodes[n.args[0]].shape)]


@grad_rule(Op.BROADCAST)
def _broadcast(ad, i, n, g):
    return [g]  # accumulate() sums it back down to the operand's shape


@grad_rule(Op.AGG_SUM)
def _agg_sum(ad, i, n, g):
    return [g]  # read per edge; accumulate() sums it over out-edges for source operands


@grad_rule(Op.AGG_MAX, Op.AGG_MIN)
def _agg_extremum(ad, i, n, g):
    if n.attr("stop_gradient"):
        return [None]
    # as torch.scatter_reduce: the gradient is shared equally among the edges that attain the extremum
    b = ad.b
    hit = b.emit(Op.EQ, (ad.primal(n.args[0]), ad.primal(i)))
    count = b.aggregate(Op.AGG_SUM, hit, Space.DST)
    return [b.mul(g, b.mul(hit, b.recip(count)))]
