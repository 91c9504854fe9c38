"""Importing DGL, the one place that works around its packaging.

DGL 2.1.0, the newest with Linux wheels on PyPI, imports its `graphbolt` subpackage eagerly, and
graphbolt fails with a torch newer than DGL's wheels were built for (its native library is missing
for that torch, or torchdata no longer ships the datapipes it needs). Nothing seastar_layers uses
lives in graphbolt, so when - and only when - the plain import fails there, we register an empty
`dgl.graphbolt` module and import again. The rest of DGL (graphs, blocks, dgl.nn, samplers and
data loaders) works; `dgl.graphbolt` itself is then unavailable.
"""
from __future__ import annotations

import importlib
import sys
import types
import warnings

_state = {"patched": False}


def _purge_dgl() -> None:
    for name in [m for m in sys.modules if m == "dgl" or m.startswith("dgl.")]:
        del sys.modules[name]


def import_dgl():
    """Return the dgl module, working around a broken graphbolt if the plain import fails there."""
    if "dgl" in sys.modules and hasattr(sys.modules["dgl"], "DGLGraph"):
        return sys.modules["dgl"]
    try:
        return importlib.import_module("dgl")
    except ImportError as e:
        if "dgl" not in str(e) and "torchdata" not in str(e) and "graphbolt" not in str(e):
            raise
        first_error = e
    except FileNotFoundError as e:  # graphbolt's missing native library
        if "graphbolt" not in str(e):
            raise
        first_error = e
    _purge_dgl()
    sys.modules["dgl.graphbolt"] = types.ModuleType("dgl.graphbolt")
    try:
        dgl = importlib.import_module("dgl")
    except Exception as e:
        del sys.modules["dgl.graphbolt"]
        raise ImportError(f"DGL failed to import ({first_error}), and also without graphbolt ({e}); install a DGL "
                          "build that matches your torch") from e
    _restore_ffi_object_base(dgl)
    _state["patched"] = True
    warnings.warn(f"dgl.graphbolt is unavailable with this torch ({type(first_error).__name__}: {first_error}); "
                  "seastar_layers imported DGL without it", RuntimeWarning, stacklevel=2)
    return dgl


def _restore_ffi_object_base(dgl) -> None:
    """DGL's compiled FFI core initialises once per process, and that is where it gives
    dgl._ffi.object_generic its object base class; the second import made that module anew, without
    it (and then dgl.save_graphs and dgl.load_graphs fail with a TypeError)."""
    ffi = getattr(dgl, "_ffi", None)
    if ffi is not None and ffi.object_generic._CLASS_OBJECT_BASE is None:
        ffi.object_generic._set_class_object_base(ffi.object._ObjectBase)


def graphbolt_was_stubbed() -> bool:
    return _state["patched"]
