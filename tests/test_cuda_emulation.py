"""The CUDA emulator (seastar_layers/codegen/include/seastar_cuda_emu.h), which runs the same .cu
sources the GPU runs on the CPU: every primitive against a Python model of what the GPU does, the
lane-stride and barrier bugs it must expose, the misuse it must report (in a child process, so
that a hang or a crash fails the test instead of the run), and the same test kernels through nvcc
for sm_80 and sm_90."""
from __future__ import annotations

import ctypes
import json
import math
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from helpers import random_graph

import seastar_layers
from seastar_layers import config
from seastar_layers.runtime import toolchain

INCLUDE = Path(seastar_layers.__file__).parent / "codegen" / "include"
KERNELS = Path(__file__).parent / "cuda"
SOURCES = ("primitives", "bugs", "halfs")
# the JIT's own flags, so that the header is tested as generated kernels will be built, and warnings fail
CXX_COMMAND = [*config.cxx(), *toolchain.jit_cxx_flags(), "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", "-x", "c++"]
POISON = 0xFFFFFFFF
ILLEGAL_ADDRESS, ILLEGAL_INSTRUCTION, INVALID_CONFIGURATION, INVALID_VALUE = 700, 715, 9, 1


def _c_arg(value):
    if isinstance(value, torch.Tensor):
        return ctypes.c_void_p(value.data_ptr())
    if isinstance(value, int):
        return ctypes.c_uint(value) if value >= 2**31 else ctypes.c_int(value)
    return value


