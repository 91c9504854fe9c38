"""setup.py's decisions for the CUDA build of the extension (runtime/toolchain.py), its link against
the shared libstdc++, and, where a CUDA build of torch and the extension's CUDA kernels exist, their
registration."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seastar_layers.errors import BuildError
from seastar_layers.runtime import toolchain


@pytest.fixture
def env(monkeypatch):
    for name in ("FORCE_CUDA", "FORCE_ONLY_CPU", "TORCH_CUDA_ARCH_LIST"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_default_architectures_are_a100_and_h100_with_ptx(env):
    assert toolchain.cuda_arch_flags(None) == ["-gencode", "arch=compute_80,code=sm_80",
                                               "-gencode", "arch=compute_90,code=sm_90",
                                               "-gencode", "arch=compute_90,code=compute_90"]


@pytest.mark.parametrize("arch_list,codes", [
    ("8.0;9.0+PTX", ["sm_80", "sm_90", "compute_90"]),
    ("7.5 8.6", ["sm_75", "sm_86"]),
    ("9.0a", ["sm_90a"]),
    (" 8.9+ptx ; 12.0 ", ["sm_89", "compute_89", "sm_120"]),
])
def test_arch_lists_as_torch_spells_them(env, arch_list, codes):
    flags = toolchain.cuda_arch_flags(arch_list)
    assert flags[0::2] == ["-gencode"] * len(codes)
    assert [f.split("code=")[1] for f in flags[1::2]] == codes


@pytest.mark.parametrize("arch_list", ["Ampere", "sm_80", "8"])
def test_an_arch_list_entry_that_is_not_a_capability_is_refused(env, arch_list):
    with pytest.raises(BuildError, match=rf"TORCH_CUDA_ARCH_LIST='{arch_list}'.*not a compute capability"):
        toolchain.cuda_arch_flags(arch_list)


@pytest.mark.parametrize("torch_cuda,toolkit,built", [
    (None, None, False),      # the CPU build of torch, no toolkit: the CPU kernels only
    (None, "13.0", False),    # a toolkit alone does not make a CUDA build (this machine)
    ("13.0", None, False),    # nor a CUDA build of torch without a toolkit
    ("13.0", "13.0", True),
    ("13.0", "13.2", True),   # minor versions may differ
])
def test_cuda_kernels_are_built_where_torch_and_a_toolkit_agree(env, torch_cuda, toolkit, built):
    assert toolchain.build_cuda_kernels("2.x", torch_cuda, toolkit) is built


def test_force_only_cpu_skips_cuda(env):
    env.setenv("FORCE_ONLY_CPU", "1")
    assert toolchain.build_cuda_kernels("2.x", "13.0", "13.0") is False
    assert toolchain.build_cuda_kernels("2.x", "12.4", "13.0") is False  # and so the mismatch does not matter


def test_force_cuda_with_a_cpu_build_of_torch_says_so(env):
    env.setenv("FORCE_CUDA", "1")
    with pytest.raises(BuildError, match=r"FORCE_CUDA=1.*torch 2.13.0\+cpu is a CPU build.*install a CUDA build"):
        toolchain.build_cuda_kernels("2.13.0+cpu", None, "13.0")


def test_force_cuda_without_a_toolkit_says_where_to_point(env):
    env.setenv("FORCE_CUDA", "1")
    with pytest.raises(BuildError, match=r"no CUDA toolkit was found.*CUDA_HOME"):
        toolchain.build_cuda_kernels("2.11.0+cu130", "13.0", None)


@pytest.mark.parametrize("force", ["0", "1"])
def test_a_toolkit_of_another_major_version_is_refused(env, force):
    env.setenv("FORCE_CUDA", force)
    with pytest.raises(BuildError) as info:
        toolchain.build_cuda_kernels("2.11.0+cu130", "13.0", "12.4")
    message = str(info.value)
    assert "CUDA 12.4" in message and "built for CUDA 13.0" in message
    assert "CUDA_HOME" in message and "FORCE_ONLY_CPU=1" in message


def test_toolkit_version_reads_nvcc(env, tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    fake.chmod(0o755)
    env.setenv("NVCC", str(fake))
    assert toolchain.toolkit_version() == "13.0"
    env.setenv("NVCC", str(tmp_path / "missing"))
    assert toolchain.toolkit_version() is None


@pytest.mark.skipif(torch.version.cuda is None or toolchain.toolkit_version() is None,
                    reason="needs a CUDA build of torch and a CUDA toolkit, as the extension's CUDA build does")
def test_the_cuda_build_registers_its_kernels():
    """Built where torch is a CUDA build and a toolkit is found, the ops have CUDA kernels (no GPU needed)."""
    import seastar_layers  # noqa: F401 - loads the extension
    from seastar_layers.runtime import library

    assert library.prebuilt_cuda_kernels()  # not the JIT's CUDA implementation, registered where they are missing
    for name in ("gat_attention", "weighted_sum", "appnp_step"):
        for op in (name, f"{name}_backward"):
            for key in ("CPU", "CUDA"):
                assert torch._C._dispatch_has_kernel_for_dispatch_key(f"seastar_layers::{op}", key), (op, key)


FORMATS_A_NUMBER = '#include <sstream>\n#include <string>\nstd::string text(long v) { std::ostringstream s; s << v; return s.str(); }\n'


@pytest.mark.parametrize("static", [False, True], ids=["shared_libstdcxx", "static_libstdcxx"])
def test_a_library_with_its_own_libstdcxx_is_refused(tmp_path, static):
    """On the GPU machine the link added libstdc++ statically: the extension formatted numbers through
    its own std::locale and died in std::codecvt on CUDA tensors. The build now refuses such a library."""
    source, library = tmp_path / "formats.cpp", tmp_path / "libformats.so"
    source.write_text(FORMATS_A_NUMBER)
    flags = ["-static-libstdc++"] if static else []
    subprocess.run(["g++", "-fPIC", "-shared", *flags, str(source), "-o", str(library)], check=True)
    if static:
        with pytest.raises(BuildError, match="copy of libstdc\\+\\+ of its own.*-static-libstdc\\+\\+"):
            toolchain.check_shared_libstdcxx(library)
    else:
        toolchain.check_shared_libstdcxx(library)


def test_the_extension_uses_the_shared_libstdcxx():
    """The extension as built here (setup.py links libstdc++ by name, so shared even under
    LDFLAGS=-static-libstdc++), and its messages carry their numbers."""
    import seastar_layers as sl
    from seastar_layers import _C

    toolchain.check_shared_libstdcxx(Path(_C.__file__))
    arrays = list(sl.Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]])).tensors())
    arrays[1] = torch.tensor([0, 7], dtype=arrays[1].dtype)
    with pytest.raises(ValueError, match=r"graph\[1\] \(in_src\) holds 7 at position 1, outside \[0, 3\)"):
        torch.ops.seastar_layers.weighted_sum(arrays, torch.randn(3, 2))


# --- what the build needs, each missing piece one line naming the fix ----------------------------
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("version", ["2.4.1", "2.7.0+cu126", "1.13.1"])
def test_a_torch_older_than_the_build_supports_says_to_upgrade(monkeypatch, version):
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(BuildError, match=r"torch 2\.8 or newer, but torch .* is installed; upgrade it"):
        toolchain.check_build_environment(version)


def test_a_supported_torch_and_a_compiler_pass(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    toolchain.check_build_environment(torch.__version__)
    toolchain.check_build_environment("2.8.0")


def test_a_missing_compiler_says_how_to_get_one(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++ -pthread")
    with pytest.raises(BuildError, match=r"no C\+\+ compiler: '/nonexistent/g\+\+' \(from \$CXX\) is not on PATH; "
                                         r"install one .*or set CXX"):
        toolchain.check_build_environment(torch.__version__)


def test_setup_without_torch_says_to_install_it_first():
    script = ("import sys; sys.modules['torch'] = None; sys.argv = ['setup.py', '--name']; "
              "exec(compile(open('setup.py').read(), 'setup.py', 'exec'), {'__file__': 'setup.py', '__name__': "
              "'__main__'})")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "install torch first" in result.stderr and "--no-build-isolation" in result.stderr, result.stderr
