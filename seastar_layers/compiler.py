"""`sl.compile`: the one pipeline from a vertex function to a torch op, and the objects it returns."""
from __future__ import annotations

import functools
import hashlib
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch.autograd import forward_ad

from .codegen import TARGETS
from .codegen.cstyle import render_program
from .errors import BuildError, CompileError
from .frontend.lower import FeatureSpec, lower, resolve_path, signature_of
from .graph import Graph, as_graph
from .ir import Program, Role, Space, verify
from .passes.autodiff import Backward, autodiff, saved_key
from .passes.canonicalize import canonicalize
from .passes.factor import factor_reductions
from .passes.hoist import hoist_params
from .passes.precompute import move_to_forward, pull_row_factors
from .passes.schedule import Schedule, schedule
from .passes.softmax import stabilise_softmax
from . import config
from .base import COMPUTE_DTYPE, DTYPE_NAMES
from .runtime import jit, library, prebuilt, toolchain
from .runtime.op import CompiledOp, make_op
from .runtime.params import evaluate_prelude

@dataclass
class Specialisation:
    op: CompiledOp
    prelude: Program
    params: dict[str, tuple[str, ...]]
    features: dict
    returns_tuple: bool
    dtype: torch.dtype


@dataclass(frozen=True)
class Compilation:
    """What the pipeline knows of one specialisation; each stage returns a new one."""

    program: Program  # the forward program
    target: str  # a key of codegen.TARGETS
    dtype: str  # the features' dtype name
    prelude: Program | None = None  # parameter-only expressions, evaluated in torch before the kernels
    backward: Backward | None = None
    schedules: dict[str, Schedule] | None = None  # "forward", "backward"
    pins: tuple = ()  # ((symbol, size), ...) per fast path: kernels with those sizes as constants
    # True: a backward follows, and the forward also sums what it would sweep the edges for; None: one forward
    # serves calls with and without a backward; False: none follows (inference: no backward, nothing saved)
    for_backward: bool | None = None
    source: str | None = None  # with PREFIX_PLACEHOLDER where the entry points' prefix goes

    def programs(self) -> dict[str, Program]:
        found = {"forward": self.program, "prelude": self.prelude}
        if self.backward is not None:
            found["backward"] = self.backward.program
        return {name: prog for name, prog in found.items() if prog is not None}


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Compilation], Compilation]
    show: Callable[[Compilation], str]  # what SEASTAR_DEBUG=1 prints after it


def _forward_pass(fn) -> Stage:
    return Stage(fn.__name__, lambda c: replace(c, program=fn(c.program)), lambda c: str(c.program))


def _hoist(c: Compilation) -> Compilation:
    program, prelude = hoist_params(c.program)
    return replace(c, program=program, prelude=prelude)


def _autodiff(c: Compilation) -> Compilation:
    return c if c.for_backward is False else replace(c, backward=autodiff(c.program))


def _factor(c: Compilation) -> Compilation:
    if c.backward is None:
        return c
    return replace(c, backward=replace(c.backward, program=factor_reductions(c.backward.program)))


def _show_backward(c: Compilation) -> str:
    return str(c.backward.program) if c.backward is not None else "no backward (for_backward=False)"


def _precompute(c: Compilation) -> Compilation:
    if not c.for_backward:  # no backward follows, or one forward serves both: it sums nothing it does not return
        return c
    program, backward = move_to_forward(c.program, replace(c.backward, program=pull_row_factors(c.backward.program)))
    return replace(c, program=program, backward=backward)


def _plan_saves(c: Compilation) -> Compilation:
    """The forward also outputs what the backward reads instead of recomputing (aggregation results)."""
    if c.backward is None:
        return c
    saved = tuple((saved_key(c.program, i), i) for i in c.backward.saved)
    return replace(c, program=Program(c.program.nodes, c.program.outputs + saved))


def _schedule(c: Compilation) -> Compilation:
    kernels = {name: prog for name, prog in c.programs().items() if name != "prelude"}  # forward, backward if any
    return replace(c, schedules={name: schedule(prog, online_softmax=TARGETS[c.target].online_softmax)
                                 for name, prog in kernels.items()})


