"""The Python side of the layers' torch ops (runtime/family.py: OpFamily; their C++ entry points are
codegen/torch_entry.py's).

The extension seastar_layers._C defines torch.ops.seastar_layers.<family> and <family>_backward
(TORCH_LIBRARY, with C++ entry points per dispatch key, autograd's included); importing this module
loads it, and `register` adds what stays in Python: the fake (meta) implementations, which allocate
what the chosen specialisation returns, and where the extension was built without CUDA kernels,
the CUDA implementation through the JIT (announced once with a warning). `call` runs an op on a
seastar_layers.Graph.
"""
from __future__ import annotations

import functools
import threading
import warnings
from dataclasses import dataclass
from typing import Iterable

import torch
from torch import Tensor

from ..base import COMPUTE_DTYPE, DTYPE_NAMES, variant_key
from ..errors import BuildError
from ..ir import Role
from . import prebuilt, toolchain
from .executor import bind_dims, buffer_dtype, buffer_shape

NAMESPACE = "seastar_layers"


def require() -> None:
    """Raises, saying why, where the extension that defines the ops was not loaded."""
    if _UNAVAILABLE is not None:
        raise BuildError(f"the layers run their kernels from the extension seastar_layers._C, but {_UNAVAILABLE}")


def call(family, graph, **tensors) -> list[Tensor]:
    """Runs torch.ops.seastar_layers.<family>: the program's results on `graph` (a seastar_layers.Graph);
    switches are passed by name as bools."""
    require()
    unknown = [name for name in tensors if name not in family.arguments and name not in family.switches]
    if unknown:
        raise TypeError(f"{NAMESPACE}::{family.name} got unknown arguments {sorted(unknown)}; it takes "
                        f"{', '.join(family.arguments + family.switches)}")
    op = getattr(getattr(torch.ops, NAMESPACE), family.name)
    features = [tensors[name] for name in family.required if name in tensors]
    compute = COMPUTE_DTYPE.get(features[0].dtype) if features else None
    if family.seeded_by is not None and tensors.get(family.seeded_by) is not None:
        tensors = dict(tensors, seed=draw_seed(graph.device))
    args = []
    for name in family.arguments:
        t = tensors.get(name)
        if t is not None and not family.is_feature(name) and name != "seed" and compute is not None:
            t = t.to(compute)  # the op takes parameters in the compute dtype (float32 for half features)
        args.append(t.contiguous() if t is not None else None)
    switches = [bool(tensors.get(name, False)) for name in family.switches]
    results, _ = op(graph.op_tensors(), *args, *switches)
    return results


def draw_seed(device: torch.device) -> Tensor:
    """The seed of a program's random draws, from torch's generator: reproducible under torch.manual_seed."""
    # written for TorchScript too (the scripted GATConv calls it): a list size, an int bound
    return torch.randint(0, 1 << 62, [1], dtype=torch.int64, device=device)[0]


# -- the Python side of the ops: fake (meta) ----------------------------------------
@dataclass(frozen=True)
class _Variant:
    """One specialisation's program and the buffers of its forward: what the fake implementation
    allocates and the JIT path runs."""
    program: object
    inputs: list  # the forward's input buffers
    results: list
    saved: list


_VARIANTS: dict[tuple[str, str], _Variant] = {}
_VARIANTS_LOCK = threading.Lock()


def _variant(family, options: tuple[str, ...], dtype: torch.dtype) -> _Variant:
    """From the pipeline, once per process and specialisation."""

    key = (family.name, variant_key(dtype, options))
    with _VARIANTS_LOCK:
        if key not in _VARIANTS:
            # compiling is Python work on declared shapes: real example tensors, outside any fake mode
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                program = family.program(options, dtype)
                buffers = program.generate(family.examples(options, dtype)).forward.buffers
            _VARIANTS[key] = _Variant(program, [b for b in buffers if b.is_input],
                                      [b for b in buffers if b.role is Role.OUTPUT],
                                      [b for b in buffers if b.role is Role.SAVED])
        return _VARIANTS[key]


def _features(family, tensors: dict[str, Tensor]) -> tuple[dict[str, Tensor], torch.dtype]:
    features = {n: t for n, t in tensors.items() if family.is_feature(n)}
    dtype = features[family.required[0]].dtype
    if dtype not in family.dtypes:
        raise TypeError(f"{NAMESPACE}::{family.name}: no kernel for '{family.required[0]}' of dtype {dtype}; convert "
                        "the features to float32, float64, float16 or bfloat16")
    return features, dtype


