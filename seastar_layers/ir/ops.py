"""The one op enum of the IR, the value spaces, and what each op means on Python numbers.

The renderer's op -> C table lives in codegen, the gradient rules in passes/autodiff.py, the
torch evaluation (for hoisted parameter expressions) in runtime/params.py; this file is the list
they all key on.
"""
from __future__ import annotations

import enum
import math


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
    INPUT = "input"  # attrs: name
    CONST = "const"  # attrs: value
    # elementwise unary
    NEG = "neg"
    RECIP = "recip"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    ABS = "abs"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"  # attrs: slope
    ELU = "elu"  # attrs: alpha
    # elementwise binary
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
    WHERE = "where"  # (cond, a, b)
    # feature-shape ops
    REDUCE_SUM = "reduce_sum"  # attrs: axes, keepdim
    RESHAPE = "reshape"  # attrs: shape
    BROADCAST = "broadcast"  # attrs: shape
    # neighbourhood aggregations, edge -> dst (attrs: to="dst") or edge -> src (to="src")
    AGG_SUM = "agg_sum"
    AGG_MAX = "agg_max"
    AGG_MIN = "agg_min"

    def __repr__(self) -> str:
        return self.name


UNARY = {Op.NEG, Op.RECIP, Op.EXP, Op.LOG, Op.SQRT, Op.ABS, Op.SIGMOID, Op.TANH, Op.RELU, Op.LEAKY_RELU, Op.ELU}
COMPARISONS = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE}
BINARY = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM, Op.MINIMUM} | COMPARISONS
ELEMENTWISE = UNARY | BINARY | {Op.WHERE}
AGGREGATIONS = {Op.AGG_SUM, Op.AGG_MAX, Op.AGG_MIN}
# what an aggregation over no neighbours gives, and where its accumulator starts
AGG_START = {Op.AGG_SUM: 0.0, Op.AGG_MAX: -math.inf, Op.AGG_MIN: math.inf}


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# Constant folding: what each elementwise op computes on Python numbers.
PYTHON_EVAL = {
    Op.NEG: lambda a: -a,
    Op.RECIP: lambda a: 1.0 / a,
    Op.EXP: math.exp,
    Op.LOG: math.log,
    Op.SQRT: math.sqrt,
    Op.ABS: abs,
    Op.SIGMOID: _sigmoid,
    Op.TANH: math.tanh,
    Op.RELU: lambda a: max(a, 0.0),
    Op.LEAKY_RELU: lambda a, slope: a if a > 0 else a * slope,
    Op.ELU: lambda a, alpha: a if a > 0 else alpha * math.expm1(a),
    Op.ADD: lambda a, b: a + b,
    Op.SUB: lambda a, b: a - b,
    Op.MUL: lambda a, b: a * b,
    Op.DIV: lambda a, b: a / b,
    Op.POW: lambda a, b: a**b,
    Op.MAXIMUM: max,
    Op.MINIMUM: min,
    Op.LT: lambda a, b: float(a < b),
    Op.LE: lambda a, b: float(a <= b),
    Op.GT: lambda a, b: float(a > b),
    Op.GE: lambda a, b: float(a >= b),
    Op.EQ: lambda a, b: float(a == b),
    Op.NE: lambda a, b: float(a != b),
    Op.WHERE: lambda c, a, b: a if c else b,
}