def _show_saves(c: Compilation) -> str:
    saved = [f"%{i} {key!r}{list(c.program.nodes[i].shape)}" for key, i in c.program.outputs if key.role is Role.SAVED]
    return "saved for backward: " + (", ".join(saved) or "nothing")


PREFIX_PLACEHOLDER = "__SEASTAR_PREFIX__"

# The pipeline from a lowered forward program to source; run_pipeline verifies every program and
# prints (SEASTAR_DEBUG=1) what each stage made.
PIPELINE = (
    _forward_pass(canonicalize),
    _forward_pass(stabilise_softmax),
    Stage("hoist_params", _hoist, lambda c: f"{c.program}\n  -- prelude (torch) --\n{c.prelude}"),
    Stage("autodiff", _autodiff, _show_backward),
    Stage("factor_reductions", _factor, _show_backward),
    Stage("precompute", _precompute, lambda c: f"{c.program}\n  -- backward --\n{_show_backward(c)}"),
    Stage("save_planning", _plan_saves, _show_saves),
    Stage("schedule", _schedule, lambda c: "\n".join(f"{name}:\n{sched}" for name, sched in c.schedules.items())),
    Stage("render", lambda c: replace(c, source=render_program(c.schedules, TARGETS[c.target], c.dtype,
                                                               PREFIX_PLACEHOLDER, c.pins)),
          lambda c: c.source),
)


def run_pipeline(program: Program, target: str, dtype: str, pins: tuple = (), for_backward: bool | None = None
                 ) -> Compilation:
    c = Compilation(program, target, dtype, pins=pins, for_backward=for_backward)
    verify(program, "frontend")
    _debug("frontend", program)
    for stage in PIPELINE:
        c = stage.run(c)
        for name, prog in c.programs().items():
            verify(prog, f"{stage.name} ({name} program)")
        _debug(stage.name, stage.show(c))
    return c


def _debug(title: str, text) -> None:
    if config.debug():
        print(f"[seastar] ---- {title}\n{text}", file=sys.stderr)


@dataclass
class Generated:
    """What the pipeline makes of a program before anything is compiled."""

    key: str  # hash of the source (which spells out the whole interface); prefixes the entry points
    source: str
    forward: Schedule
    backward: Schedule | None  # None for a forward no backward follows (for_backward=False)
    lowered: object
    prelude: Program


def generate(fn, specs: dict[str, FeatureSpec], dtype: torch.dtype, target: str = "cpu",
             pins: tuple = (), for_backward: bool | None = None) -> Generated:
    """The whole pipeline up to the source, for one specialisation (for_backward: as Compilation's)."""
    lowered = lower(fn, specs)
    c = run_pipeline(lowered.program, target, DTYPE_NAMES[dtype], pins, for_backward)
    key = "p" + hashlib.sha256(c.source.encode()).hexdigest()[:20] + "_"
    return Generated(key, c.source.replace(PREFIX_PLACEHOLDER, key), c.schedules["forward"],
                     c.schedules.get("backward"), lowered, c.prelude)


