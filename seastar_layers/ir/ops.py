"""Every op of the IR, defined once: how the frontend spells it, what it means on tensors, its
gradient rule and its C expression, side by side (the way JAX keeps a primitive's rules beside it).

Adding an elementwise op is one `define(...)` below plus its tests: tests/test_ops.py fails when an
op lacks a part its kind needs. The frontend, the passes and the renderer all key on `OPS[op]`;
none of them lists ops by hand.

C expressions are written in the kernel's compute type `acc_t` over operand expressions {0}, {1},
{2} and attributes by name; `$name(` is a math function the dialect spells (std::exp on the CPU,
expf or exp on CUDA). Gradient rules take a context `d` (passes/autodiff.py: `RuleContext`) with
the incoming adjoint `d.g`, the primal operands `d.arg(k)` and result `d.out`, and return one
contribution (or None) per operand; arithmetic on them builds backward IR.
"""
from __future__ import annotations

import ast
import enum
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class Space(enum.Enum):
    """Where a value lives: one value per source vertex, per destination vertex, per edge, ..."""

    SRC = "src"
    DST = "dst"
    EDGE = "edge"
    PARAM = "param"  # one value for the whole graph (closed-over tensors)
    CONST = "const"  # a Python number

    def __repr__(self) -> str:
        return self.value


def join_spaces(spaces) -> Space:
    """The space of an elementwise result: a source value next to a destination value is per edge."""
    found = {s for s in spaces if s is not Space.CONST}
    if not found:
        return Space.CONST
    if found == {Space.PARAM}:
        return Space.PARAM
    found.discard(Space.PARAM)
    if Space.EDGE in found or found == {Space.SRC, Space.DST}:
        return Space.EDGE
    (only,) = found
    return only


class Op(enum.Enum):
    INPUT = "input"
    CONST = "const"
    NEG = "neg"
    DETACH = "detach"
    RECIP = "recip"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    ABS = "abs"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    ELU = "elu"
    ERF = "erf"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    WHERE = "where"
    REDUCE_SUM = "reduce_sum"
    RESHAPE = "reshape"
    BROADCAST = "broadcast"
    AGG_SUM = "agg_sum"
    AGG_MAX = "agg_max"
    AGG_MIN = "agg_min"
    UNIFORM = "uniform"

    def __repr__(self) -> str:
        return self.name

    @property
    def kind(self) -> str:
        return OPS[self].kind


class Kind:
    LEAF = "leaf"  # INPUT, CONST
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"  # over feature axes of one value
    SHAPE = "shape"  # reshape, broadcast: no arithmetic
    AGGREGATION = "aggregation"  # over a neighbourhood: edge values -> one per row
    RANDOM = "random"  # counter-based random numbers: a function of a seed, the row or edge, the element


@dataclass(frozen=True)
class OpDef:
    op: Op
    kind: str
    arity: int
    attrs: tuple[str, ...] = ()
    # how the frontend spells it --------------------------------------------------------------
    functions: tuple = ()  # torch / F functions taking `params`
    params: tuple[str, ...] = ()  # their parameters: the operands first, then attributes
    defaults: dict = field(default_factory=dict)
    attr_params: dict = field(default_factory=dict)  # function parameter -> attribute
    methods: tuple[str, ...] = ()  # Tensor methods (the tensor is the first operand)
    modules: dict = field(default_factory=dict)  # nn.Module type -> {attribute: module field}
    operators: tuple[type, ...] = ()  # ast operator classes (a + b, a < b)
    python: Callable | None = None  # meaning on Python numbers, for operator spellings
    # what it means and how it differentiates ---------------------------------------------------
    torch: Callable | None = None  # on tensors: hoisted parameter expressions, constant folding
    grad: Callable | None = None  # reverse-mode rule: d -> one contribution (or None) per operand
    # how it renders ----------------------------------------------------------------------------
    c: str | None = None  # C expression in acc_t ({row} and {element} name the value's row and flat element)
    # comparisons: the C bool a value of the op held in a scalar is declared as (GCC vectorises a
    # select on a bool, and gives up on one on the same condition cast to 0 or 1 in acc_t)
    c_bool: str | None = None
    start: float | None = None  # aggregations: the accumulator's start (and the value over no edges)
    update: str | None = None  # aggregations: C statement folding {x} into {acc}


