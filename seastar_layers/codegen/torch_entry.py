"""The layers' programs as torch ops with stable names and schemas, and their generated C++ entry points.

An op family (OpFamily) is one vertex program with options. `torch.ops.seastar_layers.<name>`
runs every specialisation of it and `<name>_backward` their backward:

    name(Tensor[] graph, <required features>, <parameters>, Tensor? <optional feature>=None, ...)
        -> (Tensor[] results, Tensor[] saved)
    name_backward(Tensor[] graph, <the same>, Tensor[] saved, Tensor[] grads) -> Tensor[]
        (one gradient per tensor given, in schema order)

`graph` is `Graph.tensors()`: the six CSR arrays, and on a GPU the two row orders. Parameters are
0-d tensors of the compute dtype; an expression of parameters is computed by the caller, in
torch, so that torch's autograd differentiates it. The entry point picks the kernel from what it
is given: which optional features, their dtype and their shape pattern (variant_key).

The extension seastar_layers._C gets, per family, a forward and a backward entry point taking
at::Tensor arguments, a table of its kernel variants per device (the key that selects each, its
plain-C kernel entries, where each kernel buffer comes from), and its TORCH_LIBRARY schema and
per-dispatch-key registration, all generated here. What every entry point does the same way
(checks, choosing the variant, allocating, calling the kernels) is written once, by hand, in
csrc/seastar_ops.h. Each f-string below is preceded by a comment showing the C++ it emits. The
Python side of the ops (fake and autograd implementations) is runtime/library.py.
"""
from __future__ import annotations

import itertools
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
ROWS = {Space.SRC: "kSrc", Space.DST: "kDst", Space.EDGE: "kEdge", Space.PARAM: "kParam"}
DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16"}


def variant_key(dtype: torch.dtype, shapes: dict[str, tuple]) -> str:
    """Names a specialisation of a family: the features' dtype and shape pattern, as
    "float32|a_src:s0,1|x:s0,s1" (features by name; sizes after the rows). The C++ entry point
    computes the same string (csrc/seastar_ops.h: variant_key) to find its kernel."""
    from ..compiler import pattern_of

    patterns, _ = pattern_of(shapes)
    return "|".join([DTYPE_NAMES[dtype]] + [f"{name}:{','.join(map(str, patterns[name]))}" for name in sorted(shapes)])


@dataclass(frozen=True)
class OpFamily:
    """A layer's vertex program, its options, and the example shapes its prebuilt kernels cover.

    build(**flags, **params) returns the program for one set of options; an optional feature
    given turns its flag on. examples() yields feature shapes (rows first) covering every shape
    pattern the layers use."""

    build: Callable
    required: tuple[str, ...]
    optional: tuple[tuple[str, str], ...]  # (feature, the flag of `build` that reads it)
    params: tuple[str, ...]
    examples: Callable[[], Iterable[dict[str, tuple]]]
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64)

    @property
    def name(self) -> str:
        return self.build.__name__

    @property
    def arguments(self) -> tuple[str, ...]:
        """The op's tensor arguments after the graph, in schema order."""
        return self.required + self.params + tuple(feature for feature, _ in self.optional)

    def schema(self) -> str:
        args = [f"Tensor {n}" for n in self.required + self.params] + [f"Tensor? {f}=None" for f, _ in self.optional]
        return f"{self.name}(Tensor[] graph, {', '.join(args)}) -> (Tensor[], Tensor[])"

    def backward_schema(self) -> str:
        args = [f"Tensor {n}" for n in self.required + self.params] + [f"Tensor? {f}" for f, _ in self.optional]
        return f"{self.name}_backward(Tensor[] graph, {', '.join(args)}, Tensor[] saved, Tensor[] grads) -> Tensor[]"

    def program(self, present: Iterable[str], dtype: torch.dtype):
        """The program for the optional features in `present` (parameters are placeholders: they are inputs)."""
        flags = {flag: feature in present for feature, flag in self.optional}
        return self.build(**flags, **{p: torch.zeros((), dtype=COMPUTE_DTYPE[dtype]) for p in self.params})

    def variants(self):
        """(program, example features) for every specialisation the prebuilt extension holds."""
        seen = set()
        optional = [feature for feature, _ in self.optional]
        for dtype in self.dtypes:
            for count in range(len(optional) + 1):
                for present in itertools.combinations(optional, count):
                    for shapes in self.examples():
                        names = self.required + present
                        key = variant_key(dtype, {n: shapes[n][1:] for n in names})
                        if key not in seen:
                            seen.add(key)
                            yield self.program(present, dtype), {n: torch.zeros(shapes[n], dtype=dtype) for n in names}

    def __call__(self, graph, **tensors) -> list[Tensor]:
        """The program's results on `graph` (a seastar_layers.Graph) for these features and parameters."""
        return library.call(self, graph, **tensors)


