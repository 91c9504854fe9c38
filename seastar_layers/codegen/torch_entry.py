"""The layers' programs as torch ops with stable names and schemas, and their generated C++ entry points.

An op family (OpFamily) is one vertex program with options. `torch.ops.seastar_layers.<name>`
runs every specialisation of it and `<name>_backward` their backward:

    name(Tensor[] graph, <required features>, <parameters>, Tensor? <optional feature>=None, ...,
         Tensor? <optional parameter>=None, ..., [Tensor? seed=None,] bool <switch>=False, ...)
         -> (Tensor[] results, Tensor[] saved)
    name_backward(Tensor[] graph, <the same>, Tensor[] saved, Tensor[] grads) -> Tensor[]
        (one gradient per tensor given, in schema order)

`graph` is `Graph.tensors()`: the six CSR arrays, and on a GPU the two row orders. Parameters are
0-d tensors of the compute dtype; an expression of parameters is computed by the caller, in
torch, so that torch's autograd differentiates it. A family whose programs draw random numbers
(torch.rand_like) takes a 0-d int64 `seed`, drawn by the caller from torch's generator per
forward call and given to the backward, which regenerates the draws. The entry point picks the kernel from what it
is given: which optional features and switches, and their dtype (variant_key); the programs declare
their shapes, so the sizes are run-time values the entry point binds and checks.

The extension seastar_layers._C gets, per family, a forward and a backward entry point taking
at::Tensor arguments, a table of its kernel variants per device (the key that selects each, its
plain-C kernel entries, where each kernel buffer comes from), and its TORCH_LIBRARY schema and
per-dispatch-key registration (CPU, CUDA where built, and Autograd), all generated here. What every
entry point does the same way (checks, choosing the variant, allocating, calling the kernels, the
autograd node) is written once, by hand, in csrc/seastar_ops.h. Each f-string below is preceded by
a comment showing the C++ it emits. The Python side of the ops (the fake implementations) is
runtime/library.py.
"""
from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor

from ..ir import Role, Space
from ..ir.program import is_symbol
from ..passes.autodiff import adjoint_key
from ..passes.schedule import Buffer, Schedule
from ..runtime import library
from ..runtime.executor import COMPUTE_DTYPE

MAX_RANK = 6  # as csrc/seastar_ops.h: kMaxRank
# The switch of a family whose variants with it on also compute, in the forward, what the backward would
# sweep the edges for: the op's autograd kernel turns it on where it records a backward (seastar_ops.h).
FOR_BACKWARD = "for_backward"
ROWS = {Space.SRC: "kSrc", Space.DST: "kDst", Space.EDGE: "kEdge", Space.PARAM: "kParam"}
DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16"}


def variant_key(dtype: torch.dtype, options: Iterable[str]) -> str:
    """Names a specialisation of a family: the features' dtype and the options it was given (optional
    features, switches on), in schema order, as "float32|a_dst|mask|with_attention". The C++ entry
    point computes the same string (csrc/seastar_ops.h: Call::select_variant) to find its kernel."""
    return "".join([DTYPE_NAMES[dtype], *(f"|{option}" for option in options)])