class Kernels:
    """One compiled test file; its entry points take tensors and numbers and return a cudaError_t."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.error_string.restype = ctypes.c_char_p

    def status(self, entry: str, *args) -> tuple[int, str]:
        code = getattr(self.lib, entry)(*map(_c_arg, args))
        return code, self.lib.error_string(code).decode() if code else ""

    def __call__(self, entry: str, *args) -> None:
        code, message = self.status(entry, *args)
        assert code == 0, message


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("cuda-emulation")

    def build(name: str) -> tuple[Path, str]:
        target = out / f"{name}.so"
        result = subprocess.run([*CXX_COMMAND, str(KERNELS / f"{name}.cu"), "-o", str(target)],
                                capture_output=True, text=True)
        return target, result.stderr if result.returncode else ""

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(SOURCES, pool.map(build, SOURCES)))
    failures = {name: err for name, (_, err) in results.items() if err}
    assert not failures, "\n".join(f"g++ failed on tests/cuda/{n}.cu:\n{e}" for n, e in failures.items())
    return {name: path for name, (path, _) in results.items()}


@pytest.fixture(scope="module")
def primitives(built) -> Kernels:
    return Kernels(built["primitives"])


@pytest.fixture(scope="module")
def bugs(built) -> Kernels:
    return Kernels(built["bugs"])


@pytest.fixture(scope="module")
def halfs(built) -> Kernels:
    return Kernels(built["halfs"])


def bits(t: torch.Tensor) -> torch.Tensor:
    """The storage as integers, for bit-for-bit comparisons."""
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def unsigned(t: torch.Tensor) -> torch.Tensor:
    """int32 storage read as unsigned, for comparisons with Python ints."""
    return t.to(torch.int64) & 0xFFFFFFFF


# ---- indexing and block order -------------------------------------------------------------------
@pytest.mark.parametrize("stride,sectors", [(0, 1), (1, 4), (2, 8), (8, 32), (16, 32)])
def test_traffic_counts_the_sectors_each_warp_instruction_touches(primitives, monkeypatch, tmp_path, stride,
                                                                   sectors):
    """SEASTAR_EMU_TRAFFIC: the lanes of a warp at the same pass of the same line are one instruction,
    which requests each 32-byte sector they touch once (32 floats a lane apart: 32 sectors; side by
    side: 4); a loop's next pass is another instruction; distinct sectors count each once a launch.
    Unset, nothing is counted or written."""
    blocks, threads, repeats = 3, 64, 2
    n = blocks * threads
    x = torch.arange(n * max(stride, 1), dtype=torch.float32)
    out = torch.zeros(n)
    path = tmp_path / "traffic.jsonl"
    monkeypatch.delenv("SEASTAR_EMU_TRAFFIC", raising=False)
    primitives("run_strided_reads", x, out, stride, repeats, blocks, threads)
    assert not path.exists()
    monkeypatch.setenv("SEASTAR_EMU_TRAFFIC", str(path))
    primitives("run_strided_reads", x, out, stride, repeats, blocks, threads)
    assert torch.equal(out, repeats * x[torch.arange(n) * stride])
    (launch,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert "strided_reads" in launch["kernel"] and launch["warps"] == n // 32
    per_warp = repeats * sectors + 4  # and the 32 floats it writes side by side
    assert launch["max_warp_sectors"] == per_warp
    assert launch["requested_sectors"] == n // 32 * per_warp
    read = {(x.data_ptr() + 4 * t * stride) // 32 for t in range(n)}
    written = {(out.data_ptr() + 4 * t) // 32 for t in range(n)}
    assert launch["distinct_sectors"] == len(read | written)
    assert sum(launch["by_line"].values()) == launch["requested_sectors"] and len(launch["by_line"]) == 2


@pytest.mark.parametrize("grid,block", [((3, 1, 1), (50, 1, 1)), ((2, 3, 1), (8, 4, 1)), ((2, 2, 3), (4, 2, 3))],
                         ids=["1d", "2d", "3d"])
def test_grid_and_block_indices(primitives, grid, block):
    blocks, threads = math.prod(grid), math.prod(block)
    out = torch.full((blocks * threads, 12), -1, dtype=torch.int32)
    primitives("run_indices", out, *grid, *block)
    expected = []
    for bz in range(grid[2]):
        for by in range(grid[1]):
            for bx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            expected.append([tx, ty, tz, bx, by, bz, *block, *grid])
    assert out.tolist() == expected


def test_blocks_run_in_a_seeded_random_order(primitives, monkeypatch):
    def order(seed: int) -> list[int]:
        monkeypatch.setenv("SEASTAR_EMU_SEED", str(seed))
        counter, seen = torch.zeros(1, dtype=torch.int32), torch.full((64,), -1, dtype=torch.int32)
        primitives("run_block_order", counter, seen, 64)
        return seen.tolist()

    first, again, other = order(1), order(1), order(2)
    assert sorted(first) == list(range(64)) and sorted(other) == list(range(64))
    assert first == again, "the same seed must give the same schedule"
    assert first != other and first != sorted(first)


def test_bad_seed_is_refused(primitives, monkeypatch):
    monkeypatch.setenv("SEASTAR_EMU_SEED", "twelve")
    code, message = primitives.status("run_block_order", torch.zeros(1, dtype=torch.int32),
                                      torch.zeros(4, dtype=torch.int32), 4)
    assert code == INVALID_VALUE and "SEASTAR_EMU_SEED=twelve" in message


# ---- barriers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [32, 64, 256, 1024])
def test_block_reduction_with_syncthreads(primitives, monkeypatch, threads):
    n = 3 * threads + 5
    x = torch.arange(n, dtype=torch.float32) % 97  # integers: every summation order is exact
    blocks = -(-n // threads)
    for seed in range(3):
        monkeypatch.setenv("SEASTAR_EMU_SEED", str(seed))
        out = torch.full((blocks,), math.nan)
        primitives("run_block_sum", x, out, n, threads)
        expected = torch.nn.functional.pad(x, (0, blocks * threads - n)).view(blocks, threads).sum(1)
        assert torch.equal(out, expected)


def test_threads_returning_before_the_first_barrier_stop_counting(primitives, monkeypatch):
    x = torch.arange(64, dtype=torch.float32)
    for seed in range(3):
        monkeypatch.setenv("SEASTAR_EMU_SEED", str(seed))
        out = torch.full((64,), math.nan)
        primitives("run_early_return", x, out, 64, 40)
        assert torch.equal(out[:40], x[:40].roll(-1)) and out[40:].isnan().all()


def group_ring_model(x: list[int]) -> list[int]:
    """group_ring in primitives.cu as the GPU computes it: each group of 8 lanes rotates its values
    (plus one) as many times as its trip count."""
    out = list(x)
    for base in range(0, len(x), 8):
        lane, warp = base % 32, base // 32
        for _ in range(lane // 8 + 1 + warp % 2):
            out[base:base + 8] = [out[base + (i + 1) % 8] + 1 for i in range(8)]
    return out


def test_syncwarp_on_partial_masks(primitives, monkeypatch):
    x = torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    expected = group_ring_model(x.tolist())
    wrong_without_sync = 0
    for seed in range(5):
        monkeypatch.setenv("SEASTAR_EMU_SEED", str(seed))
        out = torch.zeros(64, dtype=torch.int32)
        primitives("run_group_ring", x, out, 64, 1)
        assert out.tolist() == expected, f"seed {seed}"
        primitives("run_group_ring", x, out, 64, 0)
        wrong_without_sync += out.tolist() != expected
    assert wrong_without_sync > 0, "dropping the __syncwarp calls went unnoticed for every seed"


# ---- shuffles -----------------------------------------------------------------------------------
IDX, UP, DOWN, XOR = range(4)


def shuffle_source(kind: int, lane: int, operand: int, width: int) -> int:
    """The lane a shuffle reads, per PTX's shfl.sync: CUDA passes c = (32 - width) << 8, or'ed with
    a clamp of 31 except for up; a source out of the lane's range means the lane's own value."""
    b, segmask = operand & 31, (32 - width) & 31
    clamp = 0 if kind == UP else 31
    max_lane, min_lane = (lane & segmask) | (clamp & ~segmask & 31), lane & segmask
    j = {IDX: min_lane | (b & ~segmask & 31), UP: lane - b, DOWN: lane + b, XOR: lane ^ b}[kind]
    in_range = j >= max_lane if kind == UP else j <= max_lane
    return j if in_range else lane


def test_shuffle_model_follows_the_cuda_guide():
    # the programming guide's words for width 8: segments of 8 lanes; srcLane is taken modulo the
    # width; up/down outside the segment keep their own value; xor may read earlier segments only
    assert shuffle_source(IDX, 13, 10, 8) == 10 and shuffle_source(IDX, 13, 3, 8) == 11
    assert shuffle_source(DOWN, 6, 3, 8) == 6 and shuffle_source(DOWN, 4, 3, 8) == 7
    assert shuffle_source(UP, 9, 2, 8) == 9 and shuffle_source(UP, 11, 2, 8) == 9
    assert shuffle_source(XOR, 9, 8, 8) == 1 and shuffle_source(XOR, 1, 8, 8) == 1
    assert shuffle_source(DOWN, 20, 16, 32) == 20 and shuffle_source(XOR, 20, 16, 32) == 4


SHUFFLE_TYPES = {  # entry point suffix: the dtype holding its values (unsigned in signed: compared bit for bit)
    "int32": torch.int32, "uint32": torch.int32, "int64": torch.int64, "uint64": torch.int64,
    "float32": torch.float32, "float64": torch.float64,
}


@pytest.mark.parametrize("type_name", list(SHUFFLE_TYPES))
def test_shuffles_match_the_hardware_model(primitives, type_name):
    dtype = SHUFFLE_TYPES[type_name]
    gen = torch.Generator().manual_seed(1)
    if dtype.is_floating_point:
        values = torch.randn(64, generator=gen, dtype=dtype) * 10.0 ** torch.randint(-30, 30, (64,), generator=gen)
    else:
        info = torch.iinfo(dtype)
        values = torch.randint(info.min, info.max, (64,), generator=gen, dtype=dtype)
    operands = torch.randint(-40, 41, (64,), generator=gen, dtype=torch.int32)
    cases = [(0xFFFFFFFF, width) for width in (1, 2, 4, 8, 16, 32)] + [(0x0000FFFF, w) for w in (1, 4, 16)]
    for kind in (IDX, UP, DOWN, XOR):
        for mask, width in cases:
            out = torch.zeros_like(values)
            primitives(f"run_shuffle_{type_name}", kind, mask, values, operands, width, out, 64)
            lanes = [t for t in range(64) if mask >> (t % 32) & 1]
            sources = [t - t % 32 + shuffle_source(kind, t % 32, int(operands[t]), width) for t in lanes]
            assert torch.equal(bits(out[lanes]), bits(values[sources])), f"kind {kind} mask {mask:#x} width {width}"


# ---- votes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask,threads", [(0xFFFFFFFF, 64), (0x00FF00F0, 64), (0xF0, 40)])
def test_votes_and_activemask(primitives, mask, threads):
    predicate = torch.tensor([(0, 1, 5, -1, 0, 0, 1)[(t * 5) % 7] for t in range(threads)], dtype=torch.int32)
    ballot, active = torch.zeros(threads, dtype=torch.int32), torch.zeros(2 * threads, dtype=torch.int32)
    any_, all_ = torch.full((threads,), -1, dtype=torch.int32), torch.full((threads,), -1, dtype=torch.int32)
    primitives("run_vote", mask, predicate, ballot, any_, all_, active, threads)
    for t in range(threads):
        lane, base = t % 32, t - t % 32
        lanes = min(32, threads - base)
        existing = (1 << lanes) - 1
        assert unsigned(active[t]) == existing
        if not mask >> lane & 1:
            continue
        votes = sum(1 << i for i in range(32) if mask >> i & 1 and predicate[base + i] != 0)
        assert unsigned(ballot[t]) == votes
        assert any_[t] == (votes != 0) and all_[t] == (votes == mask)
        assert unsigned(active[threads + t]) == mask


# ---- atomics ------------------------------------------------------------------------------------
class Counters(ctypes.Structure):
    _fields_ = [("i", ctypes.c_int), ("u", ctypes.c_uint), ("ull", ctypes.c_ulonglong), ("f", ctypes.c_float),
                ("d", ctypes.c_double), ("max", ctypes.c_int), ("min", ctypes.c_int), ("cas", ctypes.c_int),
                ("cas_ull", ctypes.c_ulonglong), ("ticket", ctypes.c_uint)]


def test_atomics_under_contention(primitives):
    assert primitives.lib.counters_size() == ctypes.sizeof(Counters)
    blocks, threads = 4, 128
    n = blocks * threads
    counters = Counters(max=-2**31, min=2**31 - 1)
    tickets = torch.full((n,), -1, dtype=torch.int32)
    primitives("run_contend", ctypes.byref(counters), tickets, blocks, threads)
    ids = range(n)
    assert counters.i == sum(i % 7 - 3 for i in ids)
    assert counters.u == sum(ids) % 2**32
    assert counters.ull == n * 2**40 + sum(ids)
    assert counters.f == n * 0.5 and counters.d == n * 0.25
    assert counters.max == max(i * 37 % 1001 - 500 for i in ids)
    assert counters.min == min(i * 37 % 1001 - 500 for i in ids)
    assert counters.cas == 2 * n and counters.cas_ull == 3 * n
    assert sorted(tickets.tolist()) == list(ids), "atomicAdd must hand out every old value once"


# ---- shared memory ------------------------------------------------------------------------------
def test_static_shared_is_per_block_and_poisoned(primitives):
    blocks, threads = 5, 64
    before, after = torch.zeros(blocks * threads, dtype=torch.int32), torch.zeros(blocks * threads, dtype=torch.int32)
    primitives("run_static_shared", before, after, blocks, threads)
    assert (unsigned(before) == POISON).all(), "static shared memory must be poisoned at every block start"
    assert after.tolist() == [b * 1000 + (t + 1) % threads for b in range(blocks) for t in range(threads)]


def test_dynamic_shared_memory_poison_and_limits(primitives):
    blocks, threads = 3, 64

    def probe(words: int) -> tuple[int, str, torch.Tensor, torch.Tensor]:
        before, after = torch.zeros(blocks * words, dtype=torch.int32), torch.zeros(blocks * words, dtype=torch.int32)
        code, message = primitives.status("run_dynamic_shared", before, after, words, blocks, threads)
        return code, message, before, after

    code, _, before, after = probe(300)
    assert code == 0 and (unsigned(before) == POISON).all()
    assert after.tolist() == [b * 1000000 + (w + 1) % 300 for b in range(blocks) for w in range(300)]

    big = 100 * 1024 // 4  # 100 KiB: over the default 48 KiB
    code, message, _, _ = probe(big)
    assert code == INVALID_VALUE and "cudaFuncAttributeMaxDynamicSharedMemorySize" in message
    assert primitives.lib.set_dynamic_shared_limit(100 * 1024) == 0
    code, message, before, _ = probe(big)
    assert code == 0, message
    assert (unsigned(before) == POISON).all()
    code = primitives.lib.set_dynamic_shared_limit(227 * 1024 + 1)
    assert code == INVALID_VALUE and "227 KiB" in primitives.lib.error_string(code).decode()


# ---- launch limits ------------------------------------------------------------------------------
@pytest.mark.parametrize("grid,block,shmem,complaint", [
    ((1, 1, 1), (1025, 1, 1), 0, "blockDim.x is 1025"),
    ((1, 1, 1), (32, 32, 2), 0, "the block has 2048 threads"),
    ((1, 1, 1), (1, 1, 65), 0, "blockDim.z is 65"),
    ((1, 65536, 1), (1, 1, 1), 0, "gridDim.y is 65536"),
    ((1, 1, 65536), (1, 1, 1), 0, "gridDim.z is 65536"),
    ((2**31, 1, 1), (1, 1, 1), 0, "gridDim.x is 2147483648"),
    ((0, 1, 1), (32, 1, 1), 0, "gridDim.x is 0"),
    ((1, 1, 1), (32, 1, 1), 48 * 1024 + 1, "49153 bytes of dynamic shared memory"),
])
def test_launch_limits_are_errors(primitives, grid, block, shmem, complaint):
    code, message = primitives.status("run_nothing", *grid, *block, shmem)
    assert code == (INVALID_VALUE if shmem else INVALID_CONFIGURATION)
    assert complaint in message and "nothing" in message  # names the kernel
    primitives("run_nothing", 1, 1, 1, 32, 1, 1, 0)  # the error was cleared; launches go on


def test_launches_at_the_limits_run(primitives):
    primitives("run_nothing", 1, 1, 1, 1024, 1, 1, 48 * 1024)
    primitives("run_nothing", 1, 1, 1, 16, 1, 64, 0)
    primitives("run_nothing", 1, 65535, 1, 1, 1, 1, 0)
    primitives("run_nothing", 1, 1, 65535, 1, 1, 1, 0)


# ---- half precision -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_to_float_for_every_bit_pattern(halfs, dtype):
    patterns = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16)
    out = torch.zeros(patterns.numel())
    halfs("run_to_float", patterns, out, patterns.numel(), int(dtype == torch.bfloat16))
    expected = patterns.view(dtype).float()
    nan = expected.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(bits(out[~nan]), bits(expected[~nan]))
    if dtype == torch.float16:  # cuda_fp16.hpp: every NaN becomes the canonical 0x7fffffff
        assert (bits(out[nan]) == 0x7FFFFFFF).all()
    else:  # a bfloat16 is the top half of a float: NaNs keep their payload
        assert torch.equal(bits(out[nan]), patterns[nan].to(torch.int32) << 16)


def conversion_inputs(dtype) -> torch.Tensor:
    """Every value of the type, every midpoint between neighbours (ties), one float ulp on either
    side of each midpoint, random float bit patterns (subnormals, NaN and infinities included)."""
    ordered = torch.arange(0, 0x7F80 if dtype == torch.bfloat16 else 0x7C00, dtype=torch.int32).to(torch.int16)
    values = ordered.view(dtype).double()
    midpoints = ((values[:-1] + values[1:]) / 2).float()  # exact in float
    # halfway between the largest finite value and the next power of two: rounds to infinity
    overflow_tie = torch.tensor([0x477FF000 if dtype == torch.float16 else 0x7F7F8000], dtype=torch.int32)
    overflow_tie = overflow_tie.view(torch.float32)
    near = torch.cat([midpoints, overflow_tie])
    above = torch.nextafter(near, torch.tensor(math.inf))
    below = torch.nextafter(near, torch.tensor(-math.inf))
    randoms = torch.randint(-2**31, 2**31 - 1, (200_000,), generator=torch.Generator().manual_seed(3),
                            dtype=torch.int32).view(torch.float32)
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 2**-24, 2**-25, 2**-26, 1e-45, 65504.0,
                             65519.996, 3.4e38, -3.4e38])
    positive = torch.cat([values.float(), near, above, below])
    return torch.cat([positive, -positive, randoms, specials])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_float_to_16_bit_rounds_to_nearest_even(halfs, dtype):
    x = conversion_inputs(dtype)
    out = torch.zeros(x.numel(), dtype=torch.int16)
    halfs("run_from_float", x, out, x.numel(), int(dtype == torch.bfloat16))
    expected = x.to(dtype).view(torch.int16)
    nan = x.isnan()
    assert torch.equal(out[~nan], expected[~nan]), "differs from torch's round-to-nearest-even"
    assert (out[nan] == 0x7FFF).all(), "NaN must become CUDA's canonical NaN 0x7fff"


# ---- math ---------------------------------------------------------------------------------------
def test_math_functions(primitives):
    a, b = 2.0, 3.0
    x = torch.tensor([a, b, math.nan, -1.0])
    out = torch.full((37,), math.nan, dtype=torch.float64)
    primitives("run_math", x, out)
    standard = [math.exp(a), math.log(b), math.sqrt(b), 1 / math.sqrt(b), math.tanh(a), math.expm1(a), a**b, a, a, b]
    expected = [*standard, *standard,  # float and double versions
                math.exp(a), math.log(b), a / b, a, b,  # fast intrinsics, bit casts
                a, b, a, a, a, b,  # min/max ignore a NaN operand and mix float with double, as fminf/fmax
                3, 1,  # min(int -1, unsigned 3) compares as unsigned, as CUDA's overload does; max(int, int)
                1, 1, 1, 0]  # isnan, isinf, NAN, INFINITY
    assert out.tolist() == pytest.approx(expected, rel=1e-6)


# ---- the bugs the emulator must expose ----------------------------------------------------------
def test_lane_stride_bug_gives_wrong_results(bugs):
    rows, group, threads = 41, 8, 64
    edges = random_graph(rows, rows, 150, seed=4)
    hub = torch.stack([torch.arange(rows), torch.full((rows,), 5)])  # row 5 takes an edge from everyone
    edges = torch.cat([edges, hub], 1)
    order = torch.argsort(edges[1], stable=True)
    src, dst = edges[0][order].to(torch.int32), edges[1][order]
    indptr = torch.zeros(rows + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=rows), 0)
    assert (indptr[1:] == indptr[:-1]).any(), "the graph must have rows without in-edges"
    wrong_widths = []
    for features in (1, 7, 48, 300):
        x = torch.randint(-50, 50, (rows, features), generator=torch.Generator().manual_seed(features)).float()
        expected = torch.zeros(rows, features).index_add_(0, dst, x[src.long()])
        for buggy in (0, 1):
            out = torch.full((rows, features), math.nan)
            bugs("run_neighbour_sum", indptr, src, x, out, rows, features, group, threads, buggy)
            if not buggy:
                assert torch.equal(out, expected), f"correct kernel, {features} features"
            elif not torch.equal(out, expected):
                wrong_widths.append(features)
    assert wrong_widths, "the blockDim.x stride bug went unnoticed at every width"


def test_missing_barrier_gives_wrong_results(bugs, monkeypatch):
    blocks, threads = 3, 64
    x = torch.arange(blocks * threads, dtype=torch.float32)
    expected = x.view(blocks, threads).roll(-1, 1).flatten()
    wrong_seeds = []
    for seed in range(4):
        monkeypatch.setenv("SEASTAR_EMU_SEED", str(seed))
        out = torch.zeros_like(x)
        bugs("run_rotate", x, out, blocks, threads, 1)
        assert torch.equal(out, expected), f"seed {seed}"
        bugs("run_rotate", x, out, blocks, threads, 0)
        if not torch.equal(out, expected):
            wrong_seeds.append(seed)
    assert wrong_seeds, "the missing __syncthreads went unnoticed for every seed"


# ---- misuse is reported, not a hang or a crash --------------------------------------------------
MISUSE = {  # the Misuse enum in bugs.cu: (error code, what the message must say)
    "syncwarp_lane_exits": (ILLEGAL_INSTRUCTION, ["__syncwarp(mask 0x000000ff)", "lane 7", "exited"]),
    "syncwarp_lane_at_barrier": (ILLEGAL_INSTRUCTION, ["deadlock", "__syncwarp(mask 0x000000ff)", "__syncthreads()"]),
    "divergent_syncthreads": (ILLEGAL_INSTRUCTION, ["__syncthreads in divergent code", "bugs.cu:"]),
    "exit_after_barrier": (ILLEGAL_INSTRUCTION, ["__syncthreads()", "exited", "having passed an earlier barrier"]),
    "shuffle_from_exited_lane": (ILLEGAL_INSTRUCTION, ["__shfl_down_sync(mask 0xffffffff)", "exited"]),
    "shuffle_outside_mask": (ILLEGAL_INSTRUCTION, ["__shfl_xor_sync(mask 0x0000ffff)", "not in the mask"]),
    "caller_not_in_mask": (ILLEGAL_INSTRUCTION, ["__syncwarp(mask 0x00000001)", "lane 5", "not in the mask"]),
    "mismatched_masks": (ILLEGAL_INSTRUCTION, ["deadlock", "mask 0x00000003", "mask 0x00000007"]),
    "illegal_address": (ILLEGAL_ADDRESS, ["thread (3,0,0)", "illegal memory access"]),
    "stack_overflow": (ILLEGAL_ADDRESS, ["thread (3,0,0)", "overflowed", "SEASTAR_EMU_STACK_KB"]),
    "bad_width": (ILLEGAL_INSTRUCTION, ["__shfl_sync", "width 12"]),
    "dynamic_shared_overrun": (ILLEGAL_ADDRESS, ["past the end of the 256 bytes of dynamic shared memory"]),
    "mask_names_missing_lanes": (ILLEGAL_INSTRUCTION, ["do not exist", "40 threads"]),
    "nested_launch": (801, ["launched kernel child(float*)", "dynamic parallelism"]),
}

# Runs one misuse case in a child process, then a correct launch in the same process.
MISUSE_SCRIPT = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.error_string.restype = ctypes.c_char_p
out = (ctypes.c_float * 256)()
code = lib.run_misuse(int(sys.argv[2]), out)
print(code)
print(lib.error_string(code).decode())
x = (ctypes.c_float * 64)(*range(64))
rotated = (ctypes.c_float * 64)()
print(lib.run_rotate(x, rotated, 1, 64, 1), list(rotated) == [float((i + 1) % 64) for i in range(64)])
"""


