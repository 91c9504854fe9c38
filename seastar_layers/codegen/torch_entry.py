"""The generated C++ entry points of the layers' programs as torch ops (runtime/family.py: OpFamily).

An op family is one vertex program with options. `torch.ops.seastar_layers.<name>`
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

import json

from torch import Tensor

from ..base import FOR_BACKWARD
from ..ir import Role, Space
from ..ir.program import is_symbol
from ..passes.autodiff import adjoint_key
from ..passes.schedule import Buffer, Schedule

MAX_RANK = 6  # as csrc/seastar_ops.h: kMaxRank
ROWS = {Space.SRC: "kSrc", Space.DST: "kDst", Space.EDGE: "kEdge", Space.PARAM: "kParam"}


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
        backward = [self.buffers("backward", self.g.backward)] if self.g.backward is not None else []
        return "\n".join([f"// {self.family.name} {self.key}", self.buffers("forward", self.g.forward), *backward,
                          f"const char* const {self.g.key}dims[] = {{{names}}};"])

    def program(self, name: str, sched: Schedule | None) -> str:
        k = self.g.key
        if sched is None:  # a forward no backward follows (for_backward=False)
            return "{nullptr, nullptr, nullptr, 0}"
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
        backward = [f"int seastar_{k}backward{signature}"] if self.g.backward is not None else []
        return [f"int seastar_{k}forward{signature}", *backward, f"const char* seastar_{k}last_error();"]


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
