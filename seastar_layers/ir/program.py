"""SSA programs: frozen nodes, a hash-consing builder that infers spaces and shapes, a verifier."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import IRError, SourceLocation
from .ops import OPS, Kind, Op, Space, fold, join_spaces

Shape = tuple  # of ints, and of symbols "s0", "s1", ... for dims fixed only at run time (shape-generic kernels)


def is_symbol(d) -> bool:
    return isinstance(d, str)


def monomial(shape) -> tuple[int, tuple[str, ...]]:
    """The number of elements of a shape as (constant factor, sorted symbols): comparable for equality."""
    return math.prod(d for d in shape if not is_symbol(d)), tuple(sorted(d for d in shape if is_symbol(d)))


def size_expr(shape):
    """The number of elements as an int, or as a C expression over the symbols."""
    const, symbols = monomial(shape)
    if not symbols:
        return const
    return " * ".join(([str(const)] if const != 1 else []) + list(symbols))


def strides(shape) -> list:
    """Row-major strides: ints, or C expressions where the shape has symbols."""
    return [size_expr(shape[k + 1:]) for k in range(len(shape))]


def symbols_of(shapes) -> list[str]:
    return sorted({d for shape in shapes for d in shape if is_symbol(d)}, key=lambda d: int(d[1:]))


class Role(enum.Enum):
    """What a program input or output is to the runtime that binds it."""

    FEATURE = "feature"  # a tensor the caller passes, one row per vertex or edge
    PARAM = "param"  # a closed-over tensor, or a parameter expression hoisted out of the kernel
    DEGREE = "degree"  # the graph's in-degrees, for len(v.innbs)
    OUTPUT = "output"  # a result of the program
    SAVED = "saved"  # a forward value the backward reads instead of recomputing it
    ADJOINT = "adjoint"  # the gradient arriving at a forward output (a backward input)
    GRADIENT = "gradient"  # the gradient of a forward input (a backward output)
    SEED = "seed"  # an int64 the runtime draws per call, keying the program's random numbers
    TEMP = "temp"  # a value passed between the kernels of one program


@dataclass(frozen=True)
class BufferKey:
    """The identity of a program input or output, from the frontend through the schedule to the runtime.

    name: the feature, parameter or output it belongs to (a forward node id for SAVED and TEMP).
    space: its rows (one per source or destination vertex, per edge; PARAM: one row).
    bucket: for the gradient of a parameter, the rows whose per-row partial sums it holds."""

    role: Role
    name: str
    space: Space
    bucket: Space | None = None

    def __repr__(self) -> str:
        bucket = f"/{self.bucket.value}" if self.bucket else ""
        return f"{self.role.value}:{self.name}@{self.space.value}{bucket}"


@dataclass(frozen=True)
class Node:
    op: Op
    args: tuple[int, ...]
    space: Space
    shape: Shape
    attrs: tuple[tuple[str, Any], ...] = ()
    loc: SourceLocation | None = field(default=None, compare=False, hash=False)

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)

    @property
    def size(self):
        """Elements per row: an int, or a C expression when the shape has symbols."""
        return size_expr(self.shape)

    def __str__(self) -> str:
        attrs = "".join(f" {k}={v!r}" for k, v in self.attrs)
        args = ", ".join(f"%{a}" for a in self.args)
        return f"{self.op.value}({args}){attrs} : {self.space.value}{list(self.shape)}"


@dataclass(frozen=True)
class Program:
    """nodes in topological order (a node's args come before it); outputs name node ids."""

    nodes: tuple[Node, ...]
    outputs: tuple[tuple[BufferKey, int], ...]

    def inputs(self) -> list[tuple[int, Node]]:
        return [(i, n) for i, n in enumerate(self.nodes) if n.op is Op.INPUT]

    def users(self) -> dict[int, list[int]]:
        users: dict[int, list[int]] = {i: [] for i in range(len(self.nodes))}
        for i, n in enumerate(self.nodes):
            for a in n.args:
                users[a].append(i)
        return users

    def __str__(self) -> str:
        lines = [f"  %{i} = {n}" for i, n in enumerate(self.nodes)]
        lines += [f"  return {key!r} = %{i}" for key, i in self.outputs]
        return "\n".join(lines)


def broadcast_shapes(a: Shape, b: Shape) -> Shape:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise IRError(f"feature shapes {list(a)} and {list(b)} cannot broadcast")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def normalize_axes(axes, ndim: int) -> tuple[int, ...]:
    out = []
    for ax in axes:
        if not -ndim <= ax < max(ndim, 1):
            raise IRError(f"dim {ax} is out of range for a per-vertex value with {ndim} feature axes")
        out.append(ax % ndim if ndim else 0)
    return tuple(sorted(set(out)))


def infer(op: Op, args: list[Node], attrs: dict) -> tuple[Space, Shape]:
    """Space and feature shape of a new node; raises IRError with a message for the user."""
    kind = OPS[op].kind
    if kind == Kind.ELEMENTWISE:
        shape: Shape = ()
        for a in args:
            shape = broadcast_shapes(shape, a.shape)
        return join_spaces(a.space for a in args), shape
    (x,) = args
    if op is Op.REDUCE_SUM:
        axes = normalize_axes(attrs["axes"], len(x.shape))
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if attrs["keepdim"] or i not in axes)
        return x.space, shape
    if op is Op.RESHAPE:
        if monomial(attrs["shape"]) != monomial(x.shape):
            raise IRError(f"cannot reshape a value of shape {list(x.shape)} to {list(attrs['shape'])}")
        return x.space, tuple(attrs["shape"])
    if op is Op.BROADCAST:
        if broadcast_shapes(x.shape, attrs["shape"]) != tuple(attrs["shape"]):
            raise IRError(f"cannot broadcast shape {list(x.shape)} to {list(attrs['shape'])}")
        return x.space, tuple(attrs["shape"])
    if kind == Kind.AGGREGATION:
        return Space(attrs["to"]), x.shape
    if kind == Kind.RANDOM:
        return Space(attrs["space"]), tuple(attrs["shape"])
    raise IRError(f"no shape rule for {op.name}")