@dataclass(frozen=True)
class OpFamily:
    """A layer's vertex program and its options: one op.

    build(**flags, **params) returns the program for one set of options; an optional feature
    given turns its flag on, an optional parameter given is passed (else None), and a switch (a
    bool argument of the op, e.g. with_attention: an extra result) is a flag by itself.
    `seeded_by` names the optional parameter whose variants draw random numbers: the op then takes
    a seed. The program declares its feature shapes (sl.compile's
    shapes=), so one kernel per options and dtype serves every size. `example` gives a full shape
    (rows first) per feature, for compiling: its sizes do not matter, only which rows it has."""

    build: Callable
    required: tuple[str, ...]
    optional: tuple[tuple[str, str], ...]  # (feature, the flag of `build` that reads it)
    params: tuple[str, ...]
    example: dict[str, tuple]
    switches: tuple[str, ...] = ()
    optional_params: tuple[str, ...] = ()
    seeded_by: str | None = None
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

    @property
    def name(self) -> str:
        return self.build.__name__

    @functools.cached_property  # the properties below are read on every call of the op
    def optional_arguments(self) -> tuple[str, ...]:
        """The op's optional tensor arguments, in schema order: features, parameters, the seed."""
        return (tuple(feature for feature, _ in self.optional) + self.optional_params
                + (("seed",) if self.seeded_by else ()))

    @functools.cached_property
    def arguments(self) -> tuple[str, ...]:
        """The op's tensor arguments after the graph, in schema order."""
        return self.required + self.params + self.optional_arguments

    def is_feature(self, name: str) -> bool:
        """A feature (rows of vertices or edges), else a 0-d parameter or the seed."""
        return name not in self._not_features

    @functools.cached_property
    def _not_features(self) -> frozenset[str]:
        return frozenset(self.params + self.optional_params + ("seed",))

    @functools.cached_property
    def options(self) -> tuple[str, ...]:
        """What selects a variant besides the dtype, in schema order."""
        return tuple(feature for feature, _ in self.optional) + self.optional_params + self.switches

    def schema(self) -> str:
        args = [f"Tensor {n}" for n in self.required + self.params]
        args += [f"Tensor? {f}=None" for f in self.optional_arguments] + [f"bool {s}=False" for s in self.switches]
        return f"{self.name}(Tensor[] graph, {', '.join(args)}) -> (Tensor[], Tensor[])"

    def backward_schema(self) -> str:
        args = [f"Tensor {n}" for n in self.required + self.params]
        args += [f"Tensor? {f}" for f in self.optional_arguments] + [f"bool {s}" for s in self.switches]
        return f"{self.name}_backward(Tensor[] graph, {', '.join(args)}, Tensor[] saved, Tensor[] grads) -> Tensor[]"

    def split(self, args) -> tuple[dict[str, Tensor], tuple[str, ...]]:
        """The op's arguments after the graph as (tensors given by name, options on). The dispatcher
        drops trailing arguments left at their default, so `args` may be short."""
        args = list(args) + [None] * (len(self.arguments) + len(self.switches) - len(args))
        tensors = {name: t for name, t in zip(self.arguments, args) if t is not None}
        on = {s for s, flag in zip(self.switches, args[len(self.arguments):]) if flag}
        return tensors, tuple(o for o in self.options if o in tensors or o in on)

    def program(self, options: Iterable[str], dtype: torch.dtype):
        """The program for these options (parameters are placeholders: the op takes them as inputs)."""
        options = set(options)
        flags = {flag: feature in options for feature, flag in self.optional}
        flags.update((s, s in options) for s in self.switches)
        placeholders = {p: torch.zeros((), dtype=COMPUTE_DTYPE[dtype]) for p in self.params}
        placeholders.update((p, torch.zeros((), dtype=COMPUTE_DTYPE[dtype]) if p in options else None)
                            for p in self.optional_params)
        return self.build(**flags, **placeholders)

    def examples(self, options: Iterable[str], dtype: torch.dtype) -> dict[str, Tensor]:
        names = self.required + tuple(feature for feature, _ in self.optional if feature in options)
        return {n: torch.zeros(self.example[n], dtype=dtype) for n in names}

    def variants(self, dtypes: Iterable[torch.dtype] | None = None):
        """(options, dtype, program, example features) for every specialisation: each subset of
        the options, in every dtype (or in `dtypes`)."""
        for dtype in self.dtypes if dtypes is None else dtypes:
            for count in range(len(self.options) + 1):
                for options in itertools.combinations(self.options, count):
                    yield options, dtype, self.program(options, dtype), self.examples(options, dtype)

    def __call__(self, graph, **tensors) -> list[Tensor]:
        """The program's results on `graph` (a seastar_layers.Graph) for these features, parameters
        and switches."""
        return library.call(self, graph, **tensors)


def dim_names(program, features: dict[str, Tensor]) -> list[str]:
    """The declared names of the program's run-time sizes s0, s1, ... for these features."""
    specs, _ = program.specs(features)
    names = {}
    for feature, spec in specs.items():
        for symbol, name in zip(spec.shape, program.shapes[feature]):
            if is_symbol(symbol):
                names[int(symbol[1:])] = name
    return [names[k] for k in range(len(names))]


def cpp_bool(value: bool) -> str:
    return "true" if value else "false"