def build(fn, specs: dict[str, FeatureSpec], dtype: torch.dtype, tools: toolchain.Toolchain,
          pins: tuple = (), for_backward: bool | None = None) -> tuple[Specialisation, list]:
    """Generate, then bind to the prebuilt extension or a JIT-built library; returns the facts read."""
    g = generate(fn, specs, dtype, tools.target, pins, for_backward)
    lib = prebuilt.lookup(g.key) if tools.backend == "cpu" else None
    if lib is None:
        if not config.jit_enabled():
            raise BuildError(f"{fn.__qualname__} (specialised on {_describe(specs, dtype)}) is not in the prebuilt "
                             "extension and SEASTAR_NO_JIT=1 forbids compiling it; unset SEASTAR_NO_JIT, or reinstall "
                             "seastar_layers so its extension matches this version")
        lib = jit.load_library(g.source, stem=fn.__code__.co_name, tools=tools)
    op = make_op(g.key, tools.tag, lib, g.forward, g.backward, dtype)
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

    def get(self, fn, specs, dtype, tools: toolchain.Toolchain, pins: tuple = (), for_backward: bool | None = None
            ) -> Specialisation:
        with self._lock:
            return self._get(fn, specs, dtype, tools, (pins, for_backward))

    def _get(self, fn, specs, dtype, tools: toolchain.Toolchain, options: tuple) -> Specialisation:
        code = fn.__code__
        paths = self._paths.get(code, ())
        try:
            facts = tuple(signature_of(resolve_path(fn, p)) for p in paths)
        except (AttributeError, KeyError, ValueError):
            facts = None
        key = (code, tuple(sorted((n, s.shape, s.dtype) for n, s in specs.items())), dtype, tools, options, facts)
        spec = self._entries.get(key) if facts is not None else None
        if spec is not None:
            self._entries.move_to_end(key)
            return spec
        spec, new_facts = build(fn, specs, dtype, tools, *options)
        self._paths[code] = tuple(p for p, _ in new_facts)
        key = key[:5] + (tuple(sig for _, sig in new_facts),)
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

    def __init__(self, fn, generic_shapes: bool = False, shapes: dict | None = None, fast_sizes=(),
                 for_backward: bool | None = None):
        if not callable(fn) or not hasattr(fn, "__code__"):
            raise CompileError(f"sl.compile expects a Python function, got {type(fn).__name__}")
        self.fn = fn
        # None: each call picks (a backward follows where autograd records the call); the layers'
        # prebuilt variants fix it
        self.for_backward = for_backward
        self.generic_shapes = generic_shapes or shapes is not None
        self.shapes = shapes
        self.pins = _pins(shapes, fast_sizes)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<seastar_layers compiled program {self.fn.__qualname__}>"

    def specs(self, features: dict[str, torch.Tensor]) -> tuple[dict[str, FeatureSpec], torch.dtype]:
        specs, dtype = _feature_specs(features)
        if self.shapes is not None:
            return declared_shapes(specs, self.shapes), dtype
        return (shape_pattern(specs) if self.generic_shapes else specs), dtype

    def generate(self, features: dict[str, torch.Tensor], target: str = "cpu") -> Generated:
        """The generated source for these features, compiling nothing (setup.py prebuilds with it), as
        compiled: for_backward=None (the default) gives one forward that serves calls with and without
        a backward, True the one a backward follows, False one with no backward."""
        return generate(self.fn, *self.specs(features), target, self.pins, self.for_backward)

    def source(self, target: str = "cpu", **features) -> str:
        """The source generated for these features (shapes and dtype are what matter) and target
        ("cpu" or "cuda"), compiling nothing: for reading, reviewing and testing generated code."""
        if target not in TARGETS:
            raise ValueError(f"target must be one of {sorted(TARGETS)}, got {target!r}")
        try:
            return self.generate(features, target).source
        except CompileError as e:
            raise e.with_traceback(None) from None

    def specialise(self, features: dict[str, torch.Tensor], tools: toolchain.Toolchain = toolchain.CPU,
                   recorded: bool | None = None, as_compiled: bool = False) -> Specialisation:
        """The specialisation a call runs; `recorded`: whether autograd records it (by default, whether
        grad is enabled and a feature requires grad). as_compiled: the one `generate` gives, whatever
        the call (an op family's variant, whose op records the backward itself)."""
        specs, dtype = self.specs(features)
        if as_compiled:
            return self._specialise(specs, dtype, tools, self.for_backward)
        if recorded is None:
            recorded = torch.is_grad_enabled() and any(t.requires_grad for t in features.values())
        if recorded and self.for_backward is False:
            raise ValueError(f"{self.fn.__name__} was compiled with for_backward=False, which generates no backward, "
                             "and this call needs one (grad is enabled and an input requires grad): compile it "
                             "without for_backward, or call it under torch.no_grad()")
        return self._specialise(specs, dtype, tools, recorded if self.for_backward is None else self.for_backward)

    def _specialise(self, specs, dtype, tools: toolchain.Toolchain, for_backward: bool | None) -> Specialisation:
        try:
            return _CACHE.get(self.fn, specs, dtype, tools, self.pins, for_backward)
        except CompileError as e:
            raise e.with_traceback(None) from None  # the user's line is in the message; drop compiler frames

    @torch.compiler.disable  # compilation is Python work on source and shapes, not something to trace
    def prepare(self, graph, size=None, **features) -> tuple[Specialisation, list, list]:
        """The specialisation for these features and the op's arguments (graph tensors, inputs)."""
        device = _device_of(features)
        tools = toolchain.for_device(device)
        spec = self.specialise(features, tools)
        if spec.op.backward is None and torch.is_grad_enabled() and any(
                resolve_path(self.fn, path).requires_grad for path in spec.params.values()):
            spec = self.specialise(features, tools, recorded=True)  # autograd records it for a parameter's sake
        g = _resolve_graph(graph, size, spec, features)
        if g.device != device:
            what = "an edge_index" if isinstance(graph, torch.Tensor) else type(graph).__name__
            raise ValueError(f"the graph ({what}) is on {g.device} but the features are on {device}; move the graph "
                             f"to the features' device (e.g. edge_index.to({str(device)!r}))")
        unused = sorted(set(features) - {name for name, _ in spec.features})
        if unused:
            raise TypeError(f"{self.fn.__name__} got features it never reads: {', '.join(unused)}")
        return spec, g.tensors(with_orders=tools.backend != "cpu"), _gather_inputs(self.fn, spec, g, features)

    def __call__(self, graph, *, size=None, **features):
        spec, graph_tensors, inputs = self.prepare(graph, size, **features)
        outs = spec.op.forward(graph_tensors, inputs)[:len(spec.op.outputs)]
        return tuple(outs) if spec.returns_tuple else outs[0]


