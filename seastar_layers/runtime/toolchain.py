"""The compilers that build generated kernels: their flags and identity, in one place for the JIT
(runtime/jit.py) and for setup.py's prebuilt extension."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from .. import config

INCLUDE_DIR = Path(__file__).resolve().parents[1] / "codegen" / "include"  # seastar_cuda.h and the emulator

# -ffp-contract=off: a value recomputed in backward must equal, bit for bit, what forward computed
# (max/min gradients find the winning edges by equality), so no kernel may fuse a*b+c differently
# -fno-trapping-math: GCC may evaluate both sides of a select (leaky relu, a max that propagates
# NaN, the clamps of codegen/cpu.py's exp) and vectorise the loop; values are unchanged, only
# floating-point exception flags, which nothing reads, may differ.
CXX_FLAGS = ("-O3", "-std=c++17", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off")
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
        version = subprocess.run([*cxx, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"no working C++ compiler ({shlex.join(cxx)!r}: {e}); install g++ or set CXX, "
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


# The emulator runs kernels for correctness on small graphs: a light optimisation level keeps its
# (heavy) header quick to compile.
EMULATION_FLAGS = ("-O1", "-std=c++17", "-fno-math-errno", "-ffp-contract=off")
# --fmad=false: as -ffp-contract=off on the CPU, recomputed values must match bit for bit
NVCC_COMPILE_FLAGS = ("-O3", "-std=c++17", "--fmad=false", "-Xcompiler", "-fPIC")
NVCC_FLAGS = NVCC_COMPILE_FLAGS + ("-shared", "-cudart", "shared")


@functools.lru_cache(maxsize=1)
def _include_identity() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(INCLUDE_DIR.glob("*.h")))).hexdigest()


@functools.lru_cache(maxsize=1)
def nvcc_identity() -> str:
    nvcc = config.nvcc()
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError(f"no working CUDA compiler ({nvcc!r}: {e}); install the CUDA toolkit (nvcc) or set "
                         "CUDA_HOME, or use only the prebuilt layers") from None


def gencode(arch: str) -> list[str]:
    """nvcc flags for one compute capability such as "90": real code for it."""
    return ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]


@dataclass(frozen=True)
class Toolchain:
    """How the JIT turns one generated source into a shared library, for one backend.

    backend: "cpu" (the CPU dialect, g++), "cuda" (the CUDA dialect, nvcc, for `arch`) or
    "cuda-emulation" (the CUDA dialect compiled with g++ against the emulator, run on CPU tensors)."""

    backend: str
    arch: str | None = None  # compute capability for "cuda", e.g. "90"

    @property
    def target(self) -> str:
        """The dialect whose source this toolchain compiles."""
        return "cpu" if self.backend == "cpu" else "cuda"

    @property
    def tag(self) -> str:
        """Names the backend in op names (one op per program and backend)."""
        return {"cpu": "", "cuda-emulation": "emu"}.get(self.backend, f"cuda{self.arch}")

    @property
    def suffix(self) -> str:
        return ".cpp" if self.backend == "cpu" else ".cu"

    def command(self, source: Path, output: Path) -> list[str]:
        if self.backend == "cpu":
            return [*config.cxx(), *jit_cxx_flags(), str(source), "-o", str(output)]
        if self.backend == "cuda-emulation":
            return [*config.cxx(), *EMULATION_FLAGS, *SHARED_LIBRARY_FLAGS, "-x", "c++", f"-I{INCLUDE_DIR}",
                    str(source), "-o", str(output)]
        home = config.cuda_home()
        rpath = ["-Xlinker", f"-rpath={home / 'lib64'}"] if home else []  # torch has libcudart loaded where it runs
        return [config.nvcc(), *NVCC_FLAGS, *gencode(self.arch), *rpath, f"-I{INCLUDE_DIR}", str(source), "-o",
                str(output)]

    def identity(self) -> str:
        """Everything besides the source that decides the library: part of its cache key."""
        compiler = cxx_identity() if self.backend != "cuda" else nvcc_identity()
        return "\n".join([self.backend, str(self.arch), " ".join(self.command(Path("s"), Path("o"))), compiler,
                          "" if self.backend == "cpu" else _include_identity()])


CPU = Toolchain("cpu")
CUDA_EMULATION = Toolchain("cuda-emulation")


def for_device(device) -> Toolchain:
    """The toolchain for programs whose features are on `device`."""
    if device.type == "cuda":
        return _cuda_toolchain(device.index if device.index is not None else torch_cuda_current())
    if device.type == "cpu":
        return CUDA_EMULATION if config.emulate_cuda() else CPU
    raise NotImplementedError(f"compiled programs run on CPU and CUDA tensors, not on {device}")


def torch_cuda_current() -> int:
    import torch

    return torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def _cuda_toolchain(index: int) -> Toolchain:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return Toolchain("cuda", f"{major}{minor}")


# -- the CUDA build of the extension (setup.py) ------------------------------------------------
DEFAULT_CUDA_ARCHS = "8.0;9.0+PTX"  # A100, H100 (and PTX that newer GPUs compile when loading)


def cuda_arch_flags(arch_list: str | None) -> list[str]:
    """nvcc flags for an architecture list as TORCH_CUDA_ARCH_LIST spells it ("8.0;9.0+PTX", entries
    separated by ";" or spaces; DEFAULT_CUDA_ARCHS when unset): real code for each, and PTX as well
    for an entry marked +PTX."""
    flags = []
    for entry in (arch_list or DEFAULT_CUDA_ARCHS).replace(";", " ").split():
        arch, ptx = (entry[:-4], True) if entry.upper().endswith("+PTX") else (entry, False)
        if not re.fullmatch(r"\d+\.\d+a?", arch):
            raise BuildError(f"TORCH_CUDA_ARCH_LIST={arch_list!r}: {entry!r} is not a compute capability; list them "
                             f"as numbers, e.g. TORCH_CUDA_ARCH_LIST=\"{DEFAULT_CUDA_ARCHS}\"")
        number = arch.replace(".", "")
        flags += gencode(number)
        if ptx:
            flags += ["-gencode", f"arch=compute_{number},code=compute_{number}"]
    return flags


def toolkit_version() -> str | None:
    """The CUDA toolkit's version ("13.0") from `nvcc --version`, or None where no nvcc runs."""
    try:
        text = subprocess.run([config.nvcc(), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else None


MIN_TORCH = (2, 8)  # the oldest torch the extension builds against (setup.py: install_requires)


def build_compiler() -> str:
    """The C++ compiler setuptools will run for the extension: $CXX, else Python's configured one."""
    words = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
    return words[0] if words else "c++"


def check_build_environment(torch_version: str) -> None:
    """setup.py's first step: what the build needs, each missing piece one line naming the fix."""
    found = tuple(int(part) for part in re.findall(r"\d+", torch_version)[:2])
    if found < MIN_TORCH:
        raise BuildError(f"seastar_layers builds against torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer, but torch "
                         f"{torch_version} is installed; upgrade it (pip install 'torch>={MIN_TORCH[0]}."
                         f"{MIN_TORCH[1]}'), then pip install --no-build-isolation .")
    compiler = build_compiler()
    if shutil.which(compiler) is None:
        source = "$CXX" if os.environ.get("CXX") else "Python's build configuration"
        raise BuildError(f"no C++ compiler: {compiler!r} (from {source}) is not on PATH; install one (e.g. "
                         "apt-get install g++) or set CXX to a C++ compiler with OpenMP, then build again")


def build_cuda_kernels(torch_version: str, torch_cuda: str | None, toolkit: str | None) -> bool:
    """Whether setup.py builds the CUDA kernels into the extension: never with FORCE_ONLY_CPU=1;
    otherwise where torch is a CUDA build (torch_cuda, torch.version.cuda, is not None) and a CUDA
    toolkit is found (toolkit, its version, is not None), which FORCE_CUDA=1 requires. Torch and the
    toolkit must agree on CUDA's major version, or kernels built here would not load next to torch."""
    if config.force_only_cpu():
        return False
    if torch_cuda is None and config.force_cuda():
        raise BuildError(f"FORCE_CUDA=1 asks for CUDA kernels, but torch {torch_version} is a CPU build "
                         "(torch.version.cuda is None); install a CUDA build of torch first, or unset FORCE_CUDA")
    if toolkit is None and config.force_cuda():
        raise BuildError(f"FORCE_CUDA=1 asks for CUDA kernels, but no CUDA toolkit was found ({config.nvcc()!r} does "
                         "not run); set CUDA_HOME to the toolkit (e.g. CUDA_HOME=/usr/local/cuda), or unset FORCE_CUDA")
    if torch_cuda is None or toolkit is None:
        return False
    if torch_cuda.split(".")[0] != toolkit.split(".")[0]:
        raise BuildError(f"the CUDA toolkit ({config.nvcc()}) is CUDA {toolkit}, but torch {torch_version} was built "
                         f"for CUDA {torch_cuda}; their major versions must match. Point CUDA_HOME at a CUDA "
                         f"{torch_cuda.split('.')[0]} toolkit, install a torch built for CUDA {toolkit.split('.')[0]}, "
                         "or build the CPU kernels only with FORCE_ONLY_CPU=1")
    return True


def check_shared_libstdcxx(library: Path) -> None:
    """Raises BuildError where `library` carries its own copy of libstdc++ (std::locale's members,
    which libstdc++ alone defines, among its symbols). Torch loads the shared libstdc++; a second
    copy keeps a std::locale of its own, and every number the library formats (each error message,
    each index check on CUDA tensors) reaches facets that the other copy registered: the text breaks
    off, or the process dies in std::codecvt, as the extension did on the GPU machine, whose link
    added libstdc++ statically."""
    try:
        symbols = subprocess.run(["nm", "--defined-only", str(library)], capture_output=True, text=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"seastar_layers: could not list the symbols of {library.name} ({e}); its libstdc++ is not checked")
        return
    if " _ZNSt6locale" in symbols:
        raise BuildError(f"{library.name} was linked with a copy of libstdc++ of its own (it defines std::locale), "
                         "which garbles its error messages and crashes it on CUDA tensors; link libstdc++ as a "
                         "shared library: remove -static-libstdc++ from LDFLAGS (now "
                         f"{os.environ.get('LDFLAGS', '')!r}) and from the compiler's configuration, then build again")