def _fake(family, graph, *args):
    tensors, options = family.split(args)
    features, dtype = _features(family, tensors)
    variant = _variant(family, options, dtype)
    read = [b for b in variant.inputs if b.key.role is Role.FEATURE]
    dims = bind_dims(read, [features[b.key.name] for b in read])
    sizes = (graph[3].shape[0] - 1, graph[0].shape[0] - 1, graph[1].shape[0])

    def make(buffers):
        return [graph[0].new_empty(buffer_shape(b, sizes, dims), dtype=buffer_dtype(b, dtype)) for b in buffers]

    return make(variant.results), make(variant.saved)


def _fake_backward(family, graph, *args):
    return [torch.empty_like(t) for t in args[:len(family.arguments)] if t is not None]


_FAMILIES: dict[str, object] = {}  # by name: the families build_variant compiles for
_PREBUILT: dict[str, tuple] = {}  # per target, (the dtypes the install compiles, the options it leaves out)


def register(families: Iterable, prebuilt_dtypes: dict[str, tuple], first_use_options: dict[str, frozenset]) -> None:
    """Registers the Python side (fake implementations) of the ops the extension defines, and where
    the extension has no CUDA kernels, their CUDA implementation through the JIT (_jit_forward).
    Per target, the install compiles the variants in prebuilt_dtypes without first_use_options;
    build_variant serves the others (and names them in its messages)."""
    _PREBUILT.update((target, (dtypes, first_use_options[target])) for target, dtypes in prebuilt_dtypes.items())
    if _UNAVAILABLE is not None:
        return
    for family in families:
        _FAMILIES[family.name] = family
        qualified = f"{NAMESPACE}::{family.name}"
        torch.library.register_fake(qualified)(functools.partial(_fake, family))
        torch.library.register_fake(f"{qualified}_backward")(functools.partial(_fake_backward, family))
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CUDA"):
            _JIT_ON_CUDA.add(family.name)
            torch.library.impl(qualified, "CUDA")(functools.partial(_jit_forward, family))
            torch.library.impl(f"{qualified}_backward", "CUDA")(functools.partial(_jit_backward, family))


# -- variants the extension was not built with -------------------------------------------------------
def build_variant(op: str, cuda: bool, key: str) -> None:
    """Compiles the variant `key` (base.py: variant_key) of `op` ("seastar_layers::<family>") for the
    CPU, or for the current GPU with `cuda`, through the JIT and its disk cache, and adds it to the
    extension's tables (seastar_layers._C.add_variant). The op calls this (csrc/module.cpp:
    added_variant) the first time it is asked for a variant it was not built with, e.g. a dtype the
    install leaves to first use (nn/programs.py: PREBUILT_DTYPES)."""
    import ctypes

    from .. import _C
    from ..codegen.torch_entry import VariantRenderer, dim_names
    from .. import config
    from . import jit

    family = _FAMILIES[op.removeprefix(f"{NAMESPACE}::")]
    dtype_name, *options = key.split("|")
    dtype = next(d for d, name in DTYPE_NAMES.items() if name == dtype_name)
    device, target = ("CUDA", "cuda") if cuda else ("CPU", "cpu")
    if not config.jit_enabled():
        dtypes = ", ".join(DTYPE_NAMES[d] for d in _PREBUILT[target][0])
        left_out = " or ".join(sorted(_PREBUILT[target][1]))
        raise BuildError(f"the install prebuilds the layers' {device} kernels in {dtypes}"
                         f"{f', except those with {left_out},' if left_out else ''} and compiles the others on first "
                         f"use, as {key} here, which SEASTAR_NO_JIT=1 forbids; unset SEASTAR_NO_JIT (each is compiled "
                         f"once, then cached), or give the layer {dtypes} features")
    tools = toolchain.for_device(torch.device("cuda")) if cuda else toolchain.CPU
    announce = (f"seastar_layers: compiling {family.name} ({key}) for the {device} on first use; cached in "
                f"{config.cache_dir()}")
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        program = family.program(options, dtype)
        features = family.examples(options, dtype)
        generated = program.generate(features, tools.target)
        lib = jit.load_library(generated.source, stem=family.name, tools=tools, announce=announce)
    renderer = VariantRenderer(family, key, generated, dim_names(program, features))

    def entry(name: str) -> int:
        return ctypes.cast(getattr(lib, f"seastar_{generated.key}{name}"), ctypes.c_void_p).value

    backward = generated.backward  # None for a forward no backward follows (for_backward off)
    _C.add_variant(op, cuda, key, entry("forward"), entry("backward") if backward else 0, entry("last_error"),
                   renderer.rows(generated.forward), renderer.rows(backward) if backward else [],
                   len(renderer.results), len(renderer.saved), renderer.dims)


