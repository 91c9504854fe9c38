"""Lowering a vertex function's AST to the IR.

An interpreter over the AST that evaluates to abstract values: IR values (`Value`), Python
numbers (folded at compile time), and symbols for the vertex, its neighbourhood and per-neighbour
lists. The accepted language is a whitelist: `generic_visit` refuses anything not handled here.
Names resolve through the function's closure and globals; every environment object the program
reads is recorded as a `Fact` so the caller can tell when a cached specialisation still applies.
"""
from __future__ import annotations

import ast
import builtins
import math
import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from ..errors import IRError
from ..ir import Builder, Op, Space
from ..ir.ops import OPS, Kind, OpDef
from ..ir.program import BufferKey, Program, Role, normalize_axes
from .source import Source, get_source

DEGREE = BufferKey(Role.DEGREE, "in_degree", Space.DST)  # len(v.innbs): the runtime passes the in-degrees
SEED = BufferKey(Role.SEED, "seed", Space.PARAM)  # keys torch.rand_like: the runtime draws it per call


# abstract values -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Value:
    id: int


class Vertex:
    """`v`, the destination vertex the program runs for."""


@dataclass(frozen=True)
class Neighbour:
    """A loop variable over the neighbourhood: kind 'nb' (v.innbs) or 'edge' (v.inedges)."""

    kind: str


@dataclass(frozen=True)
class EdgeEnd:
    """e.src or e.dst."""

    space: Space


@dataclass(frozen=True)
class Hood:
    """v.innbs or v.inedges."""

    kind: str


@dataclass(frozen=True)
class HoodList:
    """A per-neighbour list: one `elem` for every in-neighbour."""

    elem: Any


@dataclass(frozen=True)
class HoodRange:
    """range(len(<neighbourhood>))."""


@dataclass(frozen=True)
class HoodIndex:
    """The loop variable of a HoodRange: indexing a per-neighbour list with it gives its element."""


@dataclass(frozen=True)
class Zipped:
    parts: tuple


@dataclass(frozen=True)
class EnvRef:
    """An object from the function's environment (module, function, nn.Module), with its path."""

    obj: Any
    path: tuple[str, ...]


@dataclass(frozen=True)
class BoundMethod:
    value: Value
    name: str


HOOD_SEQUENCES = (Hood, HoodList, HoodRange, Zipped)


@dataclass(frozen=True)
class FeatureSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass
class Lowered:
    program: Program
    features: dict[tuple[str, Space], tuple[int, ...]]  # (name, space) read -> feature shape
    params: dict[str, tuple[str, ...]]  # param input name -> path in the environment
    facts: list[tuple[tuple[str, ...], Any]]  # (path, signature) of everything read from the env
    returns_tuple: bool


def signature_of(obj) -> Any:
    """What about an environment object the compiled kernel depends on."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", tuple(obj.shape), obj.dtype)
    if isinstance(obj, (bool, int, float)):
        return ("number", type(obj), obj)
    if isinstance(obj, nn.Module):
        return ("module", type(obj), tuple(sorted((k, v) for k, v in vars(obj).items() if isinstance(v, (int, float)))))
    if isinstance(obj, types.FunctionType):
        return ("function", obj.__code__)
    return ("object", id(obj))


def resolve_path(fn, path: tuple[str, ...]):
    """Walk a recorded path from fn's environment: names, attributes, and '@' to enter a helper."""
    obj, env, fresh = None, fn, True
    for step in path:
        if step == "@":
            env, fresh = obj, True
        elif fresh:
            obj, fresh = lookup_name(env, step), False
        else:
            obj = getattr(obj, step)
    return obj


_MISSING = object()


def lookup_name(fn, name: str):
    code = fn.__code__
    if name in code.co_freevars and fn.__closure__:
        try:
            return fn.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:  # an empty cell: the variable is assigned after the def
            return _MISSING
    if name in fn.__globals__:
        return fn.__globals__[name]
    return getattr(builtins, name, _MISSING)