class VariantRenderer:
    """The C++ tables of one compiled specialisation (its `generated` forward and backward)."""

    def __init__(self, family, key: str, generated, dims: list[str]):
        self.family, self.key, self.g, self.dims = family, key, generated, dims
        self.results = [b.key for b in generated.forward.buffers if b.role is Role.OUTPUT]
        self.saved = [b.key for b in generated.forward.buffers if b.role is Role.SAVED]

    def origin(self, buf: Buffer) -> tuple[str, int]:
        """Where a buffer of the forward or backward comes from: (From:: enumerator, index)."""
        role, name = buf.role, buf.key.name
        if role in (Role.FEATURE, Role.PARAM, Role.GRADIENT):
            if name not in self.family.arguments:
                raise ValueError(f"the {self.family.name} program reads {buf.key!r}, which is not an argument of "
                                 f"its op ({', '.join(self.family.arguments)}); a hoisted parameter expression must "
                                 "be computed by the caller and passed as a parameter")
            return ("kGradient" if role is Role.GRADIENT else "kArgument"), self.family.arguments.index(name)
        if role is Role.OUTPUT:
            return "kResult", self.results.index(buf.key)
        if role is Role.ADJOINT:
            return "kAdjoint", [adjoint_key(k) for k in self.results].index(buf.key)
        if role is Role.SAVED:
            return ("kSaved" if buf.is_input else "kSavedOut"), self.saved.index(buf.key)
        if role is Role.SEED:
            if self.family.seeded_by is None:
                raise ValueError(f"the {self.family.name} program draws random numbers ({buf.key!r}) but its op "
                                 "takes no seed: declare the optional parameter whose variants draw (seeded_by=)")
            return "kSeed", self.family.arguments.index("seed")
        return {Role.DEGREE: "kDegree", Role.TEMP: "kTemp"}[role], 0

    def rows(self, sched: Schedule) -> list[tuple]:
        """The schedule's buffers as the header's Buffer: (From:: enumerator, index, Rows:: enumerator, shape,
        in the compute type, filled, fill), the shape's run-time size s<k> as -1 - k."""
        out = []
        for buf in sched.buffers:
            if len(buf.shape) > MAX_RANK:
                raise ValueError(f"buffer {buf.key!r} has rank {len(buf.shape)}; the entry points take at most "
                                 f"{MAX_RANK}")
            fill = sched.constant_outputs.get(buf.key)
            shape = [-1 - int(d[1:]) if is_symbol(d) else int(d) for d in buf.shape]
            out.append((*self.origin(buf), ROWS[buf.rows], shape, buf.in_compute_type, fill is not None,
                        float(fill or 0)))
        return out

    def buffers(self, name: str, sched: Schedule) -> str:
        lines = []
        for buf, (origin, index, rows, shape, compute_type, filled, fill) in zip(sched.buffers, self.rows(sched)):
            # {seastar::From::kArgument, 0, seastar::Rows::kSrc, 2, {-1, 1}, false, false, 0.0},  // feature:a_src@src
            lines.append(f"  {{seastar::From::{origin}, {index}, seastar::Rows::{rows}, {len(shape)}, "
                         f"{{{', '.join(map(str, shape))}}}, {cpp_bool(compute_type)}, {cpp_bool(filled)}, "
                         f"{fill!r}}},  // {buf.key!r}")
        # const seastar::Buffer p1234_forward_buffers[] = {
        #   ...
        # };
        return "\n".join([f"const seastar::Buffer {self.g.key}{name}_buffers[] = {{", *lines, "};"])

    def tables(self) -> str:
        # const char* const p1234_dims[] = {"heads", "channels"};
        names = ", ".join(json.dumps(d) for d in self.dims) or "nullptr"
        return "\n".join([f"// {self.family.name} {self.key}", self.buffers("forward", self.g.forward),
                          self.buffers("backward", self.g.backward),
                          f"const char* const {self.g.key}dims[] = {{{names}}};"])

    def program(self, name: str, sched: Schedule) -> str:
        k = self.g.key
        # {seastar_p1234_forward, seastar_p1234_last_error, p1234_forward_buffers, 9}
        return f"{{seastar_{k}{name}, seastar_{k}last_error, {k}{name}_buffers, {len(sched.buffers)}}}"

    def entry(self) -> str:
        # {"float32|a_dst", {...forward...}, {...backward...}, 1, 2, p1234_dims, 2},
        return (f'  {{"{self.key}", {self.program("forward", self.g.forward)}, '
                f'{self.program("backward", self.g.backward)}, {len(self.results)}, {len(self.saved)}, '
                f'{self.g.key}dims, {len(self.dims)}}},')

    def declarations(self) -> list[str]:
        k = self.g.key
        # int seastar_p1234_forward(const int64_t*, const int64_t*, const void* const*, void* const*,
        #                           const int64_t*, int, void*);
        signature = "(const int64_t*, const int64_t*, const void* const*, void* const*, const int64_t*, int, void*);"
        return [f"int seastar_{k}forward{signature}", f"int seastar_{k}backward{signature}",
                f"const char* seastar_{k}last_error();"]


