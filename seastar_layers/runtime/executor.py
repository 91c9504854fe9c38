"""Calling a generated entry point: buffers are checked and allocated here, then passed as raw pointers."""
from __future__ import annotations

import ctypes
import math

import torch

from ..base import COMPUTE_DTYPE
from ..ir import BufferKey, Space
from ..ir.program import is_symbol
from ..passes.schedule import Buffer, Schedule

GRAPH_SLOTS = 8  # as codegen/cstyle.py: in-CSR, out-CSR, row orders
_GRAPH_ARRAY = ctypes.c_void_p * GRAPH_SLOTS
_SIZES = ctypes.c_int64 * 4  # vertices, destinations, edges, bytes per graph index


SERIAL_WORK = 32768  # elements: torch's grain size (at::internal::GRAIN_SIZE)


def threads_for(work: int) -> int:
    """Threads for a CPU kernel touching `work` elements: one below torch's grain size, where a
    parallel region costs more than the kernel (on a busy machine far more); as csrc/seastar_ops.h."""
    return 1 if work < SERIAL_WORK else torch.get_num_threads()


def rows(space: Space, num_src: int, num_dst: int, num_edges: int) -> int | None:
    return {Space.SRC: num_src, Space.DST: num_dst, Space.EDGE: num_edges, Space.PARAM: None}[space]


class Entry:
    """One generated entry point and the library's error message function."""

    def __init__(self, lib: ctypes.CDLL, prefix: str, name: str):
        self.fn = getattr(lib, f"seastar_{prefix}{name}")
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_void_p]
        self.last_error = getattr(lib, f"seastar_{prefix}last_error")
        self.last_error.restype = ctypes.c_char_p
        self.last_error.argtypes = []


def resolve(shape, dims) -> tuple[int, ...]:
    return tuple(dims[int(d[1:])] if is_symbol(d) else d for d in shape)


def buffer_shape(buf: Buffer, sizes, dims=()) -> tuple[int, ...]:
    n = rows(buf.rows, *sizes)
    shape = resolve(buf.shape, dims)
    return shape if n is None else (n, *shape)


def buffer_dtype(buf: Buffer, dtype: torch.dtype) -> torch.dtype:
    if buf.c_type == "int64_t":
        return torch.int64
    return COMPUTE_DTYPE[dtype] if buf.in_compute_type else dtype


def bind_dims(buffers: list[Buffer], tensors) -> list[int]:
    """Values of the symbols s0, s1, ... of shape-generic inputs, read off the tensors passed."""
    dims: dict[int, int] = {}
    for buf, t in zip(buffers, tensors, strict=True):
        actual = tuple(t.shape) if buf.rows is Space.PARAM else tuple(t.shape[1:])
        if len(actual) != len(buf.shape):
            raise ValueError(f"input {buf.key!r} must have feature shape {list(buf.shape)}, got {list(actual)}")
        for want, got in zip(buf.shape, actual, strict=True):
            if is_symbol(want):
                k = int(want[1:])
                if dims.setdefault(k, got) != got:
                    raise ValueError(f"input {buf.key!r}: size {got} where {dims[k]} was bound by an earlier input")
            elif want != got:
                raise ValueError(f"input {buf.key!r} must have feature shape {list(buf.shape)}, got {list(actual)}")
    return [dims[k] for k in range(len(dims))]


def run(entry: Entry, sched: Schedule, graph_tensors: list[torch.Tensor], sizes: tuple[int, int, int],
        inputs: dict[BufferKey, torch.Tensor], dtype: torch.dtype, dims: list[int]) -> dict[BufferKey, torch.Tensor]:
    """Run one scheduled program. inputs maps input buffers to tensors; returns the outputs."""
    device = graph_tensors[0].device
    tensors = []
    for buf in sched.buffers:
        shape = buffer_shape(buf, sizes, dims)
        want = buffer_dtype(buf, dtype)
        if buf.is_input:
            t = inputs[buf.key]
            if t.dtype != want or not t.is_contiguous() or t.numel() != math.prod(shape):
                raise ValueError(f"internal: buffer {buf.key!r} expected a contiguous {want} tensor of shape "
                                 f"{shape}, got {t.dtype} {tuple(t.shape)}")
        elif buf.key in sched.constant_outputs:
            t = torch.full(shape, sched.constant_outputs[buf.key], dtype=want, device=device)
        else:
            t = torch.empty(shape, dtype=want, device=device)
        tensors.append(t)
    pointers = (ctypes.c_void_p * max(len(tensors), 1))(*[t.data_ptr() for t in tensors])
    numels = (ctypes.c_int64 * max(len(tensors), 1))(*[t.numel() for t in tensors])
    graph = _GRAPH_ARRAY(*[t.data_ptr() if t is not None else None for t in graph_tensors])
    dim_array = (ctypes.c_int64 * max(len(dims), 1))(*dims)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    index_bytes = graph_tensors[0].element_size()
    rc = entry.fn(_SIZES(*sizes, index_bytes), dim_array, graph, pointers, numels, threads_for(sizes[2] + sum(numels)),
                  stream)
    if rc > 0:
        buf = sched.buffers[rc - 1]
        raise ValueError(f"internal: the kernel entry refused buffer {buf.key!r} with {tensors[rc - 1].numel()} "
                         f"elements for sizes {sizes}")
    if rc < 0:
        message = entry.last_error().decode()
        raise (MemoryError if rc == -1 else RuntimeError)(f"seastar_layers kernel failed: {message}")
    return {b.key: t for b, t in zip(sched.buffers, tensors, strict=True) if not b.is_input}
