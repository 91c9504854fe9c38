"""The CUDA dialect without a GPU: the generated CUDA source runs on the CPU under the emulator
(seastar_layers/codegen/include/seastar_cuda_emu.h) and must match the per-vertex oracle, forward
and backward; the same source compiles with nvcc for sm_80 and sm_90.

Run a single case under another emulator schedule with SEASTAR_EMU_SEED=<n>.
"""
import itertools
import json
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close, grads, oracle, random_graph
from test_language import CASES, N, check_against_oracle

import seastar_layers as sl
from seastar_layers.codegen.cuda import SPLIT_DEGREE
from seastar_layers.nn.programs import prebuilt_variants
from seastar_layers.runtime import toolchain


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")


@pytest.mark.parametrize("fn,names", CASES, ids=[c[0].__name__ for c in CASES])
def test_language_under_emulation(emulated, fn, names):
    check_against_oracle(fn, names, random_graph(N, N, 80, seed=1), N, N)
    check_against_oracle(fn, names, random_graph(N, 9, 60, seed=2), N, 9)  # bipartite


def gat(v):
    weights = [torch.exp(F.leaky_relu(nb.el + v.er, 0.2)) for nb in v.innbs]
    total = sum(weights)
    return sum(w / total * nb.h for w, nb in zip(weights, v.innbs))


def sum_max(v):
    return sum(nb.h * v.g for nb in v.innbs), max(nb.h for nb in v.innbs)


def per_head_dot(v):  # a reduction over features per edge: lanes read each other's elements
    scores = [(nb.h * v.g).sum(-1, keepdim=True) for nb in v.innbs]
    return sum(torch.sigmoid(s) * nb.h for s, nb in zip(scores, v.innbs))


def max_dot(v):  # max's gradient compares the backward's recomputed dot products with the forward's
    return sum(nb.h for nb in v.innbs) + max((nb.h * v.g).sum(-1, keepdim=True) for nb in v.innbs)


def test_a_launch_that_fails_names_its_kernel(emulated, monkeypatch):
    """A launch CUDA refuses (here the emulator's, with 1 KiB thread stacks) fails the call with the
    kernel's name, how it was launched and CUDA's reason; the next call runs."""
    ei, h, g = random_graph(N, N, 40, seed=3), torch.randn(N, 3), torch.randn(N, 3)
    prog = sl.compile(sum_max)
    expected = prog(ei, h=h, g=g)
    monkeypatch.setenv("SEASTAR_EMU_STACK_KB", "1")
    with pytest.raises(RuntimeError, match=r"launching \w+_forward_kernel0\w* \(\d+ rows, \d+ threads a row, \d+ bytes "
                                           r"of shared memory a block\): .*SEASTAR_EMU_STACK_KB=1"):
        prog(ei, h=h, g=g)
    monkeypatch.delenv("SEASTAR_EMU_STACK_KB")
    assert all(torch.equal(a, b) for a, b in zip(prog(ei, h=h, g=g), expected))


def hub_graph(n: int, seed: int) -> torch.Tensor:
    """Random edges, destinations without in-edges, and two hubs whose edges the CUDA kernels split
    among the groups of a block: vertex 0 with more in-edges than SPLIT_DEGREE, vertex 1 with more
    out-edges (the backward's source sweeps)."""
    gen = torch.Generator().manual_seed(seed)
    degree = SPLIT_DEGREE + 3 * n
    others = torch.randint(0, n, (2, degree), generator=gen)
    edges = random_graph(n, n, 3 * n, seed=seed)
    into_hub = torch.stack([others[0], torch.zeros_like(others[0])])
    out_of_hub = torch.stack([torch.ones_like(others[1]), others[1]])
    return torch.cat([edges, into_hub, out_of_hub], dim=1)


def rounding_scale(ei: torch.Tensor, terms: int) -> float:
    """How many times a float32 tolerance set for sums of `terms` terms grows on ei's largest row: the
    bound on a sum's rounding error grows with its terms, and two orders of them differ by up to twice it."""
    return max(torch.bincount(ei[0]).max().item(), torch.bincount(ei[1]).max().item()) / terms


