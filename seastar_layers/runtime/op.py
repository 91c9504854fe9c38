"""Each compiled specialisation becomes a torch.library custom op with autograd and a fake kernel.

    forward(graph: Tensor[], inputs: Tensor[]) -> Tensor[]            outputs, then saved values
    backward(graph, inputs, saved, grads) -> Tensor[]                 one gradient per input
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from ..ir import BufferKey, Role, Space
from ..passes.autodiff import adjoint_key, gradient_key
from ..passes.schedule import Buffer, Schedule
from ..base import COMPUTE_DTYPE
from .executor import Entry, bind_dims, buffer_dtype, buffer_shape, run


@dataclass
class CompiledOp:
    forward: object  # the custom op
    backward: object | None  # None where the program has no backward (compiled for_backward=False)
    inputs: list[Buffer]  # the forward's inputs, in op order
    outputs: list[Buffer]  # the program's results
    saved: list[Buffer]  # what the forward keeps for the backward
    # parameters the backward returns no gradient for (only compared, or detached): the caller
    # passes them detached, so that autograd leaves their .grad None, as torch does
    without_gradient: frozenset[BufferKey]


def _sizes(graph: list[Tensor]) -> tuple[int, int, int]:
    return graph[3].shape[0] - 1, graph[0].shape[0] - 1, graph[1].shape[0]


_OPS: dict[str, CompiledOp] = {}  # torch.library allows one registration per name and process
_OPS_LOCK = threading.Lock()  # so threads making their first call at once register it once


def make_op(key: str, tag: str, lib, fwd: Schedule, bwd: Schedule | None, dtype: torch.dtype) -> CompiledOp:
    """The custom op for a generated program (key: a hash of its source, which spells out its whole
    interface and prefixes its entry points in the library) built by one toolchain (tag: its
    backend); registered once per process."""
    name = key + tag
    with _OPS_LOCK:
        if name not in _OPS:
            _OPS[name] = _register(key, name, lib, fwd, bwd, dtype)
        return _OPS[name]


def _register(key: str, name: str, lib, fwd: Schedule, bwd: Schedule | None, dtype: torch.dtype) -> CompiledOp:
    fwd_entry = Entry(lib, key, "forward")
    input_bufs = [b for b in fwd.buffers if b.is_input]
    outputs = [b for b in fwd.buffers if b.role is Role.OUTPUT]
    saved_bufs = [b for b in fwd.buffers if b.role is Role.SAVED]

    @torch.library.custom_op(f"seastar_layers::program_{name}", mutates_args=())
    def forward(graph: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
        dims = bind_dims(input_bufs, inputs)
        outs = run(fwd_entry, fwd, graph, _sizes(graph), {b.key: t for b, t in zip(input_bufs, inputs, strict=True)},
                   dtype, dims)
        return [outs[b.key] for b in outputs + saved_bufs]

    @forward.register_fake
    def _(graph, inputs):
        sizes, dims = _sizes(graph), bind_dims(input_bufs, inputs)
        return [torch.empty(buffer_shape(b, sizes, dims), dtype=buffer_dtype(b, dtype), device=graph[0].device)
                for b in outputs + saved_bufs]

    if bwd is None:  # the call that chose it records no backward (CompiledProgram.specialise)
        def no_backward(ctx, grads):
            raise RuntimeError(f"seastar_layers::program_{name} was compiled for_backward=False and has no backward")

        forward.register_autograd(no_backward, setup_context=lambda ctx, inputs, output: None)
        return CompiledOp(forward, None, input_bufs, outputs, saved_bufs, frozenset())
    bwd_entry = Entry(lib, key, "backward")
    bwd_inputs = {b.key for b in bwd.buffers if b.is_input}
    bwd_outputs = {b.key for b in bwd.buffers if not b.is_input}
    read_by_backward = [b.key in bwd_inputs for b in input_bufs]

    @torch.library.custom_op(f"seastar_layers::program_{name}_backward", mutates_args=())
    def backward(graph: list[Tensor], inputs: list[Tensor], saved: list[Tensor], grads: list[Tensor]) -> list[Tensor]:
        named = {b.key: t for b, t in zip(input_bufs, inputs, strict=True)}
        named.update((b.key, t) for b, t in zip(saved_bufs, saved, strict=True))
        named.update((adjoint_key(b.key), g.contiguous()) for b, g in zip(outputs, grads, strict=True))
        outs = run(bwd_entry, bwd, graph, _sizes(graph), {k: t for k, t in named.items() if k in bwd_inputs},
                   dtype, bind_dims(input_bufs, inputs))
        return [_gradient(b, outs, bwd_outputs, t) for b, t in zip(input_bufs, inputs, strict=True)]

    @backward.register_fake
    def _(graph, inputs, saved, grads):
        return [torch.empty_like(t) for t in inputs]

    def setup_context(ctx, inputs, output):
        graph, feats = inputs
        # an input the backward does not read is kept as its shape and dtype alone: a sum's backward needs no
        # features, and APPNP's K steps would otherwise hold K feature-sized tensors until the backward
        kept = [t if read else _stand_in(t) for t, read in zip(feats, read_by_backward, strict=True)]
        ctx.save_for_backward(*graph, *kept, *output[len(outputs):])
        ctx.counts = (len(graph), len(feats))

    def grad_fn(ctx, grads):
        n_graph, n_feats = ctx.counts
        saved_tensors = ctx.saved_tensors
        graph = list(saved_tensors[:n_graph])
        feats = list(saved_tensors[n_graph:n_graph + n_feats])
        saved = list(saved_tensors[n_graph + n_feats:])
        sizes, dims = _sizes(graph), bind_dims(input_bufs, feats)
        user_grads = [g if g is not None else torch.zeros(buffer_shape(b, sizes, dims), dtype=dtype,
                                                          device=graph[0].device)
                      for b, g in zip(outputs, grads[:len(outputs)], strict=True)]
        return [None] * n_graph, backward(graph, feats, saved, user_grads)

    forward.register_autograd(grad_fn, setup_context=setup_context)
    without_gradient = frozenset(b.key for b in input_bufs if b.role is Role.PARAM and not any(
        gradient_key(b.key, bucket) in bwd_outputs for bucket in (Space.DST, Space.SRC)))
    return CompiledOp(forward, backward, input_bufs, outputs, saved_bufs, without_gradient)


def _stand_in(t: Tensor) -> Tensor:
    """t's shape, dtype and device over one element of memory (a stride-0 view): what the backward
    needs of an input its program does not read."""
    return t.new_zeros(()).expand(t.shape)


def _gradient(buf: Buffer, outs: dict, available: set, like: Tensor) -> Tensor:
    """The gradient of one forward input from the backward program's outputs."""
    if buf.role is Role.SEED:
        return torch.zeros_like(like)  # an integer input: no gradient (autograd ignores it)
    if buf.role is not Role.PARAM:
        key = gradient_key(buf.key)
        return outs[key] if key in available else torch.zeros_like(like)
    total = torch.zeros_like(like, dtype=COMPUTE_DTYPE[like.dtype])
    for bucket in (Space.DST, Space.SRC):
        key = gradient_key(buf.key, bucket)
        if key in available:
            total = total + outs[key].sum(0).reshape(like.shape)
    return total.to(like.dtype)