OPS: dict[Op, OpDef] = {}


def define(op: Op, kind: str, arity: int, **parts: Any) -> None:
    if op in OPS:
        raise ValueError(f"{op!r} is defined twice")
    OPS[op] = OpDef(op, kind, arity, **parts)


def _cmp(fn):
    return lambda a, b: fn(a, b).to(a.dtype if isinstance(a, torch.Tensor) else b.dtype)


def _number_cmp(fn):
    return lambda a, b: float(fn(a, b))


UNARY = ("input",)

# leaves ----------------------------------------------------------------------------------------
define(Op.INPUT, Kind.LEAF, 0, attrs=("key",))  # key: ir.program.BufferKey, what the runtime binds
define(Op.CONST, Kind.LEAF, 0, attrs=("value",))

# elementwise, unary ----------------------------------------------------------------------------
define(Op.NEG, Kind.ELEMENTWISE, 1, functions=(torch.neg,), params=UNARY, methods=("neg",),
       operators=(ast.USub,), python=operator.neg,
       torch=torch.neg, c="(-{0})",
       grad=lambda d: [-d.g])
# the value, with no gradient through it (torch's stop-gradient): hyperparameters such as GAT's
# negative slope are tensors so that one kernel serves every value, and their gradients would cost
# an accumulator per edge that nothing reads
define(Op.DETACH, Kind.ELEMENTWISE, 1, functions=(torch.detach,), params=UNARY, methods=("detach",),
       torch=torch.detach, c="({0})",
       grad=lambda d: [None])
define(Op.RECIP, Kind.ELEMENTWISE, 1, functions=(torch.reciprocal,), params=UNARY, methods=("reciprocal",),
       torch=torch.reciprocal, c="((acc_t)1 / {0})",
       grad=lambda d: [-(d.g * (d.out * d.out))])
define(Op.EXP, Kind.ELEMENTWISE, 1, functions=(torch.exp,), params=UNARY, methods=("exp",),
       torch=torch.exp, c="$exp({0})",
       grad=lambda d: [d.g * d.out])
define(Op.LOG, Kind.ELEMENTWISE, 1, functions=(torch.log,), params=UNARY, methods=("log",),
       torch=torch.log, c="$log({0})",
       grad=lambda d: [d.g * (1 / d.arg(0))])
define(Op.SQRT, Kind.ELEMENTWISE, 1, functions=(torch.sqrt,), params=UNARY, methods=("sqrt",),
       torch=torch.sqrt, c="$sqrt({0})",
       grad=lambda d: [d.g * (0.5 * (1 / d.out))])
define(Op.ABS, Kind.ELEMENTWISE, 1, functions=(torch.abs, abs), params=UNARY, methods=("abs",),
       python=abs, torch=torch.abs, c="$fabs({0})",
       grad=lambda d: [d.g * ((d.arg(0) > 0) - (d.arg(0) < 0))])
define(Op.SIGMOID, Kind.ELEMENTWISE, 1, functions=(torch.sigmoid, F.sigmoid), params=UNARY, methods=("sigmoid",),
       modules={nn.Sigmoid: {}},
       torch=torch.sigmoid, c="((acc_t)1 / ((acc_t)1 + $exp(-{0})))",
       grad=lambda d: [d.g * (d.out * (1 - d.out))])
define(Op.TANH, Kind.ELEMENTWISE, 1, functions=(torch.tanh, F.tanh), params=UNARY, methods=("tanh",),
       modules={nn.Tanh: {}},
       torch=torch.tanh, c="$tanh({0})",
       grad=lambda d: [d.g * (1 - d.out * d.out)])
# relu(NaN) is NaN, as torch: the comparison is written so that NaN takes the first branch
define(Op.RELU, Kind.ELEMENTWISE, 1, functions=(torch.relu, F.relu), params=UNARY, methods=("relu",),
       modules={nn.ReLU: {}},
       torch=torch.relu, c="({0} <= 0 ? (acc_t)0 : {0})",
       grad=lambda d: [d.g * (d.arg(0) > 0)])
