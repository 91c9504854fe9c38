"""The CUDA dialect: a group of `lanes` threads (a power of two up to a warp) per row.

Lanes split a row's feature elements (`f = lane, lane + lanes, ...`), so the group size follows the
widest value of the kernel: narrow programs pack several rows into a warp, as Seastar's
feature-adaptive groups do. Groups take rows grid-stride, in the order the runtime gives (heaviest
rows first) so a hub starts early rather than last. Values other lanes read live in the group's
slice of dynamic shared memory and are followed by `__syncwarp` on the group's mask; small values of
a size known at generation time are computed whole by every lane, in registers. A hub (one of the
HUB_ROWS heaviest rows, with SPLIT_DEGREE edges or more) gets a block of its own, whose groups sweep
a slice of its edges each and combine their partial aggregations in group order through shared
memory (KernelRenderer.combine_split): one warp no longer bounds the kernel by the largest degree.
The same source compiles with nvcc and, under the emulator (include/seastar_cuda_emu.h), with g++.
"""
from __future__ import annotations

import math

from ..ir.program import strides
from .dialect import COMPUTE_TYPE, BlockLayout, Dialect, ElementLoop

THREADS = 256  # threads per block
# blocks an SM must hold at once: caps a float32 kernel at 64 registers (half the SM's warps
# resident), which GAT's kernels of run-time sizes otherwise exceed 2-4x (benchmarks/gpu_registers.py)
MIN_BLOCKS = 4
SLOTS = 4  # register accumulators per lane in a blocked loop
REPLICATE_LIMIT = 4  # elements of a value every lane computes whole
SHARED_DEFAULT = 48 * 1024  # bytes of dynamic shared memory a block gets without opting in
GLOBAL_SCRATCH_BUDGET = 1 << 30  # bytes of global scratch for rows too wide for shared memory
HUB_ROWS = 1024  # the heaviest rows get a block each, which splits a row's edges among its groups
SPLIT_DEGREE = 256  # where the row has this many edges (with fewer, one group takes the row)
assert SPLIT_DEGREE >= THREADS  # a split row's groups have an edge each at least: no slice is empty

STORAGE = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16"}
C_TYPES = {"float32": "float", "float64": "double"}
FLOAT_MATH = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "fabs": "fabsf", "tanh": "tanhf", "expm1": "expm1f",
              "pow": "powf", "erf": "erff"}


def group_width(widest: int) -> int:
    """Threads per row for a kernel whose widest value has `widest` elements (run_kernels' rule)."""
    lanes = 1
    while lanes < 32 and lanes < widest:
        lanes *= 2
    return lanes


def in_shared_memory(widest, scratch) -> bool:
    """Whether a kernel's scratch is known at generation time (a fast path's: sizes pinned) to fit the
    shared memory every device gives a block without opting in, even with 8-byte accumulators."""
    if not (str(widest).isdigit() and str(scratch).isdigit()):
        return False
    return THREADS // group_width(int(widest)) * int(scratch) * 8 <= SHARED_DEFAULT


