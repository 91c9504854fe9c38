"""The compilers that build generated kernels: their flags and identity, in one place for the JIT
(runtime/jit.py) and for setup.py's prebuilt extension."""
from __future__ import annotations

import functools
import platform
import subprocess

from ..errors import BuildError
from . import config

# -ffp-contract=off: a value recomputed in backward must equal, bit for bit, what forward computed
# (max/min gradients find the winning edges by equality), so no kernel may fuse a*b+c differently
CXX_FLAGS = ("-O3", "-std=c++17", "-fopenmp", "-fno-math-errno", "-ffp-contract=off")
# The JIT builds where it runs, so it tunes for this CPU; the prebuilt extension must run on any
# CPU of its architecture (a wheel travels), so it tunes only when asked (SEASTAR_NATIVE=1).
NATIVE_FLAGS = ("-march=native",)
SHARED_LIBRARY_FLAGS = ("-fPIC", "-shared")


def jit_cxx_flags() -> tuple[str, ...]:
    return CXX_FLAGS + NATIVE_FLAGS + SHARED_LIBRARY_FLAGS


def prebuilt_cxx_flags() -> list[str]:
    return [*CXX_FLAGS, *(NATIVE_FLAGS if config.native_build() else ())]


@functools.lru_cache(maxsize=1)
def cxx_identity() -> str:
    """The C++ compiler's version and the CPU it tunes for: part of every JIT cache key."""
    cxx = config.cxx()
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"no working C++ compiler ({cxx!r}: {e}); install g++ or set CXX, "
                         "or use only the prebuilt layers") from None
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features")):
                    cpu += line
                    if line.startswith(("flags", "Features")):
                        break
    except OSError:
        pass
    return f"{version}\n{cpu}"