def cpp_parameters(family) -> str:
    """The C++ parameters of an entry point for the op's tensor arguments (after the graph)."""
    # const at::Tensor& a_src, const at::Tensor& slope, const std::optional<at::Tensor>& a_dst
    params = [f"const at::Tensor& {n}" for n in family.required + family.params]
    params += [f"const std::optional<at::Tensor>& {f}" for f in family.optional_arguments]
    params += [f"bool {s}" for s in family.switches]
    return ", ".join(params)


def cpp_arguments(family) -> str:
    # {&a_src, &slope, seastar::given(a_dst)}, {with_attention}
    tensors = [f"&{n}" for n in family.required + family.params]
    tensors += [f"seastar::given({f})" for f in family.optional_arguments]
    return "{" + ", ".join(tensors) + "}, {" + ", ".join(family.switches) + "}"


def render_family(family, tables: dict[str, list[VariantRenderer]]) -> str:
    n = family.name
    # variants whose options make no difference to the program (for_backward where the backward sums
    # nothing the forward could) share its kernels, and so its tables
    shared = {variant.g.key: variant for renderers in tables.values() for variant in renderers}
    parts = [variant.tables() for variant in shared.values()]
    for target, renderers in tables.items():
        # const seastar::Variant gat_attention_cpu[] = {
        #   {"float32|a_dst", {...}, {...}, 1, 2, p1234_dims, 2},
        # };
        parts.append("\n".join([f"const seastar::Variant {n}_{target}[] = {{", *[v.entry() for v in renderers], "};"]))
    names = ", ".join(f'"{a}"' for a in family.arguments)
    is_feature = ", ".join(cpp_bool(family.is_feature(a)) for a in family.arguments)
    switches = ", ".join(f'"{s}"' for s in family.switches) or "nullptr"
    seed = family.arguments.index("seed") if family.seeded_by else -1
    for_backward = family.switches.index(FOR_BACKWARD) if FOR_BACKWARD in family.switches else -1

    def table(target: str) -> str:
        return f"{n}_{target}, {len(tables[target])}" if tables.get(target) else "nullptr, 0"

    # const char* const gat_attention_arguments[] = {"a_src", "x", "slope", "a_dst"};
    # const bool gat_attention_is_feature[] = {true, true, false, true};
    # const char* const gat_attention_switches[] = {"with_attention", "for_backward"};
    # const seastar::Family gat_attention_family = {"seastar_layers::gat_attention", gat_attention_arguments,
    #     gat_attention_is_feature, 8, 3, gat_attention_switches, 2, gat_attention_cpu, 256, nullptr, 0, 7, 1};
    parts.append(f"const char* const {n}_arguments[] = {{{names}}};\n"
                 f"const bool {n}_is_feature[] = {{{is_feature}}};\n"
                 f"const char* const {n}_switches[] = {{{switches}}};\n"
                 f'const seastar::Family {n}_family = {{"seastar_layers::{n}", {n}_arguments, {n}_is_feature, '
                 f"{len(family.arguments)}, {len(family.required + family.params)}, {n}_switches, "
                 f"{len(family.switches)}, {table('cpu')}, {table('cuda')}, {seed}, {for_backward}}};")
    # std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>> gat_attention(at::TensorList graph, <parameters>) {
    #   return seastar::Call(gat_attention_family, graph, {&a_src, ...}, {with_attention}).forward();
    # }
    parts.append(f"std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>> {n}(at::TensorList graph, "
                 f"{cpp_parameters(family)}) {{\n"
                 f"  return seastar::Call({n}_family, graph, {cpp_arguments(family)}).forward();\n}}")
    # std::vector<at::Tensor> gat_attention_backward(at::TensorList graph, <parameters>, at::TensorList saved,
    #                                                at::TensorList grads) {
    #   return seastar::Call(gat_attention_family, graph, {&a_src, ...}, {with_attention}).backward(saved, grads);
    # }
    parts.append(f"std::vector<at::Tensor> {n}_backward(at::TensorList graph, {cpp_parameters(family)}, "
                 f"at::TensorList saved, at::TensorList grads) {{\n"
                 f"  return seastar::Call({n}_family, graph, {cpp_arguments(family)}).backward(saved, grads);\n}}")
    # seastar::OpResults gat_attention_call(at::TensorList graph, const seastar::OptionalTensors& a,
    #                                      const seastar::Switches& s) {
    #   static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("seastar_layers::gat_attention", "")
    #       .typed<decltype(gat_attention)>();
    #   return op.call(graph, *a[0], *a[1], *a[2], a[3], s[0]);
    # }
    # (and gat_attention_backward_call, with saved and grads: the op and its backward through the dispatcher)
    unpacked = ", ".join([f"*a[{i}]" for i in range(len(family.required + family.params))]
                         + [f"a[{i}]" for i in range(len(family.required + family.params), len(family.arguments))]
                         + [f"s[{i}]" for i in range(len(family.switches))])
    for suffix, extra_params, extra_args, returns in (
            ("", "", "", "seastar::OpResults"),
            ("_backward", ", at::TensorList saved, at::TensorList grads", ", saved, grads", "std::vector<at::Tensor>")):
        parts.append(f"{returns} {n}{suffix}_call(at::TensorList graph, const seastar::OptionalTensors& a, "
                     f"const seastar::Switches& s{extra_params}) {{\n"
                     f'  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("seastar_layers::{n}'
                     f'{suffix}", "").typed<decltype({n}{suffix})>();\n'
                     f"  return op.call(graph, {unpacked}{extra_args});\n}}")
    # seastar::OpResults gat_attention_autograd(at::TensorList graph, <parameters>) {
    #   return seastar::with_autograd(gat_attention_family, gat_attention_call, gat_attention_backward_call, graph,
    #                                 {a_src, ...}, {with_attention});
    # }
    tensors = ", ".join(family.arguments)
    parts.append(f"seastar::OpResults {n}_autograd(at::TensorList graph, {cpp_parameters(family)}) {{\n"
                 f"  return seastar::with_autograd({n}_family, {n}_call, {n}_backward_call, graph, {{{tensors}}}, "
                 f"{{{', '.join(family.switches)}}});\n}}")
    return "\n\n".join(parts)