# how the language spells ops, read off their definitions (functions by object, so any alias works) -
FUNCTIONS: dict[Any, OpDef] = {fn: d for d in OPS.values() for fn in d.functions}
METHODS: dict[str, OpDef] = {m: d for d in OPS.values() for m in d.methods}
MODULES: dict[type, OpDef] = {t: d for d in OPS.values() for t in d.modules}
OPERATORS: dict[type, Op] = {o: d.op for d in OPS.values() for o in d.operators}
MATH_FUNCTIONS = {getattr(math, n) for n in dir(math) if callable(getattr(math, n))}
MAX_INLINE_DEPTH = 16


class _Return(Exception):
    def __init__(self, value):
        self.value = value


def _hashable(obj) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _bind(what: str, args: list, kwargs: dict, names: list[str], defaults: dict) -> list:
    """Bind call arguments the way Python would, with an error that names the function."""
    if len(args) > len(names):
        raise IRError(f"{what} takes at most {len(names)} arguments ({len(args)} given)")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise IRError(f"{what} got an unexpected keyword argument {k!r}")
        if k in bound:
            raise IRError(f"{what} got multiple values for argument {k!r}")
        bound[k] = v
    for n in names:
        if n not in bound:
            if n not in defaults:
                raise IRError(f"{what} is missing the argument {n!r}")
            bound[n] = defaults[n]
    return [bound[n] for n in names]


