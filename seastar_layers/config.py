"""Every setting read from the environment, in one place."""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def cache_dir() -> Path:
    """SEASTAR_CACHE_DIR, else $XDG_CACHE_HOME/seastar_layers, else ~/.cache/seastar_layers."""
    explicit = os.environ.get("SEASTAR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "seastar_layers"


def debug() -> bool:
    """SEASTAR_DEBUG=1: print the IR after each pass, the saved tensors and the generated source."""
    return _flag("SEASTAR_DEBUG")


def force_rebuild() -> bool:
    """SEASTAR_FORCE_REBUILD=1: ignore the on-disk cache and rebuild every kernel."""
    return _flag("SEASTAR_FORCE_REBUILD")


def jit_enabled() -> bool:
    """SEASTAR_NO_JIT=1: never invoke a C++ compiler at run time (prebuilt layers still work)."""
    return not _flag("SEASTAR_NO_JIT")


def native_build() -> bool:
    """SEASTAR_NATIVE=1: tune the prebuilt extension for the building machine's CPU (it then may not
    run on other CPUs of the same architecture); by default it builds for the portable baseline."""
    return _flag("SEASTAR_NATIVE")


def cxx() -> list[str]:
    """The C++ compiler command: CXX as a command line ("ccache g++", as setuptools and make read it),
    else g++."""
    return shlex.split(os.environ.get("CXX", "")) or ["g++"]


def nvcc() -> str:
    """NVCC, else $CUDA_HOME/bin/nvcc, else nvcc on the PATH."""
    if os.environ.get("NVCC"):
        return os.environ["NVCC"]
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    return str(Path(home) / "bin" / "nvcc") if home else "nvcc"


def cuda_home() -> Path | None:
    """CUDA_HOME (or CUDA_PATH), else the toolkit nvcc belongs to, else /usr/local/cuda if present."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return Path(home)
    found = shutil.which(nvcc())
    if found and (Path(found).resolve().parent.parent / "lib64").is_dir():
        return Path(found).resolve().parent.parent
    return Path("/usr/local/cuda") if Path("/usr/local/cuda").is_dir() else None


def emulate_cuda() -> bool:
    """SEASTAR_EMULATE_CUDA=1: run programs on CPU tensors through the CUDA dialect, compiled against the
    CPU emulation of CUDA's execution model (for testing GPU kernels on machines without a GPU)."""
    return _flag("SEASTAR_EMULATE_CUDA")


def force_cuda() -> bool:
    """FORCE_CUDA=1: setup.py builds the CUDA kernels into the extension (an error if it cannot)."""
    return _flag("FORCE_CUDA")


def force_only_cpu() -> bool:
    """FORCE_ONLY_CPU=1: setup.py builds the CPU kernels only, even where it could build CUDA ones."""
    return _flag("FORCE_ONLY_CPU")


def cuda_arch_list() -> str | None:
    """TORCH_CUDA_ARCH_LIST: the GPU architectures setup.py builds CUDA kernels for (as torch's
    extensions read it, e.g. "8.0;9.0+PTX")."""
    return os.environ.get("TORCH_CUDA_ARCH_LIST") or None


def extension_enabled() -> bool:
    """SEASTAR_NO_EXTENSION=1: do not load seastar_layers._C (setup.py sets it while it builds the
    extension, which it may overwrite); the layers then raise and custom programs use the JIT."""
    return not _flag("SEASTAR_NO_EXTENSION")


# SEASTAR_SOURCE_CHUNK_BYTES: the bytes of gathered rows per chunk of a source-chunked CPU sweep
# (codegen/cstyle.py: render_source_chunks), 0 for one sweep; unset, each sweep tunes its own. The
# generated kernels read it on each call (codegen/cpu.py: SOURCE_CHUNK_HELPER), not Python.
SOURCE_CHUNK_BYTES = "SEASTAR_SOURCE_CHUNK_BYTES"