def cpp_bool(value: bool) -> str:
    return "true" if value else "false"


def cpp_shape(buf: Buffer) -> str:
    """A buffer's feature shape as the header reads it: sizes, and -1 - k for the run-time size s<k>."""
    if len(buf.shape) > MAX_RANK:
        raise ValueError(f"buffer {buf.key!r} has rank {len(buf.shape)}; the entry points take at most {MAX_RANK}")
    return "{" + ", ".join(str(-1 - int(d[1:]) if is_symbol(d) else d) for d in buf.shape) + "}"


class VariantRenderer:
    """The C++ tables of one compiled specialisation (its `generated` forward and backward)."""

    def __init__(self, family, key: str, generated):
        self.family, self.key, self.g = family, key, generated
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
        return {Role.DEGREE: "kDegree", Role.TEMP: "kTemp"}[role], 0

    def buffers(self, name: str, sched: Schedule) -> str:
        lines = []
        for buf in sched.buffers:
            origin, index = self.origin(buf)
            fill = sched.constant_outputs.get(buf.key)
            # {seastar::From::kArgument, 0, seastar::Rows::kSrc, 2, {-1, 1}, false, false, 0.0},  // feature:a_src@src
            lines.append(f"  {{seastar::From::{origin}, {index}, seastar::Rows::{ROWS[buf.rows]}, {len(buf.shape)}, "
                         f"{cpp_shape(buf)}, {cpp_bool(buf.in_compute_type)}, {cpp_bool(fill is not None)}, "
                         f"{float(fill or 0)!r}}},  // {buf.key!r}")
        # const seastar::Buffer p1234_forward_buffers[] = {
        #   ...
        # };
        return "\n".join([f"const seastar::Buffer {self.g.key}{name}_buffers[] = {{", *lines, "};"])

    def tables(self) -> str:
        return "\n".join([f"// {self.family.name} {self.key}", self.buffers("forward", self.g.forward),
                          self.buffers("backward", self.g.backward)])

    def program(self, name: str, sched: Schedule) -> str:
        k = self.g.key
        # {seastar_p1234_forward, seastar_p1234_last_error, p1234_forward_buffers, 9}
        return f"{{seastar_{k}{name}, seastar_{k}last_error, {k}{name}_buffers, {len(sched.buffers)}}}"

    def entry(self) -> str:
        # {"float32|a_src:1,1|x:1,1", {...forward...}, {...backward...}, 1, 2},
        return (f'  {{"{self.key}", {self.program("forward", self.g.forward)}, '
                f'{self.program("backward", self.g.backward)}, {len(self.results)}, {len(self.saved)}}},')

    def declarations(self) -> list[str]:
        k = self.g.key
        # int seastar_p1234_forward(const int64_t*, const int64_t*, const int64_t* const*, void* const*,
        #                           const int64_t*, int, void*);
        signature = "(const int64_t*, const int64_t*, const int64_t* const*, void* const*, const int64_t*, int, void*);"
        return [f"int seastar_{k}forward{signature}", f"int seastar_{k}backward{signature}",
                f"const char* seastar_{k}last_error();"]


def cpp_parameters(family) -> str:
    """The C++ parameters of an entry point for the op's tensor arguments (after the graph)."""
    # const at::Tensor& a_src, const at::Tensor& slope, const std::optional<at::Tensor>& a_dst
    params = [f"const at::Tensor& {n}" for n in family.required + family.params]
    params += [f"const std::optional<at::Tensor>& {f}" for f, _ in family.optional]
    return ", ".join(params)


