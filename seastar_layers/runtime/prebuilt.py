"""The kernels compiled into the package at install time (seastar_layers._C), found by source hash.

setup.py runs the same pipeline over the layers' programs and compiles what it generates; at run
time the pipeline generates the same source again, and its hash names the entry points to look
for. A missing entry (the extension is absent, or was built from another version) means the JIT
builds the kernel, or, with SEASTAR_NO_JIT=1, a clear error.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    spec = importlib.util.find_spec("seastar_layers._C")
    if spec is None or spec.origin is None:
        return None
    return ctypes.CDLL(spec.origin)


def lookup(prefix: str) -> ctypes.CDLL | None:
    """The prebuilt library if it holds the forward and backward entries of program `prefix`."""
    lib = library()
    if lib is None:
        return None
    try:
        getattr(lib, f"seastar_{prefix}forward")
        getattr(lib, f"seastar_{prefix}backward")
    except AttributeError:
        return None
    return lib