@pytest.mark.parametrize("case", list(MISUSE))
def test_misuse_is_reported(built, case):
    code, phrases = MISUSE[case]
    result = subprocess.run([sys.executable, "-c", MISUSE_SCRIPT, str(built["bugs"]), str(list(MISUSE).index(case))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"the process died:\n{result.stderr}"
    reported, message, after = result.stdout.splitlines()
    assert int(reported) == code, message
    for phrase in [*phrases, "kernel misuse(", "block (", "thread (", "SEASTAR_EMU_SEED="]:
        assert phrase in message, f"{phrase!r} missing from: {message}"
    assert after == "0 True", "a launch after the error must run normally"


# ---- the same sources through nvcc --------------------------------------------------------------
PTXAS_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def ptxas_report(log: str) -> list[tuple[str, int, int, int]]:
    """(kernel, registers, spill store bytes, spill load bytes) per entry function in `nvcc -Xptxas -v` output."""
    report, kernel, spills = [], None, (0, 0)
    for line in log.splitlines():
        if entry := PTXAS_ENTRY.search(line):
            kernel = entry.group(1)
        elif spill := PTXAS_SPILLS.search(line):
            spills = (int(spill.group(1)), int(spill.group(2)))
        elif (registers := PTXAS_REGISTERS.search(line)) and kernel:
            report.append((kernel, int(registers.group(1)), *spills))
            kernel = None
    return report


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed, so CUDA compilation is not checked")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", SOURCES)
def test_test_kernels_compile_with_nvcc(tmp_path, name, arch):
    result = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-Xptxas", "-v", f"-I{INCLUDE}",
                             str(KERNELS / f"{name}.cu"), "-o", str(tmp_path / f"{name}.cubin")],
                            capture_output=True, text=True)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"nvcc failed on tests/cuda/{name}.cu for {arch}:\n{log}"
    report = ptxas_report(log)
    assert report, f"no ptxas report parsed from:\n{log}"
    print(f"\nptxas {arch} tests/cuda/{name}.cu:")
    for kernel, registers, spill_stores, spill_loads in report:
        print(f"  {kernel}: {registers} registers, {spill_stores} B spill stores, {spill_loads} B spill loads")


