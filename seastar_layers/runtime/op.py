"""Each compiled specialisation becomes a torch.library custom op with autograd and a fake kernel.

    forward(graph: Tensor[], inputs: Tensor[]) -> Tensor[]            outputs, then saved values
    backward(graph, inputs, saved, grads) -> Tensor[]                 one gradient per input
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from ..ir import Space
from ..passes.autodiff import grad_output_name
from ..passes.schedule import Schedule
from .executor import bind_dims, bind_entry, buffer_shape, run


@dataclass
class CompiledOp:
    forward: object  # the custom op
    backward: object
    input_names: list[str]  # buffer names of forward inputs, in op order
    output_names: list[str]  # user outputs
    saved_names: list[str]


def _sizes(graph: list[Tensor]) -> tuple[int, int, int]:
    return graph[3].shape[0] - 1, graph[0].shape[0] - 1, graph[1].shape[0]


_OPS: dict[str, CompiledOp] = {}  # torch.library allows one registration per name and process
_OPS_LOCK = threading.Lock()  # so threads making their first call at once register it once


def make_op(key: str, lib, fwd: Schedule, bwd: Schedule, n_outputs: int, dtype: torch.dtype) -> CompiledOp:
    """The custom op for a generated program (key: a hash of its source, which prefixes its entry
    points in the library); registered once per process."""
    with _OPS_LOCK:
        if key not in _OPS:
            _OPS[key] = _register(key, lib, fwd, bwd, n_outputs, dtype)
        return _OPS[key]


def _register(key: str, lib, fwd: Schedule, bwd: Schedule, n_outputs: int, dtype: torch.dtype) -> CompiledOp:
    fwd_entry, bwd_entry = bind_entry(lib, f"{key}forward"), bind_entry(lib, f"{key}backward")
    input_bufs = [b for b in fwd.buffers if b.role == "input"]
    input_names = [b.name for b in input_bufs]
    out_bufs = [b for b in fwd.buffers if b.role == "output"]
    output_names = [b.name for b in out_bufs[:n_outputs]]
    saved_names = [b.name for b in out_bufs[n_outputs:]]
    bwd_outputs = {b.name for b in bwd.buffers if b.role == "output"}
    bwd_input_names = {b.name for b in bwd.buffers if b.role == "input"}

    @torch.library.custom_op(f"seastar_layers::program_{key}", mutates_args=())
    def forward(graph: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
        dims = bind_dims(input_bufs, inputs)
        outs = run(fwd_entry, fwd, graph, _sizes(graph), dict(zip(input_names, inputs, strict=True)), dtype, dims)
        return [outs[n] for n in output_names + saved_names]

    @forward.register_fake
    def _(graph, inputs):
        sizes, dims = _sizes(graph), bind_dims(input_bufs, inputs)
        return [torch.empty(buffer_shape(b, sizes, dims), dtype=dtype, device=graph[0].device) for b in out_bufs]

    @torch.library.custom_op(f"seastar_layers::program_{key}_backward", mutates_args=())
    def backward(graph: list[Tensor], inputs: list[Tensor], saved: list[Tensor], grads: list[Tensor]) -> list[Tensor]:
        named = dict(zip(input_names, inputs, strict=True))
        named.update((f"{b.name}@{b.space.value}", t) for b, t in zip(out_bufs[n_outputs:], saved, strict=True))
        named.update((f"#grad:{k}@dst", g.contiguous()) for k, g in enumerate(grads))
        outs = run(bwd_entry, bwd, graph, _sizes(graph), {n: t for n, t in named.items() if n in bwd_input_names},
                   dtype, bind_dims(input_bufs, inputs))
        return [_gradient(buf, outs, bwd_outputs, named[buf.name]) for buf in input_bufs]

    @backward.register_fake
    def _(graph, inputs, saved, grads):
        return [torch.empty_like(t) for t in inputs]

    def setup_context(ctx, inputs, output):
        graph, feats = inputs
        ctx.save_for_backward(*graph, *feats, *output[n_outputs:])
        ctx.counts = (len(graph), len(feats))

    def grad_fn(ctx, grads):
        n_graph, n_feats = ctx.counts
        saved_tensors = ctx.saved_tensors
        graph = list(saved_tensors[:n_graph])
        feats = list(saved_tensors[n_graph:n_graph + n_feats])
        saved = list(saved_tensors[n_graph + n_feats:])
        sizes, dims = _sizes(graph), bind_dims(input_bufs, feats)
        user_grads = [g if g is not None else torch.zeros(buffer_shape(out_bufs[k], sizes, dims), dtype=dtype)
                      for k, g in enumerate(grads[:n_outputs])]
        return [None] * n_graph, backward(graph, feats, saved, user_grads)

    forward.register_autograd(grad_fn, setup_context=setup_context)
    return CompiledOp(forward, backward, input_names, output_names, saved_names)


def _gradient(buf, outs: dict[str, Tensor], available: set[str], like: Tensor) -> Tensor:
    """The gradient of one forward input from the backward program's outputs."""
    name, space = buf.name.rsplit("@", 1)
    space = Space(space)
    if space is not Space.PARAM:
        out = grad_output_name(name, space)
        return outs[out] if out in available else torch.zeros_like(like)
    total = torch.zeros_like(like)
    for bucket in (Space.DST, Space.SRC):
        out = grad_output_name(name, space, bucket)
        if out in available:
            total = total + outs[out].sum(0).reshape(like.shape)
    return total
