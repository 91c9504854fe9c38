"""Calling a generated entry point: buffers are checked and allocated here, then passed as raw pointers."""
from __future__ import annotations

import ctypes
import math

import torch

from ..ir import Space
from ..ir.program import is_symbol
from ..passes.schedule import Schedule

_GRAPH_ARRAY = ctypes.c_void_p * 6
_SIZES = ctypes.c_int64 * 3


def rows(space: Space, num_src: int, num_dst: int, num_edges: int) -> int | None:
    return {Space.SRC: num_src, Space.DST: num_dst, Space.EDGE: num_edges, Space.PARAM: None}[space]


def bind_entry(lib: ctypes.CDLL, name: str):
    fn = getattr(lib, f"seastar_{name}")
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int]
    return fn


def resolve(shape, dims) -> tuple[int, ...]:
    return tuple(dims[int(d[1:])] if is_symbol(d) else d for d in shape)


def buffer_shape(buf, sizes, dims=()) -> tuple[int, ...]:
    n = rows(buf.space, *sizes)
    shape = resolve(buf.shape, dims)
    return shape if n is None else (n, *shape)


def bind_dims(buffers, tensors) -> list[int]:
    """Values of the symbols s0, s1, ... of shape-generic inputs, read off the tensors passed."""
    dims: dict[int, int] = {}
    for buf, t in zip(buffers, tensors, strict=True):
        actual = tuple(t.shape) if buf.space is Space.PARAM else tuple(t.shape[1:])
        if len(actual) != len(buf.shape):
            raise ValueError(f"input {buf.name} must have feature shape {list(buf.shape)}, got {list(actual)}")
        for want, got in zip(buf.shape, actual, strict=True):
            if is_symbol(want):
                k = int(want[1:])
                if dims.setdefault(k, got) != got:
                    raise ValueError(f"input {buf.name}: size {got} where {dims[k]} was bound by an earlier input")
            elif want != got:
                raise ValueError(f"input {buf.name} must have feature shape {list(buf.shape)}, got {list(actual)}")
    return [dims[k] for k in range(len(dims))]


# Kernels keep per-row and per-edge values in arrays on the thread's stack (8 MB by default);
# past this much, refuse with a clear error rather than let the process crash.
SCRATCH_LIMIT_BYTES = 2 * 2**20


def check_scratch(sched: Schedule, dims: list[int], dtype: torch.dtype) -> None:
    """Upper bound of the stack arrays a kernel of sched declares (every computed value counted)."""
    sizes = [math.prod(resolve(shape, dims)) for shape in sched.scratch_shapes]
    elements = sum(sizes)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if elements * itemsize > SCRATCH_LIMIT_BYTES:
        widest = max(sizes)
        raise ValueError(f"these feature sizes need about {elements * itemsize / 2**20:.1f} MB of per-row scratch in "
                         f"the fused kernel (the widest per-vertex value has {widest} elements), more than the "
                         f"{SCRATCH_LIMIT_BYTES // 2**20} MB a thread's stack holds safely; project the features to "
                         "fewer channels (e.g. apply the linear transform) before the program")


def run(entry, sched: Schedule, graph_tensors: list[torch.Tensor], sizes: tuple[int, int, int],
        inputs: dict[str, torch.Tensor], dtype: torch.dtype, dims: list[int]) -> dict[str, torch.Tensor]:
    """Run one scheduled program. inputs maps input buffer names to tensors; returns the outputs."""
    check_scratch(sched, dims, dtype)
    tensors = []
    for buf in sched.buffers:
        shape = buffer_shape(buf, sizes, dims)
        if buf.role == "input":
            t = inputs[buf.name]
            if t.dtype != dtype or not t.is_contiguous() or t.numel() != math.prod(shape):
                raise ValueError(f"internal: buffer {buf.name} expected a contiguous {dtype} tensor of shape "
                                 f"{shape}, got {t.dtype} {tuple(t.shape)}")
        elif buf.name in sched.constant_outputs:
            t = torch.full(shape, sched.constant_outputs[buf.name], dtype=dtype)
        else:
            t = torch.empty(shape, dtype=dtype)
        tensors.append(t)
    pointers = (ctypes.c_void_p * max(len(tensors), 1))(*[t.data_ptr() for t in tensors])
    numels = (ctypes.c_int64 * max(len(tensors), 1))(*[t.numel() for t in tensors])
    graph = _GRAPH_ARRAY(*[t.data_ptr() for t in graph_tensors])
    dim_array = (ctypes.c_int64 * max(len(dims), 1))(*dims)
    rc = entry(_SIZES(*sizes), dim_array, graph, pointers, numels, torch.get_num_threads())
    if rc != 0:
        buf = sched.buffers[rc - 1]
        raise ValueError(f"internal: the kernel entry refused buffer {buf.name} with {tensors[rc - 1].numel()} "
                         f"elements for sizes {sizes}")
    return {b.name: t for b, t in zip(sched.buffers, tensors, strict=True) if b.role == "output"}