@pytest.mark.parametrize("width", [1, 7, 48, 300])
@pytest.mark.parametrize("fn", [gat, sum_max, per_head_dot, max_dot], ids=lambda f: f.__name__)
@pytest.mark.parametrize("generic", [False, True], ids=["exact", "generic"])
def test_odd_widths_hubs_and_empty_rows(emulated, fn, width, generic):
    n = 40
    ei = hub_graph(n, seed=width)
    gen = torch.Generator().manual_seed(width)
    heads = 3 if width != 300 else 1

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()

    feats = {"el": r(n, heads, 1), "er": r(n, heads, 1), "h": r(n, heads, width), "g": r(n, heads, width)}
    used = {k: feats[k] for k in {"gat": ("el", "er", "h")}.get(fn.__name__, ("h", "g"))}
    out = sl.compile(fn, generic_shapes=generic)(ei, **used)
    expected = oracle(fn, ei, n, out, **used)
    assert_close(out, expected)
    assert_close(grads(out, list(used.values())), grads(expected, list(used.values())))


def neighbour_sum(v):
    return sum(nb.h for nb in v.innbs)


@pytest.mark.parametrize("degree", [SPLIT_DEGREE - 32, 8 * SPLIT_DEGREE])
def test_a_hubs_edges_are_split_among_the_groups_of_a_block(emulated, monkeypatch, tmp_path, degree):
    """A row of SPLIT_DEGREE edges or more is its block's: each of the block's 8 groups (64-wide rows, a warp
    each) sweeps an eighth of its edges, so the busiest warp requests about an eighth of the sectors; below
    SPLIT_DEGREE one warp takes the row. The sums equal torch's either way."""
    n = 64
    gen = torch.Generator().manual_seed(degree)
    into_hub = torch.stack([torch.randint(0, n, (degree,), generator=gen), torch.zeros(degree, dtype=torch.long)])
    ei = torch.cat([into_hub, random_graph(n, n, n, seed=degree)], dim=1)
    assert (torch.bincount(ei[1]).max() >= SPLIT_DEGREE) == (degree >= SPLIT_DEGREE)
    h = torch.randn(n, 64, generator=gen, dtype=torch.float64)
    traffic = tmp_path / "traffic.jsonl"
    monkeypatch.setenv("SEASTAR_EMU_TRAFFIC", str(traffic))
    out = sl.compile(neighbour_sum)(ei, h=h)
    expected = torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]])
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    (launch,) = [json.loads(line) for line in traffic.read_text().splitlines()]
    busiest = launch["max_warp_sectors"] / launch["requested_sectors"]
    assert (busiest < 1.5 / 8) if degree >= SPLIT_DEGREE else (busiest > 0.5), launch


def test_both_index_dtypes_under_emulation(emulated):
    """The CUDA kernels read a graph's int32 arrays (what Graph builds) and int64 ones (what DGL may
    share) alike: the same bits, forward and backward, on a graph with a hub and empty rows."""
    n = 40
    narrow = sl.Graph.from_edge_index(hub_graph(n, seed=5), n)
    wide = sl.Graph._from_checked([t.long() for t in narrow.tensors()], n, n)
    assert narrow.in_src.dtype == torch.int32 and wide.in_src.dtype == torch.int64
    gen = torch.Generator().manual_seed(5)
    feats = {name: torch.randn(n, 3, width, generator=gen, dtype=torch.float64).requires_grad_()
             for name, width in (("el", 1), ("er", 1), ("h", 7))}
    prog = sl.compile(gat)
    outs = [prog(graph, **feats) for graph in (narrow, wide)]
    assert torch.equal(outs[0], outs[1])
    for got, want in zip(grads(outs[0], list(feats.values())), grads(outs[1], list(feats.values())), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_schedules_of_the_emulator(emulated, monkeypatch, seed):
    """Other block and thread orders: a missing sync would show up as a wrong result for some seed."""
    monkeypatch.setenv("SEASTAR_EMU_SEED", str(seed))
    check_against_oracle(per_head_dot, ["h", "g"], random_graph(N, N, 80, seed=seed), N, N)


def layer_program_inputs(example: dict, n: int, num_edges: int, gen, heads: int = 3, channels: int = 7) -> dict:
    """Random features in the declared shapes of a prebuilt variant's example: vertex rows -> n,
    edge rows -> num_edges, heads 2 -> `heads`, channels 3 -> `channels` (by default odd sizes,
    unlike the examples'; 8 and 8 take GAT's fast path)."""
    rows = {3: n, 4: num_edges}
    trailing = {2: heads, 3: channels, 1: 1}
    return {name: torch.randn(rows[t.shape[0]], *(trailing[d] for d in t.shape[1:]), generator=gen,
                              dtype=t.dtype).requires_grad_()
            for name, t in example.items()}


def test_layer_programs_under_emulation(emulated, monkeypatch):
    """Every float32 variant of the layers prebuilt for CUDA (GAT with each option, attention weights
    included; GCN's and APPNP's sums; SAGE's means and maxima), CUDA dialect under the emulator
    against the prebuilt CPU kernel, on a graph with a hub and rows without in-edges; forward, and
    gradients where the variant has a backward (GAT's with for_backward); at odd sizes and at GAT's
    fast path (8 heads of 8 channels)."""
    n = 40
    ei = hub_graph(n, seed=3)
    every_dtype = list(prebuilt_variants("cuda"))
    variants = [(v[3], v[4]) for v in every_dtype if v[2] == torch.float32]
    assert len(variants) * 4 == len(every_dtype)  # one of the four dtypes
    for (program, example), (heads, channels) in itertools.product(variants, [(3, 7), (8, 8)]):
        feats = layer_program_inputs(example, n, ei.shape[1], torch.Generator().manual_seed(len(example)),
                                     heads, channels)
        recorded = program.for_backward is not False  # a variant with for_backward off has no backward
        with torch.set_grad_enabled(recorded):
            torch.manual_seed(0)  # attention dropout: both dialects draw the same bits from one seed
            emulated_out = program(ei, **feats)
            monkeypatch.delenv("SEASTAR_EMULATE_CUDA")
            torch.manual_seed(0)
            cpu_out = program(ei, **feats)
            monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
        inputs = list(feats.values())
        # the dialects sum in different orders (the CUDA one splits the hubs' edges among groups): float32's
        # tolerances (torch.testing's), set for hubs of 4n terms
        terms = rounding_scale(ei, 4 * n)
        assert_close(emulated_out, cpu_out, atol=1e-5 * terms, rtol=1.3e-6 * terms)
        if recorded:
            assert_close(grads(emulated_out, inputs), grads(cpu_out, inputs), atol=1e-5 * terms, rtol=1.3e-6 * terms)


HALF_TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 6e-2}