# -- CUDA tensors where the extension has no CUDA kernels: the programs through the JIT ------------
_JIT_ON_CUDA: set[str] = set()  # the families whose CUDA implementation is _jit_forward


def prebuilt_cuda_kernels() -> bool:
    """Whether seastar_layers._C runs the layers' ops on CUDA tensors with its own kernels."""
    return _UNAVAILABLE is None and not _JIT_ON_CUDA


NO_CUDA_KERNELS = ("seastar_layers: the extension seastar_layers._C has no CUDA kernels (it was built where torch "
                   "was a CPU build or no CUDA toolkit was found), so the layers' programs are compiled with nvcc on "
                   "first use and cached on disk. For prebuilt CUDA kernels, reinstall with a CUDA build of torch and "
                   "the CUDA toolkit: FORCE_CUDA=1 pip install --no-build-isolation seastar_layers")
_warned_jit = False


def _jit_op(family, graph: list[Tensor], tensors: dict[str, Tensor], options):
    """The variant's program compiled for the tensors' device by the path custom programs take
    (runtime/toolchain.py: for_device; nvcc, or with SEASTAR_EMULATE_CUDA=1 the emulator), and its
    forward inputs in op order."""
    global _warned_jit
    if not _warned_jit:
        _warned_jit = True
        warnings.warn(NO_CUDA_KERNELS, RuntimeWarning, stacklevel=2)
    features, dtype = _features(family, tensors)
    program = _variant(family, options, dtype).program
    spec = program.specialise(features, toolchain.for_device(graph[0].device), as_compiled=True)
    compute = COMPUTE_DTYPE[dtype]
    inputs = []
    for buf in spec.op.inputs:
        if buf.key.role is Role.DEGREE:
            inputs.append((graph[0][1:] - graph[0][:-1]).to(compute))
        elif buf.key.role is Role.PARAM or buf.key.role is Role.FEATURE:
            inputs.append(tensors[buf.key.name].contiguous())
        elif buf.key.role is Role.SEED:
            inputs.append(tensors["seed"])
        else:
            raise NotImplementedError(f"{NAMESPACE}::{family.name}: no JIT input for {buf.key!r}")
    return spec.op, inputs


def _jit_forward(family, graph, *args):
    tensors, options = family.split(args)
    op, inputs = _jit_op(family, graph, tensors, options)
    outs = op.forward(list(graph), inputs)
    return outs[:len(op.outputs)], outs[len(op.outputs):]


def _jit_backward(family, graph, *args):
    *args, saved, grads = args
    tensors, options = family.split(args)
    op, inputs = _jit_op(family, graph, tensors, options)
    per_buffer = op.backward(list(graph), inputs, list(saved), list(grads))
    gradients = {}
    for buf, g in zip(op.inputs, per_buffer, strict=True):
        name = buf.key.name
        if name in tensors:  # a feature read in two places gets the sum
            gradients[name] = gradients[name] + g if name in gradients else g
    return [gradients.get(name, torch.zeros_like(t)) for name, t in tensors.items()]


def _fake_csr_layouts(src, dst, num_src, num_dst, listed=None, loops=0, dtype=None, unlist_self_loops=False,
                      by_neighbour=False):
    edges = src.numel() + loops
    return [src.new_empty(n, dtype=dtype or torch.int64)
            for n in (num_dst + 1, edges, edges, num_src + 1, edges, edges)]


# Loading the extension defines the ops; why it was not loaded, if it was not
_UNAVAILABLE = prebuilt.load_extension()
if _UNAVAILABLE is None:  # the graph builder (csrc/graph_ops.cpp); the layers' ops register through register()
    torch.library.register_fake(f"{NAMESPACE}::csr_layouts")(_fake_csr_layouts)