class Lowering(ast.NodeVisitor):
    """One instance per function body being lowered (the program, or an inlined helper)."""

    def __init__(self, ctx: "Context", fn, source: Source, env_path: tuple[str, ...], depth: int):
        self.ctx, self.fn, self.src, self.env_path, self.depth = ctx, fn, source, env_path, depth
        self.locals: dict[str, Any] = {}
        self.in_hood = False  # inside a comprehension over the neighbourhood

    @property
    def b(self) -> Builder:
        return self.ctx.builder

    # plumbing ----------------------------------------------------------------------------------
    def visit(self, node):
        try:
            if hasattr(node, "lineno"):
                self.b.loc = self.src.location(node)
            return super().visit(node)
        except IRError as e:
            raise self.src.error(node, str(e)) from None

    def generic_visit(self, node):
        what = type(node).__name__
        names = {"While": "a while loop", "For": "a for statement", "MatMult": "the @ operator",
                 "Lambda": "a lambda", "DictComp": "a dict comprehension", "SetComp": "a set comprehension",
                 "Dict": "a dict", "Set": "a set", "Try": "try/except", "With": "a with statement",
                 "FunctionDef": "a nested def", "Global": "global", "Nonlocal": "nonlocal",
                 "NamedExpr": "the := operator", "Starred": "*-unpacking", "JoinedStr": "an f-string",
                 "Delete": "del", "Raise": "raise", "Assert": "assert", "Import": "import",
                 "ImportFrom": "import", "Await": "await", "Yield": "yield", "ClassDef": "a class"}
        raise self.src.error(node, f"unsupported construct in a vertex program: {names.get(what, what)}")

    def run_body(self, body: list[ast.stmt]):
        self.refuse_unpacking(body)
        try:
            for stmt in body:
                self.visit(stmt)
        except _Return as r:
            return r.value
        return None

    def refuse_unpacking(self, body: list[ast.stmt]) -> None:
        """*args and **kwargs in a call are refused at the call, before the literal that built them
        (which would be refused first, on an earlier line, as a dict or a list)."""
        for stmt in body:
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call):
                    continue
                unpacked = [a for a in node.args if isinstance(a, ast.Starred)] + \
                           [k for k in node.keywords if k.arg is None]
                if unpacked:
                    spelled = ast.unparse(unpacked[0]) if isinstance(unpacked[0], ast.Starred) \
                        else "**" + ast.unparse(unpacked[0].value)
                    raise self.src.error(unpacked[0], f"{spelled} in a call to {ast.unparse(node.func)} is not "
                                                      "supported in a vertex program (*args and **kwargs): pass "
                                                      "each argument by position or by name")

    # statements --------------------------------------------------------------------------------
    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        self.visit(node.value)  # refuses calls outside the language with their own message
        raise IRError("an expression statement has no effect in a vertex program; assign or return its value")

    def visit_Pass(self, node):
        return None

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            self.generic_visit(node.target)
        current = self.visit(ast.Name(node.target.id, ast.Load(), lineno=node.lineno, col_offset=node.col_offset))
        if not isinstance(current, (bool, int, float)):
            raise IRError(f"`{node.target.id} {ast.unparse(node)[len(node.target.id):].split()[0]} ...` on a tensor "
                          f"modifies it in place in Python; write {node.target.id} = {node.target.id} ... instead")
        self.locals[node.target.id] = self.binop(node, node.op, current, self.visit(node.value))

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            self.locals[target.id] = value
        elif isinstance(target, ast.Tuple):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.src.error(target, f"cannot unpack {self.describe(value)} into {len(target.elts)} names")
            for t, v in zip(target.elts, value, strict=True):
                self.assign(t, v)
        else:
            self.generic_visit(target)

    def visit_Return(self, node):
        raise _Return(self.visit(node.value) if node.value is not None else None)

    def visit_If(self, node):
        test = self.visit(node.test)
        if not isinstance(test, (bool, int, float)):
            raise self.src.error(node, "an `if` on a tensor value cannot be compiled: the branch would differ "
                                       "per vertex; write both sides and select with torch.where(cond, a, b)")
        for stmt in node.body if test else node.orelse:
            self.visit(stmt)

    # expressions -------------------------------------------------------------------------------
    def visit_Constant(self, node):
        if isinstance(node.value, (bool, int, float)):
            return node.value
        if node.value is None:
            return None
        raise self.src.error(node, f"unsupported constant {node.value!r} in a vertex program")

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_Name(self, node):
        if node.id in self.locals:
            return self.locals[node.id]
        obj = lookup_name(self.fn, node.id)
        if obj is _MISSING:
            raise self.src.error(node, f"name {node.id!r} is not defined")
        return self.from_env(obj, self.env_path + (node.id,), node.id)

    def from_env(self, obj, path: tuple[str, ...], text: str):
        """Classify an environment object; tensors become parameter inputs, numbers constants."""
        if isinstance(obj, torch.Tensor):
            self.ctx.facts.append((path, signature_of(obj)))
            name = ".".join(path).replace(".@.", "@")
            self.ctx.params[name] = path
            return Value(self.b.input(BufferKey(Role.PARAM, name, Space.PARAM), tuple(obj.shape)))
        if isinstance(obj, (bool, int, float)):
            self.ctx.facts.append((path, signature_of(obj)))
            return obj
        if isinstance(obj, (nn.Module, types.ModuleType)) or callable(obj):
            # every name the program reads guards the cached kernel: rebinding it (F = torch.exp, then
            # F = torch.log) must not reuse the kernel built for the old binding
            self.ctx.facts.append((path, signature_of(obj)))
            return EnvRef(obj, path)
        raise IRError(f"{text} is a {type(obj).__name__}, which a vertex program cannot use "
                      "(expected a tensor, a number, a function or a module)")

    def visit_Attribute(self, node):
        base = self.visit(node.value)
        attr = node.attr
        if isinstance(base, Vertex):
            if attr == "innbs":
                return Hood("nb")
            if attr == "inedges":
                return Hood("edge")
            return self.feature(attr, Space.DST, f"v.{attr}")
        if isinstance(base, Neighbour):
            if base.kind == "edge":
                if attr in ("src", "dst"):
                    return EdgeEnd(Space(attr))
                return self.feature(attr, Space.EDGE, f"e.{attr}")
            return self.feature(attr, Space.SRC, f"nb.{attr}")
        if isinstance(base, EdgeEnd):
            return self.feature(attr, base.space, f"e.{base.space.value}.{attr}")
        if isinstance(base, Value):
            return BoundMethod(base, attr)
        if isinstance(base, EnvRef):
            try:
                obj = getattr(base.obj, attr)
            except AttributeError:
                raise IRError(f"{ast.unparse(node.value)} has no attribute {attr!r}") from None
            return self.from_env(obj, base.path + (attr,), ast.unparse(node))
        raise IRError(f"{self.describe(base)} has no attribute {attr!r}")

    def feature(self, name: str, space: Space, text: str) -> Value:
        spec = self.ctx.specs.get(name)
        if spec is None:
            passed = ", ".join(sorted(self.ctx.specs)) or "none"
            raise IRError(f"{text} reads feature {name!r}, which was not passed (features passed: {passed})")
        self.ctx.features[(name, space)] = spec.shape
        return Value(self.b.input(BufferKey(Role.FEATURE, name, space), spec.shape))

    def visit_Subscript(self, node):
        base = self.visit(node.value)
        index = self.visit(node.slice)
        if isinstance(base, HoodList):
            if not isinstance(index, HoodIndex):
                raise IRError("a per-neighbour list can only be indexed by the loop variable of "
                              "`for i in range(len(...))` inside a comprehension")
            return base.elem
        if isinstance(base, tuple) and isinstance(index, int):
            return base[index]
        raise IRError(f"indexing {self.describe(base)} is not supported in a vertex program")

    def visit_comprehension_like(self, node):
        if len(node.generators) != 1:
            raise IRError("nested loops over neighbourhoods are not supported (one `for` per comprehension)")
        (gen,) = node.generators
        if gen.ifs:
            raise self.src.error(gen.ifs[0], "a filter (`if`) in a comprehension over neighbours is not "
                                             "supported; multiply by a torch.where mask instead")
        if gen.is_async:
            self.generic_visit(gen)
        if self.in_hood:
            raise IRError("nested loops over neighbourhoods are not supported")
        seq = self.visit(gen.iter)
        if not isinstance(seq, HOOD_SEQUENCES):
            raise self.src.error(gen.iter, f"comprehensions must iterate over v.innbs, v.inedges, a per-neighbour "
                                           f"list, range(len(...)) or zip(...) of those; got {self.describe(seq)}")
        saved = dict(self.locals)
        self.in_hood = True
        try:
            self.assign(gen.target, self.element(seq))
            elem = self.visit(node.elt)
        finally:
            self.locals, self.in_hood = saved, False
        if isinstance(elem, HOOD_SEQUENCES):
            raise IRError("a per-neighbour list of lists is not supported")
        return HoodList(elem)

    visit_ListComp = visit_comprehension_like
    visit_GeneratorExp = visit_comprehension_like

    def element(self, seq):
        if isinstance(seq, Hood):
            return Neighbour(seq.kind)
        if isinstance(seq, HoodList):
            return seq.elem
        if isinstance(seq, HoodRange):
            return HoodIndex()
        return tuple(self.element(p) for p in seq.parts)

    def visit_BinOp(self, node):
        return self.binop(node, node.op, self.visit(node.left), self.visit(node.right))

    def is_degree(self, x) -> bool:
        return isinstance(x, Value) and self.b.node(x.id).attr("key") == DEGREE

    def binop(self, node, op_node, left, right):
        op = OPERATORS.get(type(op_node))
        if op is None:
            symbol = {ast.MatMult: "@", ast.FloorDiv: "//", ast.Mod: "%", ast.LShift: "<<", ast.RShift: ">>",
                      ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}.get(type(op_node), type(op_node).__name__)
            hint = "; apply matrix products outside the program, on whole tensors" if symbol == "@" else ""
            raise IRError(f"unsupported operator {symbol} in a vertex program{hint}")
        if op is Op.DIV and self.is_degree(right):
            # a mean over no neighbours is 0, as in PyG, rather than 0 / 0
            nonempty = self.elementwise(Op.GT, [right, 0])
            ratio = self.elementwise(Op.DIV, [left, self.elementwise(Op.WHERE, [nonempty, right, 1])])
            return self.elementwise(Op.WHERE, [nonempty, ratio, 0])
        try:
            return self.elementwise(op, [left, right])
        except IRError as e:
            if not str(e).startswith("feature shapes"):
                raise
            lt, rt = (ast.unparse(n) for n in (node.left, node.right)) if isinstance(node, ast.BinOp) else ("", "")
            ls, rs = (list(self.b.node(x.id).shape) if isinstance(x, Value) else [] for x in (left, right))
            raise IRError(f"cannot broadcast `{lt}` (feature shape {ls}) with `{rt}` (feature shape {rs})") from None

    def visit_UnaryOp(self, node):
        x = self.visit(node.operand)
        if isinstance(node.op, ast.UAdd):
            return self.elementwise(Op.ADD, [x, 0])
        if isinstance(node.op, ast.USub):
            return self.elementwise(Op.NEG, [x])
        if isinstance(node.op, ast.Not) and isinstance(x, (bool, int, float)):
            return not x
        raise IRError(f"unsupported unary operator {type(node.op).__name__} on {self.describe(x)}")

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            raise IRError("chained comparisons are not supported; combine masks with *")
        op = OPERATORS.get(type(node.ops[0]))
        if op is None:
            raise IRError(f"unsupported comparison {type(node.ops[0]).__name__}")
        return self.elementwise(op, [self.visit(node.left), self.visit(node.comparators[0])])

    def visit_BoolOp(self, node):
        values = [self.visit(v) for v in node.values]
        if all(isinstance(v, (bool, int, float)) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        raise IRError("`and`/`or` on tensor values is not supported; multiply masks (a * b) instead")

    def visit_IfExp(self, node):
        test = self.visit(node.test)
        if not isinstance(test, (bool, int, float)):
            raise IRError("`a if cond else b` on a tensor condition is not supported; use torch.where(cond, a, b)")
        return self.visit(node.body if test else node.orelse)

    # operands ----------------------------------------------------------------------------------
    def operand(self, x) -> int:
        if isinstance(x, Value):
            return x.id
        if isinstance(x, (bool, int, float)):
            return self.b.const(float(x))
        raise IRError(f"expected a tensor or a number, got {self.describe(x)}"
                      + ("; aggregate it first with sum(), max() or min()" if isinstance(x, HOOD_SEQUENCES) else ""))

    def elementwise(self, op: Op, operands: list, **attrs):
        if all(isinstance(x, (bool, int, float)) for x in operands):
            python = OPS[op].python
            if python is None:  # as torch itself: its functions take tensors
                raise IRError(f"{op.value} expects a tensor, got only numbers {operands}; use the math module on "
                              "numbers")
            try:
                return python(*operands)  # Python numbers stay Python numbers, with Python's meaning
            except (ArithmeticError, ValueError) as e:
                raise IRError(f"constant expression fails in Python: {e}") from None
        ids = self.align([self.operand(x) for x in operands])
        if OPS[op].arity == 2:  # through the builder's exact identities (x * 1, x + 0, ...)
            return Value(self.b.binary(op, *ids))
        return Value(self.b.emit(op, ids, **attrs))

    def align(self, ids: list[int]) -> list[int]:
        """A closed-over tensor with one axis more than the per-vertex values it meets has the vertex
        axis in front, as in the same expression written over whole tensors: that axis must be 1."""
        vertex_rank = max((len(self.b.node(i).shape) for i in ids
                           if self.b.node(i).space in (Space.SRC, Space.DST, Space.EDGE)), default=None)
        if vertex_rank is None:
            return ids
        out = []
        for i in ids:
            n = self.b.node(i)
            if n.space is Space.PARAM and len(n.shape) > vertex_rank:
                if len(n.shape) != vertex_rank + 1 or n.shape[0] != 1:
                    name = n.attr("key").name
                    raise IRError(f"{name} of shape {list(n.shape)} cannot broadcast against per-vertex values with "
                                  f"{vertex_rank} feature axes: its leading axis is the vertex axis and must be 1")
                i = self.b.reshape(i, n.shape[1:])
            out.append(i)
        return out

    def describe(self, x) -> str:
        if isinstance(x, Value):
            n = self.b.node(x.id)
            return f"a tensor of feature shape {list(n.shape)}"
        if isinstance(x, HoodList):
            return "a per-neighbour list"
        if isinstance(x, Hood):
            return f"v.{'innbs' if x.kind == 'nb' else 'inedges'}"
        if isinstance(x, EnvRef):
            return getattr(x.obj, "__name__", type(x.obj).__name__)
        if isinstance(x, Vertex):
            return "the vertex"
        if isinstance(x, Neighbour):
            return "a neighbour"
        return type(x).__name__

    # calls -------------------------------------------------------------------------------------
    def visit_Call(self, node):
        func = self.visit(node.func)
        args = [self.visit(a) for a in node.args]
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords}
        name = ast.unparse(node.func)
        if isinstance(func, BoundMethod):
            return self.call_method(func, args, kwargs)
        if not isinstance(func, EnvRef):
            raise IRError(f"{name} is {self.describe(func)}, which cannot be called")
        obj = func.obj
        if obj in (builtins.sum, builtins.max, builtins.min, builtins.len, builtins.range, builtins.zip,
                   builtins.float, builtins.int):
            return self.call_builtin(obj, name, args, kwargs)
        if _hashable(obj) and obj in FUNCTIONS:
            d = FUNCTIONS[obj]
            values = _bind(name, args, kwargs, list(d.params), d.defaults)
            return self.apply(d, values, dict(zip(d.params, values)), name)
        if obj in (torch.sum, torch.mean, torch.unsqueeze, torch.squeeze):
            if not args or not isinstance(args[0], Value):
                raise IRError(f"{name} expects a tensor as its first argument")
            return self.call_method(BoundMethod(args[0], obj.__name__), args[1:], kwargs)
        if isinstance(obj, nn.Module):
            return self.call_module(obj, name, args, kwargs)
        if isinstance(obj, types.FunctionType):
            return self.inline(func, name, args, kwargs)
        if obj in MATH_FUNCTIONS:
            if all(isinstance(a, (bool, int, float)) for a in args) and not kwargs:
                return obj(*args)
            raise IRError(f"{name} works on Python numbers only; use the torch function of the same name on tensors")
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("torch") or isinstance(obj, types.BuiltinFunctionType):
            hint = ("; apply matrix products outside the program, on whole tensors, and pass the result as a feature"
                    if getattr(obj, "__name__", "") in ("matmul", "mm", "bmm", "einsum", "linear") else "")
            raise IRError(f"unsupported function {name} in a vertex program{hint}")
        raise IRError(f"unknown function {name}: a vertex program can call torch and math functions, "
                      "stateless nn modules and Python helper functions written in the same language")

    def number(self, x, what: str):
        if not isinstance(x, (bool, int, float)):
            raise IRError(f"{what} must be a Python number, got {self.describe(x)}")
        return x

    def call_builtin(self, fn, name, args, kwargs):
        if kwargs:
            raise IRError(f"{name}() takes no keyword arguments in a vertex program")
        if fn in (builtins.sum, builtins.max, builtins.min):
            if len(args) == 1 and isinstance(args[0], HoodList):
                op = {builtins.sum: Op.AGG_SUM, builtins.max: Op.AGG_MAX, builtins.min: Op.AGG_MIN}[fn]
                if self.in_hood:
                    raise IRError(f"{name}() over a neighbourhood inside a comprehension over the same "
                                  "neighbourhood is not supported; compute it before the comprehension")
                return Value(self.b.aggregate(op, self.operand(args[0].elem), Space.DST))
            items = args[0] if len(args) == 1 and isinstance(args[0], tuple) else tuple(args)
            if fn is builtins.sum:
                if len(args) != 1 or not isinstance(args[0], tuple):
                    raise IRError("sum() takes one per-neighbour list (a start value is not supported)")
                total = 0
                for item in items:
                    total = self.elementwise(Op.ADD, [total, item])
                return total
            if all(isinstance(x, (bool, int, float)) for x in items) and items:
                return fn(items)
            raise IRError(f"{name}() of tensors compares whole tensors; use torch.maximum/torch.minimum "
                          f"for elementwise {name}, or {name}(... for nb in v.innbs) over neighbours")
        if fn is builtins.len:
            (x,) = args
            if isinstance(x, (Hood, HoodList)):
                return Value(self.b.input(DEGREE, ()))
            if isinstance(x, tuple):
                return len(x)
            raise IRError(f"len() of {self.describe(x)} is not supported")
        if fn is builtins.range:
            if len(args) == 1 and self.is_degree(args[0]):
                return HoodRange()
            raise IRError("range() in a vertex program must be range(len(<per-neighbour list>))")
        if fn is builtins.zip:
            if not args or not all(isinstance(a, HOOD_SEQUENCES) for a in args):
                raise IRError("zip() takes per-neighbour lists and v.innbs / v.inedges")
            return Zipped(tuple(args))
        (x,) = args
        return fn(self.number(x, f"the argument of {name}()"))

    def apply(self, d: OpDef, values: list, bound: dict, name: str):
        """An op spelled as a function or method: operands first, then number-valued attributes."""
        if d.kind == Kind.RANDOM:
            return self.random(d, values[0], name)
        attrs = {attr: float(self.number(bound[param], param)) for param, attr in d.attr_params.items()}
        return self.elementwise(d.op, values[:d.arity], **attrs)

    def random(self, d: OpDef, like, name: str):
        """rand_like(x): uniform in [0, 1) of x's shape, fresh per edge inside a comprehension over the
        neighbourhood, else per vertex; every call is its own draw, as in Python."""
        if not isinstance(like, Value):
            raise IRError(f"{name} takes a tensor whose shape it copies, got {self.describe(like)}")
        self.ctx.draws += 1
        space = Space.EDGE if self.in_hood else Space.DST
        seed = self.b.input(SEED, ())
        return Value(self.b.emit(d.op, (seed,), space=space.value, shape=self.b.node(like.id).shape,
                                 draw=self.ctx.draws))

    def call_module(self, module, name, args, kwargs):
        kind = type(module)
        if kind in MODULES:
            d = MODULES[kind]
            operands = _bind(name, args, kwargs, ["input"], {})
            attrs = {attr: float(getattr(module, field)) for attr, field in d.modules[kind].items()}
            return self.elementwise(d.op, operands, **attrs)
        if kind is nn.Identity:
            (x,) = _bind(name, args, kwargs, ["input"], {})
            return x
        raise IRError(f"{name} is a {kind.__name__}, which is not a stateless module the compiler knows; "
                      "apply it outside the vertex program, on whole tensors, and pass the result as a feature")

    def call_method(self, method: BoundMethod, args, kwargs):
        x, m = method.value, method.name
        what = f".{m}()"
        if m in METHODS:
            d = METHODS[m]
            values = [x] + _bind(what, args, kwargs, list(d.params[1:]), d.defaults)
            return self.apply(d, values, dict(zip(d.params, values)), what)
        shape = self.b.node(x.id).shape
        if m in ("sum", "mean"):
            dim, keepdim = _bind(what, args, kwargs, ["dim", "keepdim"], {"dim": None, "keepdim": False})
            axes = tuple(range(len(shape))) if dim is None else (dim if isinstance(dim, tuple) else (dim,))
            out = self.b.reduce_sum(x.id, axes, bool(keepdim))
            if m == "mean":
                reduced = [shape[a] for a in normalize_axes(axes, len(shape))]
                if any(isinstance(d, str) for d in reduced):
                    raise IRError(".mean() over a feature axis whose size is fixed only at run time (a shape-generic "
                                  "kernel) is not supported; use .sum() and divide by the size")
                count = math.prod(reduced)
                out = self.b.mul(out, self.b.const(1.0 / count))
            return Value(out)
        if m == "unsqueeze":
            (dim,) = _bind(what, args, kwargs, ["dim"], {})
            dim = self.number(dim, "dim")
            if not -len(shape) - 1 <= dim <= len(shape):
                raise IRError(f"unsqueeze(dim={dim}) is out of range for feature shape {list(shape)}")
            dim = dim % (len(shape) + 1)
            return Value(self.b.reshape(x.id, shape[:dim] + (1,) + shape[dim:]))
        if m == "squeeze":
            (dim,) = _bind(what, args, kwargs, ["dim"], {"dim": None})
            if dim is None:
                return Value(self.b.reshape(x.id, tuple(d for d in shape if d != 1)))
            (axis,) = normalize_axes((self.number(dim, "dim"),), len(shape))
            new = shape[:axis] + shape[axis + 1:] if shape[axis] == 1 else shape
            return Value(self.b.reshape(x.id, new))
        if m in ("view", "reshape"):
            dims = args[0] if len(args) == 1 and isinstance(args[0], tuple) else tuple(args)
            dims = [self.number(d, "shape") for d in dims]
            if any(isinstance(d, str) for d in shape):
                raise IRError(f".{m}() of a value whose shape is fixed only at run time (a shape-generic kernel) is "
                              "not supported; use unsqueeze/squeeze")
            if dims.count(-1) == 1:
                known = math.prod(d for d in dims if d != -1)
                dims[dims.index(-1)] = math.prod(shape) // known if known else 0
            return Value(self.b.reshape(x.id, tuple(dims)))
        raise IRError(f"unsupported method .{m}() in a vertex program")

    def inline(self, ref: EnvRef, name, args, kwargs):
        fn = ref.obj
        if self.depth >= MAX_INLINE_DEPTH:
            raise IRError(f"helper {name} is nested more than {MAX_INLINE_DEPTH} deep (recursion is not supported)")
        source = get_source(fn)
        spec = source.tree.args
        if spec.vararg or spec.kwarg or spec.kwonlyargs or spec.posonlyargs:
            raise IRError(f"helper {name} must take plain positional arguments")
        names = [a.arg for a in spec.args]
        defaults = {}
        for n, d in zip(reversed(names), reversed(fn.__defaults__ or ()), strict=False):
            if not isinstance(d, (bool, int, float)):
                raise IRError(f"helper {name}: default of argument {n!r} is a {type(d).__name__}; defaults of "
                              "helpers must be numbers (pass tensors explicitly)")
            defaults[n] = d
        values = _bind(name, args, kwargs, names, defaults)
        inner = Lowering(self.ctx, fn, source, ref.path + ("@",), self.depth + 1)
        inner.in_hood = self.in_hood
        inner.locals = dict(zip(names, values, strict=True))
        return inner.run_body(source.tree.body)