@pytest.mark.parametrize("backend", ["cpu", "cuda-emulation"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_accumulates_in_float32(monkeypatch, backend, dtype):
    if backend == "cuda-emulation":
        monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    n = 30
    ei = hub_graph(n, seed=5)
    gen = torch.Generator().manual_seed(5)
    feats = {"el": torch.randn(n, 2, 1, generator=gen), "er": torch.randn(n, 2, 1, generator=gen),
             "h": torch.randn(n, 2, 7, generator=gen)}
    half = {k: v.to(dtype).requires_grad_() for k, v in feats.items()}
    out = sl.compile(gat)(ei, **half)
    assert out.dtype == dtype
    wide = {k: v.detach().double().requires_grad_() for k, v in half.items()}  # the same (rounded) inputs
    expected = oracle(gat, ei, n, out.double(), **wide)
    tol = HALF_TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)
    projection = torch.randn(out.shape, generator=gen, dtype=torch.float64)  # one loss for both
    got = torch.autograd.grad((out * projection.to(dtype)).sum(), list(half.values()))
    want = torch.autograd.grad((expected * projection).sum(), list(wide.values()))
    for g_half, g_wide in zip(got, want):
        assert g_half.dtype == dtype
        torch.testing.assert_close(g_half.double(), g_wide, atol=tol * 4, rtol=tol * 4)


def test_fast_path_kernels_take_their_width_and_scratch_as_constants():
    """GAT's 8 x 8 kernels know their group width (constexpr lanes, the launch's own: 32 for 64-wide
    rows) and keep scratch in shared memory only, with no global-scratch branch at their launch; the
    generic kernels read both at run time. Inputs a kernel only reads are const, and every kernel is
    held to 64 registers (float32)."""
    variant = next(v for v in prebuilt_variants("cuda") if v[0].name == "gat_attention" and v[2] == torch.float32
                   and set(v[1]) == {"a_dst"})
    source = variant[3].source("cuda", **variant[4])
    kernels = re.split(r"(?=__global__ void)", source)[1:]
    fast = [k for k in kernels if re.search(r"_fast\d+\(", k.split("\n", 1)[0])]
    generic = [k for k in kernels if k not in fast]
    assert fast and generic
    for kernel in fast:
        assert "constexpr int lanes = 32;" in kernel
        assert "p.scratch != nullptr" not in kernel
    for kernel in generic:
        assert "const int lanes = p.lanes;" in kernel
    for kernel in kernels:
        assert kernel.startswith("__global__ void __launch_bounds__(256, 4)")
        assert re.search(r"const scalar_t\* __restrict__ b\d+ = \(const scalar_t\*\)p\.buffers\[\d+\];  // feature:x@",
                         kernel)
    fast_launches = source.split("// fast path 0")[1].split("\n  }\n")[0]
    assert "cudaMallocAsync" not in fast_launches and "p.lanes = lanes;" in fast_launches


# --- nvcc: every generated kernel compiles for the GPUs we build for ----------------------------
NVCC = shutil.which(toolchain.config.nvcc())


def layer_and_language_sources() -> list[str]:
    sources = []
    for *_, program, features in prebuilt_variants("cuda"):
        sources.append(program.source("cuda", **features))
    from test_language import features as language_features

    feats = language_features(torch.float32, N, N, 80)
    for fn, names in CASES:
        sources.append(sl.compile(fn).source("cuda", **{k: feats[k] for k in names}))
    return list(dict.fromkeys(sources))  # variants the options leave the same share one kernel, as in setup.py


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_generated_kernel_compiles_with_nvcc(tmp_path):
    """The layers' prebuilt variants and the language tests' programs, for sm_80 and sm_90: ptxas
    errors fail; registers and spills are reported (pytest -s shows them)."""
    sources = layer_and_language_sources()
    units = []
    for part in range(0, len(sources), 30):
        unit = tmp_path / f"unit{part}.cu"
        unit.write_text("\n".join(sources[part:part + 30]))
        units.append(unit)

    def compile_unit(unit):
        cmd = [NVCC, "-c", "-std=c++17", "--fmad=false", "-Xptxas", "-v", *toolchain.gencode("80"),
               *toolchain.gencode("90"), f"-I{toolchain.INCLUDE_DIR}", str(unit), "-o", str(unit.with_suffix(".o"))]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=900)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_unit, units))
    stats = {"80": [], "90": []}
    for result in results:
        assert result.returncode == 0, result.stderr[-4000:]
        for arch, spill, registers in re.findall(r"for 'sm_(\d+)'.*?(\d+) bytes spill stores.*?Used (\d+) registers",
                                                 result.stderr, flags=re.S):
            stats[arch].append((int(spill), int(registers)))
    kernels = sum(s.count("__global__") for s in sources)
    for arch, found in stats.items():
        assert len(found) == kernels, f"sm_{arch}: ptxas reported {len(found)} of {kernels} kernels"
        print(f"sm_{arch}: {kernels} kernels, {min(r for _, r in found)}-{max(r for _, r in found)} registers, "
              f"{sum(1 for s, _ in found if s)} with spills ({sum(s for s, _ in found)} bytes of spill stores)")


