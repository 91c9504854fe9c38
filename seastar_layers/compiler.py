"""`sl.compile`: the one pipeline from a vertex function to a torch op, and the objects it returns."""
from __future__ import annotations

import functools
import hashlib
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from .codegen.cstyle import CpuDialect, render_program
from .errors import BuildError, CompileError
from .frontend.lower import DEGREE_INPUT, FeatureSpec, lower, resolve_path, signature_of
from .graph import Graph, as_graph
from .ir import Program, Space, verify
from .passes.autodiff import SAVED_PREFIX, autodiff
from .passes.canonicalize import canonicalize
from .passes.hoist import hoist_params
from .passes.schedule import schedule
from .passes.softmax import stabilise_softmax
from .runtime import config, jit, prebuilt
from .runtime.op import CompiledOp, make_op
from .runtime.params import evaluate_prelude

SUPPORTED_DTYPES = {torch.float32: "float32", torch.float64: "float64"}
PASSES = (canonicalize, stabilise_softmax)


@dataclass
class Specialisation:
    op: CompiledOp
    prelude: Program
    params: dict[str, tuple[str, ...]]
    features: dict
    returns_tuple: bool
    dtype: torch.dtype


def _debug(title: str, text) -> None:
    if config.debug():
        print(f"[seastar] ---- {title}\n{text}", file=sys.stderr)


@dataclass
class Generated:
    """What the pipeline makes of a program before anything is compiled."""

    key: str  # hash of the source; prefixes the entry points
    source: str
    forward: object
    backward: object
    lowered: object
    prelude: Program


PREFIX_PLACEHOLDER = "__SEASTAR_PREFIX__"


def generate(fn, specs: dict[str, FeatureSpec], dtype: torch.dtype) -> Generated:
    """The whole pipeline up to the C source, for one specialisation."""
    lowered = lower(fn, specs)
    prog = lowered.program
    verify(prog, "frontend")
    _debug("frontend", prog)
    for p in PASSES:
        prog = p(prog)
        verify(prog, p.__name__)
        _debug(p.__name__, prog)
    prog, prelude = hoist_params(prog)
    verify(prog, "hoist_params")
    _debug("hoist_params", prog)
    bwd = autodiff(prog)
    verify(bwd.program, "autodiff")
    _debug("autodiff (backward program)", bwd.program)
    saved = tuple((f"{SAVED_PREFIX}{i}", i) for i in bwd.saved)
    fwd_prog = Program(prog.nodes, prog.outputs + saved)
    _debug("save planning", "saved for backward: " + (", ".join(
        f"%{i} {prog.nodes[i].space.value}{list(prog.nodes[i].shape)}" for _, i in saved) or "nothing"))
    fwd_sched = schedule(fwd_prog, {name: fwd_prog.nodes[i].space for name, i in fwd_prog.outputs})
    bwd_spaces = {name: Space(name.rsplit("@", 1)[1].split("/")[-1]) for name, _ in bwd.program.outputs}
    bwd_sched = schedule(bwd.program, bwd_spaces)
    _debug("schedule (forward)", fwd_sched)
    _debug("schedule (backward)", bwd_sched)
    template = render_program({"forward": fwd_sched, "backward": bwd_sched}, CpuDialect(), SUPPORTED_DTYPES[dtype],
                              PREFIX_PLACEHOLDER)
    key = "p" + hashlib.sha256(template.encode()).hexdigest()[:20] + "_"
    source = template.replace(PREFIX_PLACEHOLDER, key)
    _debug("generated source", source)
    return Generated(key, source, fwd_sched, bwd_sched, lowered, prelude)


def build(fn, specs: dict[str, FeatureSpec], dtype: torch.dtype) -> tuple[Specialisation, list]:
    """Generate, then bind to the prebuilt extension or a JIT-built library; returns the facts read."""
    g = generate(fn, specs, dtype)
    lib = prebuilt.lookup(g.key)
    if lib is None:
        if not config.jit_enabled():
            raise BuildError(f"{fn.__qualname__} (specialised on {_describe(specs, dtype)}) is not in the prebuilt "
                             "extension and SEASTAR_NO_JIT=1 forbids compiling it; unset SEASTAR_NO_JIT, or reinstall "
                             "seastar_layers so its extension matches this version")
        lib = jit.load_library(g.source, stem=fn.__code__.co_name)
    op = make_op(g.key, lib, g.forward, g.backward, len(g.lowered.program.outputs), dtype)
    spec = Specialisation(op, g.prelude, g.lowered.params, g.lowered.features, g.lowered.returns_tuple, dtype)
    return spec, g.lowered.facts