class Builder:
    """Appends nodes in SSA order. Identical nodes are shared (CSE); constants fold."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._index: dict[Node, int] = {}
        self.loc: SourceLocation | None = None  # the frontend sets this to the line being lowered

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def emit(self, op: Op, args=(), typed: tuple[Space, Shape] | None = None, **attrs) -> int:
        """Append (or find) a node. `typed` gives the space and shape of inputs; others are inferred."""
        args = tuple(args)
        arg_nodes = [self.nodes[a] for a in args]
        if op.kind == Kind.ELEMENTWISE and args and all(n.op is Op.CONST for n in arg_nodes):
            return self.const(fold(op, [n.attr("value") for n in arg_nodes], attrs))
        space, shape = typed if typed is not None else infer(op, arg_nodes, attrs)
        node = Node(op, args, space, tuple(shape), tuple(sorted(attrs.items())), self.loc)
        found = self._index.get(node)
        if found is not None:
            return found
        self.nodes.append(node)
        self._index[node] = len(self.nodes) - 1
        return len(self.nodes) - 1

    # constructors -----------------------------------------------------------------------------
    def input(self, key: BufferKey, shape: Shape) -> int:
        return self.emit(Op.INPUT, (), (key.space, tuple(shape)), key=key)

    def const(self, value: float) -> int:
        return self.emit(Op.CONST, (), (Space.CONST, ()), value=float(value))

    def is_const(self, i: int, value: float | None = None) -> bool:
        n = self.nodes[i]
        return n.op is Op.CONST and (value is None or n.attr("value") == value)

    def unary(self, op: Op, x: int, **attrs) -> int:
        assert op.kind == Kind.ELEMENTWISE and OPS[op].arity == 1, op
        return self.emit(op, (x,), **attrs)

    def binary(self, op: Op, a: int, b: int) -> int:
        assert op.kind == Kind.ELEMENTWISE and OPS[op].arity == 2, op
        # exact identities only: x*1, x+0, x-0, x/1
        if op is Op.MUL and self.is_const(b, 1.0) or op in (Op.ADD, Op.SUB) and self.is_const(b, 0.0):
            return a  # the dropped operand is a scalar constant, so the shape is a's
        if op is Op.MUL and self.is_const(a, 1.0) or op is Op.ADD and self.is_const(a, 0.0):
            return b
        if op is Op.DIV and self.is_const(b, 1.0):
            return a
        return self.emit(op, (a, b))

    def add(self, a: int, b: int) -> int:
        return self.binary(Op.ADD, a, b)

    def mul(self, a: int, b: int) -> int:
        return self.binary(Op.MUL, a, b)

    def neg(self, a: int) -> int:
        return self.unary(Op.NEG, a)

    def recip(self, a: int) -> int:
        return self.unary(Op.RECIP, a)

    def where(self, cond: int, a: int, b: int) -> int:
        return self.emit(Op.WHERE, (cond, a, b))

    def reduce_sum(self, x: int, axes, keepdim: bool) -> int:
        axes = normalize_axes(axes, len(self.nodes[x].shape))
        if not axes:
            return x
        return self.emit(Op.REDUCE_SUM, (x,), axes=axes, keepdim=bool(keepdim))

    def reshape(self, x: int, shape: Shape) -> int:
        shape = tuple(shape)
        if self.nodes[x].shape == shape:
            return x
        if self.nodes[x].op is Op.RESHAPE:  # reshape of a reshape is one reshape
            x = self.nodes[x].args[0]
            if self.nodes[x].shape == shape:
                return x
        return self.emit(Op.RESHAPE, (x,), shape=shape)

    def broadcast(self, x: int, shape: Shape) -> int:
        if self.nodes[x].shape == tuple(shape):
            return x
        return self.emit(Op.BROADCAST, (x,), shape=tuple(shape))

    def aggregate(self, op: Op, x: int, to: Space, **attrs) -> int:
        return self.emit(op, (x,), to=to.value, **attrs)

    def program(self, outputs) -> Program:
        return dead_code_elimination(Program(tuple(self.nodes), tuple(outputs)))


def dead_code_elimination(prog: Program) -> Program:
    live = set()
    stack = [i for _, i in prog.outputs]
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(prog.nodes[i].args)
    remap = {}
    nodes = []
    for i, n in enumerate(prog.nodes):
        if i in live or n.op is Op.INPUT:  # inputs stay: they are the op's signature
            remap[i] = len(nodes)
            nodes.append(Node(n.op, tuple(remap[a] for a in n.args), n.space, n.shape, n.attrs, n.loc))
    return Program(tuple(nodes), tuple((name, remap[i]) for name, i in prog.outputs))


def rebuild(prog: Program, visit, remap: dict[int, int] | None = None) -> tuple[Builder, dict[int, int]]:
    """Copy prog into a new Builder; visit(builder, index, node, new_args) may emit a replacement.
    remap (old node -> new, filled as the copy goes) may be the visitor's own, for a replacement
    built from earlier nodes' copies."""
    b = Builder()
    remap = {} if remap is None else remap
    for i, n in enumerate(prog.nodes):
        b.loc = n.loc
        new_args = tuple(remap[a] for a in n.args)
        out = visit(b, i, n, new_args)
        if out is None:
            typed = (n.space, n.shape) if n.op in (Op.INPUT, Op.CONST) else None
            out = b.emit(n.op, new_args, typed, **dict(n.attrs))
        remap[i] = out
    return b, remap