class CudaDialect(Dialect):
    name = "cuda"
    file_suffix = ".cu"
    inline_function = "static __host__ __device__ inline"
    member_function = "__host__ __device__ inline"
    element_index = "int"  # 32-bit: a row's element arithmetic, divisions included, in one register each
    name_loads = True
    online_softmax = True  # every slot keeps its head's running max: one sweep, no lane waits for another
    splits_rows = True  # a hub row's edges, among the groups of its block
    pinned_dtypes = ("float32", "float16", "bfloat16")  # what autocast trains in; float64 is for checking on a GPU
    edge_range = ("begin + slice_begin", "begin + slice_end")

    def global_access(self, element: str) -> str:
        return f"SEASTAR_GLOBAL({element})"

    def preamble(self, dtype: str) -> str:
        return '#include <algorithm>\n#include <cstdint>\n#include <cstdio>\n#include "seastar_cuda.h"\n'

    def types(self, dtype: str) -> list[str]:
        return [f"typedef {STORAGE[dtype]} scalar_t;", f"typedef {C_TYPES[COMPUTE_TYPE[dtype]]} acc_t;"]

    def load(self, expr: str, dtype: str) -> str:
        return {"float16": f"__half2float({expr})", "bfloat16": f"__bfloat162float({expr})"}.get(dtype, expr)

    def store(self, expr: str, dtype: str) -> str:
        return {"float16": f"__float2half_rn({expr})", "bfloat16": f"__float2bfloat16_rn({expr})"}.get(dtype, expr)

    def math(self, function: str, dtype: str) -> str:
        return FLOAT_MATH[function] if COMPUTE_TYPE[dtype] == "float32" else function

    def literal(self, value: float, dtype: str) -> str:
        # bit patterns: device code has no INFINITY it can rely on
        if math.isnan(value):
            return "(acc_t)__int_as_float(0x7fffffff)"
        if math.isinf(value):
            return f"(acc_t)__int_as_float({'0x7f800000' if value > 0 else '(int)0xff800000'})"
        return f"(acc_t){value!r}"

    def kernel_open(self, name: str, params: str, fast: bool = False, dtype: str = "float32") -> list[str]:
        # a double takes two registers: float64 kernels get twice the budget
        min_blocks = MIN_BLOCKS if COMPUTE_TYPE[dtype] == "float32" else MIN_BLOCKS // 2
        return [f"__global__ void __launch_bounds__({THREADS}, {min_blocks}) {name}(const {params} p) {{"]

    def row_loop_open(self, n_rows: str, order: str, uses_scratch: bool, widest: int | None = None,
                      scratch: int | None = None) -> list[str]:
        # a width known here makes every element loop's trip count constant: unrolled, its gathers
        # issued together, its slot branches gone (run_kernels launches with the same width)
        lanes = ("const int lanes = p.lanes;  // threads per row: a power of two up to 32" if widest is None else
                 f"constexpr int lanes = {group_width(widest)};  // threads per row, as run_kernels launches")
        lines = [lanes,
                 "const int lane = threadIdx.x & (lanes - 1);",
                 "const unsigned group_mask = lanes == 32 ? 0xffffffffu",
                 "                            : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));",
                 "const int group = threadIdx.x / lanes;",
                 *([f"const int block_groups = {THREADS} / lanes;",
                    "int group_bits = 0;  // block_groups = 2^group_bits",
                    "while ((block_groups >> group_bits) > 1) ++group_bits;"] if widest is None else
                   [f"constexpr int block_groups = {THREADS // group_width(widest)}, "
                    f"group_bits = {(THREADS // group_width(widest)).bit_length() - 1};"]),
                 "// the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group",
                 "const bool hub_block = blockIdx.x < p.hub_blocks;",
                 "const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;",
                 "(void)lane; (void)group_mask;"]
        if uses_scratch and in_shared_memory(widest, scratch):
            # only ever shared memory: nvcc sees its address space and emits shared loads and stores
            lines += ["SEASTAR_DYNAMIC_SHARED(acc_t, shared);",
                      f"constexpr int row_scratch = {scratch};",
                      "acc_t* __restrict__ scratch = shared + group * row_scratch;"]
        elif uses_scratch:
            # a row's values in the block's shared memory, or (rows too wide for it) in global memory
            lines += ["SEASTAR_DYNAMIC_SHARED(acc_t, shared);",
                      "const int row_scratch = (int)p.scratch_per_row;  // below 2^31: it fits a block or 1 GiB",
                      "acc_t* __restrict__ scratch = p.scratch != nullptr",
                      "    ? p.scratch + ((int64_t)blockIdx.x * block_groups + group) * row_scratch",
                      "    : shared + group * row_scratch;"]
        return lines + [
            f"for (int64_t rr = hub_block ? blockIdx.x : ((int64_t)blockIdx.x - p.hub_blocks) * block_groups + group; "
            f"rr < {n_rows}; rr += hub_block ? {n_rows} : groups) {{",
            f"  const int64_t r = {order}.data != nullptr ? {order}[rr] : rr;"]

    def params_fields(self) -> list[str]:
        return ["int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)"]

    def row_edges(self) -> list[str]:
        # a hub is its block's row, whatever group would have taken it: each of the block's groups
        # sweeps a contiguous slice of its edges (combine_split merges what they summed)
        return [f"const bool split = rr < p.hub_blocks && end - begin >= {SPLIT_DEGREE};",
                "if (split != hub_block) continue;  // a hub block's row that is no hub, or a hub in another group",
                "// int offsets from begin: fewer registers live across the loops than two 64-bit bounds",
                "const int slice_begin = split ? (int)(((end - begin) * group) >> group_bits) : 0;",
                "const int slice_end = split ? (int)(((end - begin) * (group + 1)) >> group_bits)",
                "                            : (int)(end - begin);",
                "(void)slice_begin; (void)slice_end;"]

    def block_sync(self) -> list[str]:
        return ["__syncthreads();"]

    def block_element_loop(self, shape, size) -> ElementLoop:
        return self.element_loop(shape, size, False, first="threadIdx.x", step="blockDim.x")

    def row_loop_close(self) -> list[str]:
        # the group is done with this row's scratch before the next row overwrites it
        return ["  __syncwarp(group_mask);", "}"]

    def replicated(self, size) -> bool:
        return isinstance(size, int) and size <= REPLICATE_LIMIT

    def on_stack(self, size, replicated: bool) -> bool:
        return replicated

    def declare(self, name: str, size, replicated: bool, offset: str | None) -> str:
        if replicated:
            return f"acc_t {name}[{size}];"
        return f"acc_t* __restrict__ {name} = scratch + {offset};"

    def element_loop(self, shape, size, replicated: bool, first: str = "lane", step: str = "lanes") -> ElementLoop:
        if replicated:  # every lane, every element: plain nested loops
            coords = [f"i{d}" for d in range(len(shape))]
            header = " ".join(f"for (int {v} = 0; {v} < {n}; ++{v})"
                              for v, n in zip(coords, shape, strict=True) if n != 1)
            return ElementLoop(tuple(shape), [header + " {"] if header else ["{"], ["}"], coords)
        coords, declarations = [], {}
        non_unit = [d for d, n in enumerate(shape) if n != 1]
        for d, (extent, stride) in enumerate(zip(shape, strides(shape), strict=True)):
            if extent == 1:
                coords.append("0")
                continue
            quotient = "f" if stride == 1 else f"(f / ({stride}))"
            coordinate = quotient if d == non_unit[0] else f"({quotient} % ({extent}))"
            declarations[f"i{d}"] = f"const int i{d} = {coordinate};"
            coords.append(f"i{d}")
        return ElementLoop(tuple(shape), [f"for (int f = {first}; f < {size}; f += {step}) {{"], ["}"], coords,
                           flat="f", declarations=declarations)

    def sync(self) -> list[str]:
        return ["__syncwarp(group_mask);"]

    def block_layout(self, shape: tuple, size: str, accumulators: int = 1, dtype: str = "float32") -> BlockLayout:
        # lanes split the flat elements (f = f0 + lane + lanes * k): every value is computed per slot
        # from its operands at the slot's coordinates, so lanes never wait for each other
        coords = []
        non_unit = [d for d, n in enumerate(shape) if n != 1]
        for d, (extent, stride) in enumerate(zip(shape, strides(shape), strict=True)):
            quotient = "f" if stride == 1 else f"(f / ({stride}))"
            coords.append("0" if extent == 1 else quotient if d == non_unit[0] else f"({quotient} % ({extent}))")
        return BlockLayout([f"for (int f0 = 0; f0 < {size}; f0 += lanes * {SLOTS}) {{"], ["}"], SLOTS,
                           [(None, str(SLOTS), None)],
                           ["#pragma unroll", "for (int k = 0; k < WIDTH; ++k) {",
                            "  const int f = f0 + lane + lanes * k;", "  if (f < SIZE) {"],
                           ["  }", "}"], coords, "f", non_unit[-1], None,
                           # GAT's per-head sums beside its per-head channels, in the same sweep: the
                           # slot of each head's first channel adds the head's term
                           slot_first=f"{coords[non_unit[-1]]} == 0")

    def run_kernels(self, kernels: list, params: str) -> list[str]:
        lines = ["cudaStream_t st = (cudaStream_t)stream;"]
        for name, n_rows, scratch, widest in kernels:
            lines += [
                "{",
                f"  const int64_t widest = {widest};",
                "  int lanes = 1;",
                "  while (lanes < 32 && lanes < widest) lanes *= 2;",
                "  p.lanes = lanes;",
                f"  p.scratch_per_row = {scratch};",
                f"  const int64_t groups_per_block = {THREADS} / lanes;",
                "  const int64_t row_bytes = p.scratch_per_row * (int64_t)sizeof(acc_t);",
                "  int64_t shared = groups_per_block * row_bytes;",
                f"  const int64_t rows = {n_rows};",
                "  int64_t blocks = std::min<int64_t>((rows + groups_per_block - 1) / groups_per_block, 1 << 20);",
                "  // the heaviest rows' blocks: as many as rows can have SPLIT_DEGREE edges, HUB_ROWS at most",
                f"  p.hub_blocks = std::min<int64_t>({{rows, (int64_t){HUB_ROWS}, p.num_edges / {SPLIT_DEGREE}}});",
                "  p.scratch = nullptr;"]
            if not in_shared_memory(widest, scratch):  # the kernel also takes global scratch
                lines += [
                    "  // past what this device lets a block opt into (227 KiB on sm_90, 163 on sm_80, 99 on",
                    "  // sm_86/89), or where the opt-in is refused, scratch goes to global memory",
                    "  bool global_scratch = shared > seastar_shared_optin();",
                    f"  if (!global_scratch && shared > {SHARED_DEFAULT} && cudaFuncSetAttribute(",
                    f"      {name}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared) != cudaSuccess) {{",
                    "    (void)cudaGetLastError();",
                    "    global_scratch = true;",
                    "  }",
                    "  if (global_scratch) {",
                    f"    // for as many groups as {GLOBAL_SCRATCH_BUDGET >> 20} MiB hold (they take rows grid-stride)",
                    f"    blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, {GLOBAL_SCRATCH_BUDGET} / shared));",
                    "    if (rows > 0 &&",
                    "        cudaMallocAsync((void**)&p.scratch, (size_t)(blocks * shared), st) != cudaSuccess)",
                    f"      return seastar_fail(-1, \"cudaMallocAsync of {name}'s per-row scratch: out of GPU "
                    "memory\");",
                    "    shared = 0;",
                    "    p.hub_blocks = 0;  // a hub stays on one group: the budget holds the groups' scratch, no more",
                    "  }"]
            lines += [
                "  if (rows > 0) {",
                f"    SEASTAR_LAUNCH({name}, (unsigned)(p.hub_blocks + blocks), {THREADS}, (size_t)shared, st)(p);",
                "    const cudaError_t launched = cudaGetLastError();",
                "    const cudaError_t freed = p.scratch != nullptr ? cudaFreeAsync(p.scratch, st) : cudaSuccess;",
                "    if (launched != cudaSuccess || freed != cudaSuccess) {",
                "      static char message[1024];  // what failed, in which kernel, launched how",
                "      std::snprintf(message, sizeof message, \"%s %s (%lld rows, %d threads a row, %lld bytes of "
                "shared memory a block): %s\",",
                "                    launched != cudaSuccess ? \"launching\" : \"freeing the scratch of\","
                f" \"{name}\",",
                "                    (long long)rows, lanes, (long long)shared,",
                "                    cudaGetErrorString(launched != cudaSuccess ? launched : freed));",
                "      return seastar_fail(-3, message);",
                "    }",
                "  }",
                "}"]
        return lines + ["return 0;"]