def compile(fn=None, *, generic_shapes: bool = False, shapes: dict | None = None,  # noqa: A001 - the public name
            fast_sizes=(), for_backward: bool | None = None):
    """Compile a vertex function ``def f(v): ...`` into a fused kernel with its backward.

    Parsing and compilation happen on the first call, specialised on the shapes and dtype of the
    features passed; later calls with the same shapes reuse the kernel (in memory and on disk).
    With ``generic_shapes=True`` the kernel is specialised only on which feature sizes are 1 and
    which are equal (see `shape_pattern`), and takes the sizes at run time: one kernel serves every
    width, which is what lets the prebuilt layers be compiled at install time. ``shapes`` declares
    every feature's per-row shape with named sizes and 1s, e.g. ``{"x": ("heads", "channels"),
    "a_src": ("heads", 1)}``: one kernel then serves every size, 1 and equal sizes included.
    ``fast_sizes`` (with ``shapes``) lists common sizes by name, e.g. ``[{"heads": 8, "channels": 8}]``:
    each also gets kernels with those sizes as constants, which the entry runs when the sizes match
    (the C++ compiler then unrolls the loops over them and keeps their accumulators in registers).
    A call that autograd records (grad enabled, an input requiring grad) runs a forward that also
    sums what its backward would otherwise sweep the edges again for (see passes/precompute.py);
    other calls run one that computes and keeps only the results, with no backward.
    ``for_backward=True`` fixes the first, ``False`` the second (a call that needs a backward then
    raises).
    """
    if fn is None:
        return lambda f: CompiledProgram(f, generic_shapes, shapes, fast_sizes, for_backward)
    return CompiledProgram(fn, generic_shapes, shapes, fast_sizes, for_backward)