def _describe(specs, dtype) -> str:
    return ", ".join(f"{n}{list(s.shape)}" for n, s in sorted(specs.items())) + f" {dtype}"


class _SpecialisationCache:
    """Compiled specialisations by (code, feature specs, environment facts). Bounded, LRU.

    A program defined inside a module's forward is a new function object on every call; keying on
    its code object makes every call after the first a lookup."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._entries: OrderedDict = OrderedDict()
        self._paths: dict = {}  # code -> paths of the environment objects its last build read
        # held while building too: threads making the same first call wait for one build, not race it
        self._lock = threading.RLock()

    def get(self, fn, specs, dtype) -> Specialisation:
        with self._lock:
            return self._get(fn, specs, dtype)

    def _get(self, fn, specs, dtype) -> Specialisation:
        code = fn.__code__
        paths = self._paths.get(code, ())
        try:
            facts = tuple(signature_of(resolve_path(fn, p)) for p in paths)
        except (AttributeError, KeyError, ValueError):
            facts = None
        key = (code, tuple(sorted((n, s.shape, s.dtype) for n, s in specs.items())), dtype, facts)
        spec = self._entries.get(key) if facts is not None else None
        if spec is not None:
            self._entries.move_to_end(key)
            return spec
        spec, new_facts = build(fn, specs, dtype)
        self._paths[code] = tuple(p for p, _ in new_facts)
        key = key[:3] + (tuple(sig for _, sig in new_facts),)
        self._entries[key] = spec
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return spec


_CACHE = _SpecialisationCache()


def _resolve_graph(graph, size, spec: "Specialisation", features: dict) -> Graph:
    if isinstance(graph, torch.Tensor) and size is None and not hasattr(graph, "sparse_size"):
        # as PyG: the number of vertices comes from the vertex features, not the largest index
        src_rows = {features[n].shape[0] for n, s in spec.features if s is Space.SRC}
        dst_rows = {features[n].shape[0] for n, s in spec.features if s is Space.DST}
        if len(src_rows | dst_rows) == 1:
            size = (src_rows | dst_rows).pop()
        elif len(src_rows) == 1 and len(dst_rows) == 1:
            size = (src_rows.pop(), dst_rows.pop())
    return as_graph(graph, size)


class CompiledProgram:
    """A vertex program; call it as ``prog(graph, size=None, **features)``."""

    def __init__(self, fn, generic_shapes: bool = False):
        if not callable(fn) or not hasattr(fn, "__code__"):
            raise CompileError(f"sl.compile expects a Python function, got {type(fn).__name__}")
        self.fn = fn
        self.generic_shapes = generic_shapes
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<seastar_layers compiled program {self.fn.__qualname__}>"

    def specs(self, features: dict[str, torch.Tensor]) -> tuple[dict[str, FeatureSpec], torch.dtype]:
        specs, dtype = _feature_specs(features)
        return (shape_pattern(specs) if self.generic_shapes else specs), dtype

    def generate(self, features: dict[str, torch.Tensor]) -> Generated:
        """The generated source for these features, compiling nothing (setup.py prebuilds with it)."""
        return generate(self.fn, *self.specs(features))

    def specialise(self, features: dict[str, torch.Tensor]) -> Specialisation:
        specs, dtype = self.specs(features)
        try:
            return _CACHE.get(self.fn, specs, dtype)
        except CompileError as e:
            raise e.with_traceback(None) from None  # the user's line is in the message; drop compiler frames

    @torch.compiler.disable  # compilation is Python work on source and shapes, not something to trace
    def prepare(self, graph, size=None, **features) -> tuple[Specialisation, list, list]:
        """The specialisation for these features and the op's arguments (graph tensors, inputs)."""
        spec = self.specialise(features)
        g = _resolve_graph(graph, size, spec, features)
        unused = sorted(set(features) - {name for name, _ in spec.features})
        if unused:
            raise TypeError(f"{self.fn.__name__} got features it never reads: {', '.join(unused)}")
        return spec, g.tensors(), _gather_inputs(self.fn, spec, g, features)

    def __call__(self, graph, *, size=None, **features):
        spec, graph_tensors, inputs = self.prepare(graph, size, **features)
        outs = spec.op.forward(graph_tensors, inputs)[:len(spec.op.output_names)]
        return tuple(outs) if spec.returns_tuple else outs[0]