def render_registration(compiled: dict[str, list[tuple]]) -> str:
    """The extension's registration file. compiled: per target ("cpu", "cuda"), a list of
    (family, variant key, generated program, names of its run-time sizes) for every kernel compiled
    into the extension."""
    families, tables = {}, {}
    for target, variants in compiled.items():
        for family, key, generated, dims in variants:
            families.setdefault(family.name, family)
            tables.setdefault(family.name, {}).setdefault(target, []).append(
                VariantRenderer(family, key, generated, dims))
    declarations = list(dict.fromkeys(line for per_target in tables.values() for renderers in per_target.values()
                                      for variant in renderers for line in variant.declarations()))
    bodies = [render_family(families[name], tables[name]) for name in families]
    # TORCH_LIBRARY(seastar_layers, m) {
    #   m.def("gat_attention(Tensor[] graph, ...) -> (Tensor[], Tensor[])", {at::Tag::pt2_compliant_tag});
    # }
    schemas = [f'  m.def("{schema}", {{at::Tag::pt2_compliant_tag}});'
               for f in families.values() for schema in (f.schema(), f.backward_schema())]
    registrations = []
    for target, key in (("cpu", "CPU"), ("cuda", "CUDA")):
        if any(target in per_target for per_target in tables.values()):
            # TORCH_LIBRARY_IMPL(seastar_layers, CPU, m) {
            #   m.impl("gat_attention", &gat_attention);
            # }
            impls = [f'  m.impl("{name}{suffix}", &{name}{suffix});'
                     for name in families for suffix in ("", "_backward")]
            registrations.append("\n".join([f"TORCH_LIBRARY_IMPL(seastar_layers, {key}, m) {{", *impls, "}"]))
    # TORCH_LIBRARY_IMPL(seastar_layers, Autograd, m) {
    #   m.impl("gat_attention", &gat_attention_autograd);
    # }
    registrations.append("\n".join(["TORCH_LIBRARY_IMPL(seastar_layers, Autograd, m) {",
                                     *[f'  m.impl("{name}", &{name}_autograd);' for name in families], "}"]))
    return "\n".join([
        "// generated by setup.py (seastar_layers/codegen/torch_entry.py) from seastar_layers.nn.programs; do not edit",
        '#include "seastar_ops.h"', "",
        "// the kernels' plain-C entry points, compiled from the generated sources next to this file",
        'extern "C" {', *declarations, "}", "",
        "namespace {", "", "\n\n".join(bodies), "", "}  // namespace", "",
        "const seastar::Family* seastar::family_named(const char* op) {",
        f"  static const seastar::Family* const families[] = {{{', '.join(f'&{n}_family' for n in families)}}};",
        "  for (const seastar::Family* f : families)",
        "    if (std::strcmp(f->op, op) == 0) return f;",
        "  return nullptr;",
        "}", "",
        "TORCH_LIBRARY(seastar_layers, m) {", *schemas, "}", "", "\n\n".join(registrations), ""])