def verify(prog: Program, stage: str = "") -> None:
    """Checks SSA order, spaces and shapes; a failure here is a compiler bug, named by its pass."""

    def fail(msg: str):
        raise AssertionError(f"IR verifier failed after {stage or 'frontend'}: {msg}\n{prog}")

    seen_inputs = set()
    for i, n in enumerate(prog.nodes):
        if any(a >= i for a in n.args):
            fail(f"%{i} uses a later value")
        if n.op is Op.INPUT:
            key = n.attr("key")
            if key in seen_inputs:
                fail(f"input {key} declared twice")
            seen_inputs.add(key)
            continue
        if n.op is Op.CONST:
            if n.space is not Space.CONST or n.shape != ():
                fail(f"%{i} constant must be a scalar")
            continue
        args = [prog.nodes[a] for a in n.args]
        try:
            space, shape = infer(n.op, args, dict(n.attrs))
        except IRError as e:
            fail(f"%{i}: {e}")
        if (space, shape) != (n.space, n.shape):
            fail(f"%{i} is {n.space}{list(n.shape)} but its op gives {space}{list(shape)}")
    for key, i in prog.outputs:
        if not isinstance(key, BufferKey):
            fail(f"output {key!r} is not named by a BufferKey")
        if not 0 <= i < len(prog.nodes):
            fail(f"output {key!r} names no node")