# --- device limits from the device ---------------------------------------------------------------
@pytest.mark.parametrize("optin_kb", [99, 163, 227], ids=["sm_86", "sm_80", "sm_90"])
def test_rows_wider_than_the_devices_shared_memory_take_global_scratch(monkeypatch, optin_kb):
    """GAT at 4 heads x 256 channels wants about 199 KB of shared memory a block in its backward: a
    device that allows less (sm_80's 163 KB, sm_86's 99 KB) gives the kernels global scratch, read
    from the device (cudaDevAttrMaxSharedMemoryPerBlockOptin), instead of failing the launch."""
    n = 12
    ei = hub_graph(n, seed=4)
    gen = torch.Generator().manual_seed(4)
    feats = {"el": torch.randn(n, 4, 1, generator=gen), "er": torch.randn(n, 4, 1, generator=gen),
             "h": torch.randn(n, 4, 256, generator=gen)}
    program = sl.compile(gat)
    assert "seastar_shared_optin()" in program.source("cuda", **feats)
    cpu = {k: v.clone().requires_grad_() for k, v in feats.items()}
    cpu_out = program(ei, **cpu)
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    monkeypatch.setenv("SEASTAR_EMU_SHARED_OPTIN_KB", str(optin_kb))
    emulated = {k: v.clone().requires_grad_() for k, v in feats.items()}
    out = program(ei, **emulated)
    # float32 (in float64 every device's shared memory is too small): sums in another order; tolerances set for
    # hubs of 4n terms
    tolerance = 1e-5 * rounding_scale(ei, 4 * n)
    torch.testing.assert_close(out, cpu_out, atol=tolerance, rtol=tolerance)
    for got, want in zip(grads(out, list(emulated.values())), grads(cpu_out, list(cpu.values())), strict=True):
        torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance)