def shape_pattern(specs: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """Feature shapes with every size other than 1 replaced by a symbol s0, s1, ...: one symbol per
    distinct size, numbered in order of first appearance (features by name, then axes)."""
    symbols: dict[int, str] = {}
    out = {}
    for name in sorted(specs):
        shape = tuple(d if d == 1 else symbols.setdefault(d, f"s{len(symbols)}") for d in specs[name].shape)
        out[name] = FeatureSpec(shape, specs[name].dtype)
    return out


def size_symbols(declared: dict) -> dict[str, str]:
    """The symbol s0, s1, ... of each named size in declared shapes, numbered in order of first
    appearance: features by name, then axes."""
    symbols: dict[str, str] = {}
    for name in sorted(declared):
        for w in declared[name]:
            if w != 1:
                symbols.setdefault(w, f"s{len(symbols)}")
    return symbols


def declared_shapes(specs: dict[str, FeatureSpec], declared: dict) -> dict[str, FeatureSpec]:
    """Feature shapes as declared, each named size its symbol (size_symbols); the tensors passed must
    fit the declaration."""
    if set(specs) != set(declared):
        raise TypeError(f"features {sorted(specs)} do not match the declared ones {sorted(declared)}")
    symbols = size_symbols(declared)
    out = {}
    for name in sorted(specs):
        shape, want = specs[name].shape, tuple(declared[name])
        if len(shape) != len(want) or any(w == 1 and d != 1 for d, w in zip(shape, want)):
            raise ValueError(f"feature {name!r} must have per-row shape {list(want)}, got {list(shape)}")
        out[name] = FeatureSpec(tuple(1 if w == 1 else symbols[w] for w in want), specs[name].dtype)
    return out


def _pins(shapes: dict | None, fast_sizes) -> tuple:
    """compile's fast_sizes as ((symbol, size), ...) per fast path, checked against the declared shapes."""
    if isinstance(fast_sizes, dict):
        fast_sizes = (fast_sizes,)
    fast_sizes = tuple(fast_sizes)
    if not fast_sizes:
        return ()
    if shapes is None:
        raise TypeError("sl.compile's fast_sizes names sizes of the declared shapes: pass shapes= as well, e.g. "
                        "shapes={'x': ('heads', 'channels')}, fast_sizes=[{'heads': 8, 'channels': 8}]")
    symbols = size_symbols(shapes)
    pins = []
    for sizes in fast_sizes:
        if not isinstance(sizes, dict) or not sizes:
            raise TypeError(f"sl.compile's fast_sizes must be dicts of named sizes, e.g. {{'heads': 8}}, got {sizes!r}")
        for name, size in sizes.items():
            if name not in symbols:
                raise ValueError(f"sl.compile's fast_sizes names {name!r}, which no declared shape has; the named "
                                 f"sizes are {sorted(symbols)}")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"sl.compile's fast_sizes gives {name!r} the size {size!r}; sizes are positive ints")
        pins.append(tuple(sorted((symbols[name], size) for name, size in sizes.items())))
    return tuple(dict.fromkeys(pins))


def _device_of(features: dict) -> torch.device:
    devices = {name: t.device for name, t in features.items() if isinstance(t, torch.Tensor)}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name!r} on {device}" for name, device in devices.items())
        raise ValueError(f"all features must be on one device, got {listing}; move them to one device")
    return next(iter(devices.values()), torch.device("cpu"))


def _feature_specs(features: dict) -> tuple[dict[str, FeatureSpec], torch.dtype]:
    dtype = None
    specs = {}
    for name, t in features.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"feature {name!r} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in DTYPE_NAMES:
            raise TypeError(f"feature {name!r} has dtype {t.dtype}; compiled programs support float32, float64, "
                            "float16 and bfloat16")
        if t.dim() == 0:
            raise ValueError(f"feature {name!r} must have one row per vertex (or edge), got a 0-d tensor")
        if forward_ad.unpack_dual(t).tangent is not None:  # the op's autograd would drop it without a word
            raise NotImplementedError(f"feature {name!r} is a dual tensor (torch.autograd.forward_ad), and compiled "
                                      "programs have no forward-mode derivative; differentiate with backward() "
                                      "(reverse mode)")
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
    compute = COMPUTE_DTYPE[spec.dtype]  # half-precision programs compute (and take parameters) in float32
    for name, p in params.items():
        if p.dtype not in (spec.dtype, compute):
            raise TypeError(f"closed-over tensor {name} is {p.dtype} but the program runs in {spec.dtype}, the dtype "
                            "of its features (float32 when it reads none); convert one to match")
        if p.device != g.device:
            raise ValueError(f"closed-over tensor {name} is on {p.device} but the features are on {g.device}; move "
                             "it to the features' device")
    params = {name: p.to(compute) for name, p in params.items()}
    params.update(evaluate_prelude(spec.prelude, params))
    inputs = []
    for buf in spec.op.inputs:
        key = buf.key
        if key.role is Role.DEGREE:
            inputs.append(g.in_degree(compute))
        elif key.role is Role.SEED:
            inputs.append(library.draw_seed(g.device))
        elif key.role is Role.PARAM:
            param = params[key.name]
            inputs.append((param.detach() if key in spec.op.without_gradient else param).contiguous())
        else:
            inputs.append(features[key.name].contiguous())
    return inputs