def cpp_arguments(family) -> str:
    # {&a_src, &slope, seastar::given(a_dst)}
    return "{" + ", ".join([f"&{n}" for n in family.required + family.params] +
                           [f"seastar::given({f})" for f, _ in family.optional]) + "}"


def render_family(family, tables: dict[str, list[VariantRenderer]]) -> str:
    n = family.name
    parts = [variant.tables() for renderers in tables.values() for variant in renderers]
    for target, renderers in tables.items():
        # const seastar::Variant gat_attention_cpu[] = {
        #   {"float32|a_src:1,1|x:1,1", {...}, {...}, 1, 2},
        # };
        parts.append("\n".join([f"const seastar::Variant {n}_{target}[] = {{", *[v.entry() for v in renderers], "};"]))
    names = ", ".join(f'"{a}"' for a in family.arguments)
    is_feature = ", ".join(cpp_bool(a not in family.params) for a in family.arguments)

    def table(target: str) -> str:
        return f"{n}_{target}, {len(tables[target])}" if tables.get(target) else "nullptr, 0"

    # const char* const gat_attention_arguments[] = {"a_src", "x", "slope", "a_dst"};
    # const bool gat_attention_is_feature[] = {true, true, false, true};
    # const seastar::Family gat_attention_family = {"seastar_layers::gat_attention", gat_attention_arguments,
    #                                               gat_attention_is_feature, 4, gat_attention_cpu, 80, nullptr, 0};
    parts.append(f"const char* const {n}_arguments[] = {{{names}}};\n"
                 f"const bool {n}_is_feature[] = {{{is_feature}}};\n"
                 f'const seastar::Family {n}_family = {{"seastar_layers::{n}", {n}_arguments, {n}_is_feature, '
                 f"{len(family.arguments)}, {table('cpu')}, {table('cuda')}}};")
    # std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>> gat_attention(at::TensorList graph, <parameters>) {
    #   return seastar::Call(gat_attention_family, graph, {&a_src, ...}).forward();
    # }
    parts.append(f"std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>> {n}(at::TensorList graph, "
                 f"{cpp_parameters(family)}) {{\n"
                 f"  return seastar::Call({n}_family, graph, {cpp_arguments(family)}).forward();\n}}")
    # std::vector<at::Tensor> gat_attention_backward(at::TensorList graph, <parameters>, at::TensorList saved,
    #                                                at::TensorList grads) {
    #   return seastar::Call(gat_attention_family, graph, {&a_src, ...}).backward(saved, grads);
    # }
    parts.append(f"std::vector<at::Tensor> {n}_backward(at::TensorList graph, {cpp_parameters(family)}, "
                 f"at::TensorList saved, at::TensorList grads) {{\n"
                 f"  return seastar::Call({n}_family, graph, {cpp_arguments(family)}).backward(saved, grads);\n}}")
    return "\n\n".join(parts)


def render_registration(compiled: dict[str, list[tuple]]) -> str:
    """The extension's registration file. compiled: per target ("cpu", "cuda"), a list of
    (family, variant key, generated program) for every kernel compiled into the extension."""
    families, tables = {}, {}
    for target, variants in compiled.items():
        for family, key, generated in variants:
            families.setdefault(family.name, family)
            tables.setdefault(family.name, {}).setdefault(target, []).append(VariantRenderer(family, key, generated))
    declarations = [line for per_target in tables.values() for renderers in per_target.values()
                    for variant in renderers for line in variant.declarations()]
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
    return "\n".join([
        "// generated by setup.py (seastar_layers/codegen/torch_entry.py) from seastar_layers.nn.programs; do not edit",
        '#include "seastar_ops.h"', "",
        "// the kernels' plain-C entry points, compiled from the generated sources next to this file",
        'extern "C" {', *declarations, "}", "",
        "namespace {", "", "\n\n".join(bodies), "", "}  // namespace", "",
        "TORCH_LIBRARY(seastar_layers, m) {", *schemas, "}", "", "\n\n".join(registrations), ""])