@dataclass
class Context:
    specs: dict[str, FeatureSpec]
    builder: Builder = field(default_factory=Builder)
    features: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    facts: list = field(default_factory=list)
    draws: int = 0  # random draws so far (each rand_like call is a distinct stream)


def lower(fn, specs: dict[str, FeatureSpec]) -> Lowered:
    """Build the IR of vertex function fn, specialised on the features' shapes."""
    source = get_source(fn)
    tree = source.tree
    if len(tree.args.args) != 1 or tree.args.vararg or tree.args.kwarg or tree.args.kwonlyargs:
        raise source.error(tree, f"a vertex program takes exactly one argument, the vertex (def {tree.name}(v): ...)")
    ctx = Context(specs)
    top = Lowering(ctx, fn, source, (), 0)
    top.locals[tree.args.args[0].arg] = Vertex()
    result = top.run_body(tree.body)
    returns_tuple = isinstance(result, tuple)
    results = result if returns_tuple else (result,)
    where = next((s for s in ast.walk(tree) if isinstance(s, ast.Return)), tree)
    outputs = []
    for k, r in enumerate(results):
        if r is None:
            raise source.error(where, f"{tree.name} must return a per-vertex tensor (or a tuple of them)")
        if isinstance(r, HoodList) and isinstance(r.elem, (Value, bool, int, float)):
            # a per-neighbour list is a per-edge result: one row per edge, in edge_index order
            outputs.append((BufferKey(Role.OUTPUT, f"out{k}", Space.EDGE), top.operand(r.elem)))
            continue
        if not isinstance(r, Value) or ctx.builder.node(r.id).space is not Space.DST:
            detail = top.describe(r) if not isinstance(r, Value) else f"a {ctx.builder.node(r.id).space.value} value"
            raise source.error(where, f"result {k} of {tree.name} is {detail}; a vertex program returns per-vertex "
                                      "tensors that depend on the vertex (aggregate neighbour values with sum/max/min) "
                                      "or per-neighbour lists of tensors (one row per edge)")
        outputs.append((BufferKey(Role.OUTPUT, f"out{k}", Space.DST), r.id))
    return Lowered(ctx.builder.program(outputs), ctx.features, ctx.params, ctx.facts, returns_tuple)