def compile(fn=None, *, generic_shapes: bool = False):  # noqa: A001 - the pinned public name
    """Compile a vertex function ``def f(v): ...`` into a fused kernel with its backward.

    Parsing and compilation happen on the first call, specialised on the shapes and dtype of the
    features passed; later calls with the same shapes reuse the kernel (in memory and on disk).
    With ``generic_shapes=True`` the kernel is specialised only on which feature sizes are 1 and
    which are equal (see `shape_pattern`), and takes the sizes at run time: one kernel serves every
    width, which is what lets the prebuilt layers be compiled at install time.
    """
    if fn is None:
        return lambda f: CompiledProgram(f, generic_shapes)
    return CompiledProgram(fn, generic_shapes)


def shape_pattern(specs: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """Feature shapes with every size other than 1 replaced by a symbol s0, s1, ...: one symbol per
    distinct size, numbered in order of first appearance (features by name, then axes)."""
    symbols: dict[int, str] = {}
    out = {}
    for name in sorted(specs):
        shape = tuple(d if d == 1 else symbols.setdefault(d, f"s{len(symbols)}") for d in specs[name].shape)
        out[name] = FeatureSpec(shape, specs[name].dtype)
    return out


def _feature_specs(features: dict) -> tuple[dict[str, FeatureSpec], torch.dtype]:
    dtype = None
    specs = {}
    for name, t in features.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"feature {name!r} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"feature {name!r} has dtype {t.dtype}; compiled programs support float32 and float64")
        if t.dim() == 0:
            raise ValueError(f"feature {name!r} must have one row per vertex (or edge), got a 0-d tensor")
        if t.device.type != "cpu":
            raise NotImplementedError(f"feature {name!r} is on {t.device}; this build runs compiled programs on the "
                                      "CPU only (the CUDA dialect is not built yet)")
        if dtype is None:
            dtype = t.dtype
        elif t.dtype != dtype:
            first = next(iter(features))
            raise TypeError(f"all features must share one dtype: {first!r} is {dtype}, {name!r} is {t.dtype}")
        specs[name] = FeatureSpec(tuple(t.shape[1:]), t.dtype)
    return specs, dtype or torch.float32


def _gather_inputs(fn, spec: Specialisation, g: Graph, features: dict) -> list[torch.Tensor]:
    rows = {Space.SRC: ("source vertex", g.num_src), Space.DST: ("destination vertex", g.num_dst),
            Space.EDGE: ("edge", g.num_edges)}
    for (name, space), _ in spec.features.items():
        what, n = rows[space]
        t = features[name]
        if t.shape[0] != n:
            reader = {Space.SRC: f"nb.{name}", Space.DST: f"v.{name}", Space.EDGE: f"e.{name}"}[space]
            hint = (" (on a bipartite graph a tensor cannot be read both as nb.x and v.x: pass the destination rows "
                    "as a separate feature)" if {(name, Space.SRC), (name, Space.DST)} <= set(spec.features) else "")
            raise ValueError(f"feature {name!r} is read as {reader} and needs one row per {what} ({n} rows), "
                             f"got {t.shape[0]}{hint}")
    params = {name: resolve_path(fn, path) for name, path in spec.params.items()}
    for name, p in params.items():
        if p.dtype != spec.dtype:
            raise TypeError(f"closed-over tensor {name} is {p.dtype} but the program runs in {spec.dtype}, the dtype "
                            "of its features (float32 when it reads none); convert one to match")
    params.update(evaluate_prelude(spec.prelude, params))
    inputs = []
    for buf in spec.op.input_names:
        name, space = buf.rsplit("@", 1)
        if name == DEGREE_INPUT:
            inputs.append(g.in_degree(spec.dtype))
        elif Space(space) is Space.PARAM:
            inputs.append(params[name].contiguous())
        else:
            inputs.append(features[name].contiguous())
    return inputs
