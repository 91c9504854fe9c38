"""The extension compiled at install time, seastar_layers._C: the layers' kernels and the torch ops
that run them (runtime/library.py).

setup.py runs the pipeline over every layer variant, compiles the kernels and generates the ops'
C++ entry points; it records, next to the extension, a fingerprint of the package files the
generated code follows from. The extension is loaded only when that fingerprint matches these
files: an extension built from another version of the compiler or of the layers' programs would
run other kernels than this code generates, so it is refused with a message saying to rebuild.

Custom programs whose generated source equals a prebuilt kernel's find it here by its hash (the
hash names its entry points), through ctypes, as JIT-built libraries are.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import importlib.util
from pathlib import Path

from .. import config

PACKAGE = Path(__file__).resolve().parents[1]
# what the generated sources follow from: the compiler (with the ops' entry points) and the layers' programs
GENERATION_INPUTS = ("compiler.py", "frontend", "ir", "passes", "codegen", "nn/programs.py")
FINGERPRINT_FILE = "_C.sources"  # written by setup.py next to the extension
REBUILD = "rebuild it: pip install --no-build-isolation -e . (or reinstall seastar_layers)"


def sources_fingerprint() -> str:
    digest = hashlib.sha256()
    for part in GENERATION_INPUTS:
        path = PACKAGE / part
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.suffix in (".py", ".h"):
                digest.update(f.relative_to(PACKAGE).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()


def _extension_path() -> Path | None:
    spec = importlib.util.find_spec("seastar_layers._C")
    return Path(spec.origin) if spec is not None and spec.origin is not None else None


@functools.lru_cache(maxsize=1)
def load_extension() -> str | None:
    """Imports seastar_layers._C (which defines the torch ops) if it matches these sources; else
    returns why it was not loaded."""
    if not config.extension_enabled():
        return "SEASTAR_NO_EXTENSION=1 is set"
    path = _extension_path()
    if path is None:
        return f"seastar_layers._C is not built; {REBUILD}"
    recorded = path.with_name(FINGERPRINT_FILE)
    if not recorded.is_file() or recorded.read_text().strip() != sources_fingerprint():
        return (f"{path.name} was built from other sources of the compiler or the layers' programs than these "
                f"(see {recorded.name}); {REBUILD}")
    importlib.import_module("seastar_layers._C")
    return None


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    if load_extension() is not None:
        return None
    return ctypes.CDLL(str(_extension_path()))


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