define(Op.LEAKY_RELU, Kind.ELEMENTWISE, 1, attrs=("slope",),
       functions=(F.leaky_relu,), params=("input", "negative_slope", "inplace"),
       defaults={"negative_slope": 0.01, "inplace": False}, attr_params={"negative_slope": "slope"},
       modules={nn.LeakyReLU: {"slope": "negative_slope"}},
       torch=lambda x, slope: F.leaky_relu(x, slope), c="({0} > 0 ? {0} : {0} * (acc_t){slope})",
       grad=lambda d: [d.g * d.where(d.arg(0) > 0, 1.0, d.attr("slope"))])
define(Op.ELU, Kind.ELEMENTWISE, 1, attrs=("alpha",),
       functions=(F.elu,), params=("input", "alpha", "inplace"), defaults={"alpha": 1.0, "inplace": False},
       attr_params={"alpha": "alpha"}, modules={nn.ELU: {"alpha": "alpha"}},
       torch=lambda x, alpha: F.elu(x, alpha), c="({0} > 0 ? {0} : (acc_t){alpha} * $expm1({0}))",
       grad=lambda d: [d.g * d.where(d.arg(0) > 0, 1.0, d.attr("alpha") * d.exp(d.arg(0)))])
define(Op.ERF, Kind.ELEMENTWISE, 1, functions=(torch.erf, torch.special.erf), params=UNARY, methods=("erf",),
       torch=torch.erf, c="$erf({0})",
       grad=lambda d: [d.g * ((2 / math.sqrt(math.pi)) * d.exp(-(d.arg(0) * d.arg(0))))])

# elementwise, binary ---------------------------------------------------------------------------
BINARY_PARAMS = ("input", "other")
define(Op.ADD, Kind.ELEMENTWISE, 2, operators=(ast.Add,), python=operator.add,
       torch=torch.add, c="({0} + {1})",
       grad=lambda d: [d.g, d.g])
define(Op.SUB, Kind.ELEMENTWISE, 2, operators=(ast.Sub,), python=operator.sub,  # canonicalize: a + -b
       torch=torch.sub, c="({0} - {1})",
       grad=lambda d: [d.g, -d.g])
define(Op.MUL, Kind.ELEMENTWISE, 2, operators=(ast.Mult,), python=operator.mul,
       torch=torch.mul, c="({0} * {1})",
       grad=lambda d: [d.g * d.arg(1), d.g * d.arg(0)])
define(Op.DIV, Kind.ELEMENTWISE, 2, operators=(ast.Div,), python=operator.truediv,  # canonicalize: a * recip(b)
       torch=torch.div, c="({0} / {1})",
       grad=lambda d: [d.g / d.arg(1), -(d.g * d.out / d.arg(1))])
define(Op.POW, Kind.ELEMENTWISE, 2, functions=(torch.pow,), params=("input", "exponent"), methods=("pow",),
       operators=(ast.Pow,), python=operator.pow,
       torch=torch.pow, c="$pow({0}, {1})",
       grad=lambda d: [d.g * (d.arg(1) * d.op(Op.POW, d.arg(0), d.arg(1) - 1)),
                       None if d.is_const(1) else d.g * (d.out * d.op(Op.LOG, d.arg(0)))])


def _extremum_grad(wins: Op):
    # as torch: the gradient goes to the larger (smaller) operand, split in half on ties
    def rule(d):
        a, b = d.arg(0), d.arg(1)
        tie = d.op(Op.EQ, a, b) * 0.5
        return [d.g * (d.op(wins, a, b) + tie), d.g * (d.op(wins, b, a) + tie)]

    return rule


# NaN wins, as in torch.maximum / torch.minimum
define(Op.MAXIMUM, Kind.ELEMENTWISE, 2, functions=(torch.maximum,), params=BINARY_PARAMS,
       torch=torch.maximum, c="(({0} > {1} || {0} != {0}) ? {0} : {1})", grad=_extremum_grad(Op.GT))
define(Op.MINIMUM, Kind.ELEMENTWISE, 2, functions=(torch.minimum,), params=BINARY_PARAMS,
       torch=torch.minimum, c="(({0} < {1} || {0} != {0}) ? {0} : {1})", grad=_extremum_grad(Op.LT))

for _op, _ast, _fn, _c in ((Op.LT, ast.Lt, operator.lt, "<"), (Op.LE, ast.LtE, operator.le, "<="),
                           (Op.GT, ast.Gt, operator.gt, ">"), (Op.GE, ast.GtE, operator.ge, ">="),
                           (Op.EQ, ast.Eq, operator.eq, "=="), (Op.NE, ast.NotEq, operator.ne, "!=")):
    define(_op, Kind.ELEMENTWISE, 2, operators=(_ast,), python=_number_cmp(_fn),
           torch=_cmp(getattr(torch, _op.value)), c=f"(acc_t)({{0}} {_c} {{1}})", c_bool=f"({{0}} {_c} {{1}})",
           grad=lambda d: [None, None])