@pytest.mark.parametrize("optin_kb", [99, 163, 227])
def test_the_emulated_devices_opt_in_limit_is_chosen(primitives, monkeypatch, optin_kb):
    """SEASTAR_EMU_SHARED_OPTIN_KB emulates another device's limit (sm_86's 99 KiB, sm_80's 163):
    cudaFuncSetAttribute accepts up to it and refuses past it, naming the limit."""
    monkeypatch.setenv("SEASTAR_EMU_SHARED_OPTIN_KB", str(optin_kb))
    assert primitives.lib.set_dynamic_shared_limit(optin_kb * 1024) == 0
    code = primitives.lib.set_dynamic_shared_limit(optin_kb * 1024 + 1)
    assert code == INVALID_VALUE and f"{optin_kb} KiB" in primitives.lib.error_string(code).decode()


@pytest.mark.parametrize("value", ["47", "228", "lots"])
def test_a_bad_opt_in_limit_is_refused(primitives, monkeypatch, value):
    monkeypatch.setenv("SEASTAR_EMU_SHARED_OPTIN_KB", value)
    code = primitives.lib.set_dynamic_shared_limit(64 * 1024)
    message = primitives.lib.error_string(code).decode()
    assert code == INVALID_VALUE and f"SEASTAR_EMU_SHARED_OPTIN_KB={value}" in message


def test_emulated_launches_give_their_stacks_back(monkeypatch):
    """Each emulated library keeps its own state; a launch that kept its 256 fibers' stacks (two
    mappings each) made a suite that loads a few hundred libraries run out of mappings
    (vm.max_map_count), failing later dlopens with "failed to map segment"."""
    monkeypatch.setenv("SEASTAR_EMULATE_CUDA", "1")
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])

    def mappings() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    def scaled_sum(scale):
        def program(v):
            return sum(nb.x * scale for nb in v.innbs)
        return program

    seastar_layers.compile(scaled_sum(1.0))(edge_index, x=torch.randn(4, 3))  # the first library and the emulator's setup
    before = mappings()
    for k in range(2, 6):  # new libraries: the scale is a constant of each program's source
        seastar_layers.compile(scaled_sum(float(k)))(edge_index, x=torch.randn(4, 3))
    assert (mappings() - before) / 4 < 64, f"{mappings() - before} mappings for 4 libraries"
