"""Measuring what the layers save: peak allocator memory and bytes kept for backward."""
from __future__ import annotations

import contextlib
import os
import sys

import torch


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side prints start/stop lines straight to fd 2; keep them off the user's screen."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_allocated_bytes(step) -> int:
    """Peak bytes held by torch's CPU allocator during step(), beyond what was held before it."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    current = peak = 0
    for evt in sorted(prof.events(), key=lambda e: e.time_range.start):
        current += getattr(evt, "cpu_memory_usage", 0) or 0
        peak = max(peak, current)
    return peak


def saved_for_backward_bytes(forward) -> int:
    """Bytes of the tensors autograd keeps between forward() and backward() (shared storage counted once)."""
    seen: dict = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    del out
    return sum(seen.values())
