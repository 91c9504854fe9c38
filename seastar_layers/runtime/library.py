"""The Python side of the layers' torch ops (declared in codegen/torch_entry.py: OpFamily).

The extension seastar_layers._C defines torch.ops.seastar_layers.<family> and <family>_backward
(TORCH_LIBRARY, with C++ entry points per dispatch key); importing this module loads it, and
`register` adds what stays in Python: the fake (meta) implementations, which allocate what the
chosen specialisation returns, and autograd. `call` runs an op on a seastar_layers.Graph.
"""
from __future__ import annotations

import functools
import threading
from typing import Iterable

import torch
from torch import Tensor

from ..errors import BuildError
from ..ir import Role
from . import prebuilt
from .executor import buffer_dtype, buffer_shape

NAMESPACE = "seastar_layers"


def require() -> None:
    """Raises, saying why, where the extension that defines the ops was not loaded."""
    if _UNAVAILABLE is not None:
        raise BuildError(f"the layers run their kernels from the extension seastar_layers._C, but {_UNAVAILABLE}")


def call(family, graph, **tensors) -> list[Tensor]:
    """Runs torch.ops.seastar_layers.<family>: the program's results on `graph` (a seastar_layers.Graph)."""
    require()
    unknown = set(tensors) - set(family.arguments)
    if unknown:
        raise TypeError(f"{NAMESPACE}::{family.name} got unknown arguments {sorted(unknown)}; it takes "
                        f"{', '.join(family.arguments)}")
    op = getattr(getattr(torch.ops, NAMESPACE), family.name)
    args = [tensors[name].contiguous() if name in tensors else None for name in family.arguments]
    results, _ = op(graph.tensors(with_orders=graph.device.type == "cuda"), *args)
    return results


# -- the Python side of the ops: fake (meta) and autograd ----------------------------------------
def _given(family, args) -> dict[str, Tensor]:
    """The tensors given, by name (the dispatcher drops trailing arguments left at their default)."""
    return {name: t for name, t in zip(family.arguments, args) if t is not None}


def _fake(family, graph, *args):
    from ..codegen.torch_entry import DTYPE_NAMES, variant_key
    from ..compiler import pattern_of

    features = {n: t for n, t in _given(family, args).items() if n not in family.params}
    dtype = features[family.required[0]].dtype
    if dtype not in family.dtypes:
        raise TypeError(f"{NAMESPACE}::{family.name}: no kernel for {family.required[0]}'s dtype {dtype}; convert the "
                        "features to " + " or ".join(DTYPE_NAMES[d] for d in family.dtypes))
    shapes = {n: tuple(t.shape[1:]) for n, t in features.items()}
    _, dims = pattern_of(shapes)
    results, saved = _forward_buffers(family, variant_key(dtype, shapes))
    sizes = (graph[3].shape[0] - 1, graph[0].shape[0] - 1, graph[1].shape[0])

    def make(buffers):
        return [graph[0].new_empty(buffer_shape(b, sizes, dims), dtype=buffer_dtype(b, dtype)) for b in buffers]

    return make(results), make(saved)


def _fake_backward(family, graph, *args):
    return [torch.empty_like(t) for t in args[:len(family.arguments)] if t is not None]


def _setup_context(family, ctx, inputs, output):
    graph, args = inputs[0], inputs[1:]
    results, saved = output
    ctx.given = [t is not None for t in args]
    ctx.save_for_backward(*graph, *[t for t in args if t is not None], *saved)
    ctx.counts = (len(graph), sum(ctx.given))
    ctx.results = [(r.shape, r.dtype) for r in results]


def _backward(family, ctx, grad_results, grad_saved):
    n_graph, n_given = ctx.counts
    tensors = ctx.saved_tensors
    graph, given, saved = list(tensors[:n_graph]), iter(tensors[n_graph:n_graph + n_given]), tensors[n_graph + n_given:]
    args = [next(given) if g else None for g in ctx.given]
    grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=graph[0].device)
             for g, (shape, dtype) in zip(grad_results, ctx.results, strict=True)]
    op = getattr(getattr(torch.ops, NAMESPACE), f"{family.name}_backward")
    gradients = iter(op(graph, *args, list(saved), grads))
    # the dispatcher drops trailing arguments left at their default: no gradients for them
    passed = max(i for i, t in enumerate(args) if t is not None) + 1
    return ([None] * n_graph, *[next(gradients) if t is not None else None for t in args[:passed]])


_SCHEDULES: dict[tuple[str, str], tuple[list, list]] = {}
_SCHEDULES_LOCK = threading.Lock()


def _forward_buffers(family, key: str) -> tuple[list, list]:
    """The result and saved buffers of one specialisation's forward, from the pipeline (once per
    process): what the fake implementation allocates."""
    from ..codegen.torch_entry import DTYPE_NAMES

    with _SCHEDULES_LOCK:
        if (family.name, key) not in _SCHEDULES:
            dtype = next(d for d, name in DTYPE_NAMES.items() if key.startswith(name + "|"))
            # compiling is Python work on sizes: examples of the pattern, as real tensors
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                feats = {n: torch.zeros((1, *shape), dtype=dtype) for n, shape in _example_shapes(key).items()}
                buffers = family.program(feats, dtype).generate(feats).forward.buffers
            _SCHEDULES[family.name, key] = ([b for b in buffers if b.role is Role.OUTPUT],
                                            [b for b in buffers if b.role is Role.SAVED])
        return _SCHEDULES[family.name, key]


def _example_shapes(key: str) -> dict[str, tuple]:
    """Feature shapes (after the rows) of the pattern a variant key names: symbol sk as size k + 2."""
    shapes = {}
    for part in key.split("|")[1:]:
        name, sizes = part.split(":")
        shapes[name] = tuple(int(d[1:]) + 2 if d.startswith("s") else int(d) for d in sizes.split(",") if d)
    return shapes


def register(families: Iterable) -> None:
    """Registers the Python side (fake and autograd) of the ops the extension defines."""
    if _UNAVAILABLE is not None:
        return
    for family in families:
        qualified = f"{NAMESPACE}::{family.name}"
        torch.library.register_fake(qualified)(functools.partial(_fake, family))
        torch.library.register_fake(f"{qualified}_backward")(functools.partial(_fake_backward, family))
        torch.library.register_autograd(qualified, functools.partial(_backward, family),
                                        setup_context=functools.partial(_setup_context, family))


# Loading the extension defines the ops; why it was not loaded, if it was not
_UNAVAILABLE = prebuilt.load_extension()