define(Op.WHERE, Kind.ELEMENTWISE, 3, functions=(torch.where,), params=("condition", "input", "other"),
       torch=lambda c, a, b: torch.where(c != 0, a, b), c="({0} != 0 ? {1} : {2})",
       grad=lambda d: [None, d.where(d.arg(0), d.g, 0.0), d.where(d.arg(0), 0.0, d.g)])


# over feature axes -----------------------------------------------------------------------------
def _reduce_sum_grad(d):
    x_shape = d.arg_shape(0)
    kept = tuple(1 if k in d.attr("axes") else n for k, n in enumerate(x_shape))
    return [d.broadcast(d.reshape(d.g, kept), x_shape)]


define(Op.REDUCE_SUM, Kind.REDUCE, 1, attrs=("axes", "keepdim"),
       torch=lambda x, axes, keepdim: x.sum(dim=axes, keepdim=keepdim), grad=_reduce_sum_grad)
define(Op.RESHAPE, Kind.SHAPE, 1, attrs=("shape",),
       torch=lambda x, shape: x.reshape(shape), grad=lambda d: [d.reshape(d.g, d.arg_shape(0))])
# the adjoint of a broadcast is summed back down to the operand's shape where it is accumulated
define(Op.BROADCAST, Kind.SHAPE, 1, attrs=("shape",),
       torch=lambda x, shape: torch.broadcast_to(x, shape), c="{0}", grad=lambda d: [d.g])


# over a neighbourhood (attrs: to = "dst" or "src", the rows it is per) --------------------------
def _agg_extremum_grad(d):
    if d.attr("stop_gradient"):
        return [None]
    # as torch.scatter_reduce: the gradient is shared equally among the edges that attain the extremum
    hit = d.op(Op.EQ, d.arg(0), d.out)
    return [d.g * (hit * (1 / d.aggregate(Op.AGG_SUM, hit, Space.DST)))]


# the adjoint reaches each edge; autodiff sums it over out-edges for source operands
define(Op.AGG_SUM, Kind.AGGREGATION, 1, attrs=("to",), start=0.0, update="{acc} += {x};",
       grad=lambda d: [d.g])
# NaN wins, as PyG's max aggregation (scatter_reduce amax) propagates it
define(Op.AGG_MAX, Kind.AGGREGATION, 1, attrs=("to", "stop_gradient"), start=-math.inf,
       update="{acc} = ({x} > {acc} || {x} != {x}) ? {x} : {acc};", grad=_agg_extremum_grad)
define(Op.AGG_MIN, Kind.AGGREGATION, 1, attrs=("to", "stop_gradient"), start=math.inf,
       update="{acc} = ({x} < {acc} || {x} != {x}) ? {x} : {acc};", grad=_agg_extremum_grad)

# Counter-based randomness: a draw is a hash of (seed, edge or row id, element), so no mask is stored
# and the backward regenerates exactly what the forward drew. The seed is a program input the
# runtime draws from torch's generator per call (reproducible under torch.manual_seed).
define(Op.UNIFORM, Kind.RANDOM, 1, attrs=("space", "shape", "draw"), functions=(torch.rand_like,), params=("input",),
       c="seastar_uniform((uint64_t){0}, {draw}u, (uint64_t)({row}), (uint64_t)({element}))",
       grad=lambda d: [None])

del _op, _ast, _fn, _c


def of_kind(kind: str) -> frozenset[Op]:
    return frozenset(op for op, d in OPS.items() if d.kind == kind)


ELEMENTWISE = of_kind(Kind.ELEMENTWISE)
AGGREGATIONS = of_kind(Kind.AGGREGATION)


def fold(op: Op, values: list[float], attrs: dict) -> float:
    """A constant operation, evaluated as the kernel would (IEEE: 1/0 is inf, log(0) is -inf)."""
    tensors = [torch.tensor(v, dtype=torch.float64) for v in values]
    return float(OPS[op].torch(*tensors, **attrs))
