"""The CPU dialect: OpenMP threads over rows, one thread per row, its elements in plain loops.

Values of a size known at generation time up to STACK_LIMIT elements are local arrays (the C
compiler keeps them in registers); larger or run-time-sized ones live in the thread's slice of a
heap scratch buffer the entry point allocates, so no feature width can overflow a thread's stack.
"""
from __future__ import annotations

import math

from .. import config
from .dialect import COMPUTE_TYPE, BlockLayout, Dialect, ElementLoop, c_max

STACK_LIMIT = 256  # elements of a value kept in a local array
ROW_CHUNK = 32  # rows a thread of a team takes at a time (a dynamic schedule: hubs and the rest even out)
BLOCK = 16  # features per register-resident accumulator block in blocked edge loops, at least
# Accumulator elements a blocked loop keeps in registers (AVX2's 16 registers hold 128 floats; the
# operands need the rest): a loop with one float aggregation takes 64 features a block, so a
# 64-wide neighbour sum sweeps the edges once instead of 4 times
REGISTER_ELEMENTS = 64
# Edges ahead whose gathered rows a blocked edge loop prefetches: the neighbours' rows are random
# accesses the hardware prefetcher cannot predict, and one edge's work is a few instructions.
PREFETCH_DISTANCE = 16
# Accumulators a row keeps live across its edge loop in a whole-row layout. (heads, channels)
# values are swept once per edge instead of once per head (their accumulators sit in L1, or in
# registers where the sizes are known); wider rows are blocked, one sweep per block.
WHOLE_ROW_LIMIT = 256
# Edges a whole-row loop takes in two passes: first each edge's per-head values (GAT's exp: a chain of
# some 20 dependent operations), then each edge's (head, channel) accumulators. One edge at a time,
# the accumulations of an edge filled the out-of-order window while they waited on its exp, so the
# next edge's exp could not start: the loop ran at the chain's latency. In batches, 8 independent
# exps overlap (4 and 16 were slower; docs/design.md has the figures).
EDGE_BATCH = 8

C_TYPES = {"float32": "float", "float64": "double"}
STORAGE = {"float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t"}

# Half-precision storage is converted with IEEE round-to-nearest-even: float16 through the C
# compiler's _Float16, bfloat16 (float32's top half) by rounding its bits.
HALF_HELPERS = r"""
static inline float seastar_from_f16(uint16_t h) {
  _Float16 v; std::memcpy(&v, &h, 2); return (float)v;
}
static inline uint16_t seastar_to_f16(float f) {
  _Float16 v = (_Float16)f; uint16_t h; std::memcpy(&h, &v, 2); return h;
}
static inline float seastar_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t seastar_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN stays a quiet NaN
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""


# A kernel built for the portable x86-64 baseline (the prebuilt extension: a wheel travels) is also
# compiled for AVX2 (x86-64-v3), and the loader runs that clone where the CPU has it (function
# multiversioning; OpenMP's outlined row loops are cloned with it): GCN's sweep takes 23% less
# time, within 7% of a -march=native build. (An AVX-512 clone of every kernel as well tripled the
# build time for little more.) Fast paths' kernels (compile's fast_sizes) also get an AVX-512
# clone (x86-64-v4): with their sizes constant, GAT's 8 x 8 rows fill the wide registers, and its
# forward and backward take 24% and 14% less time on 2 cores than the AVX2 clone's; the generic
# kernels got slower with AVX-512. A build that already targets AVX2 (-march=native, the JIT) needs
# no clones. The clones compute the same bits: no reduction is vectorised across lanes and
# contraction into FMA is off (toolchain.CXX_FLAGS).
CLONES = """#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GNUC__)
#define SEASTAR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SEASTAR_CLONES
#endif
"""
# a fast path's kernel: its own clones, spelled out at the kernel (the preamble, and so every
# kernel without fast paths, stays as it was)
FAST_CLONES = ["#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GNUC__)",
               '__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))',
               "#endif"]


# exp, which GAT's softmax and sigmoid evaluate once per edge, as code the simd loops vectorise
# (std::exp is a call into libm, which keeps every loop around it scalar): Cody-Waite reduction
# by ln 2, Cephes' polynomial (float) and Pade form (double), then 2^n from the exponent bits as
# two factors, each a normal number wherever the clamp leaves n, so that one rounding gives the
# subnormal results, 0 and inf without a select. GAT's sweeps spend most of their time in exp: the
# float polynomial is evaluated in Estrin's form (depth 5, not Horner's 10), at 1.02 units in the
# last place at worst over every float (Horner's: 0.99); and the two factors replace a scaling in two
# steps plus checks of the ends, which cost as much as the polynomial (docs/design.md has the
# figures). Within about 1 (float) and 2 (double) units in the last place
# of exact exp (tests/test_ops.py), the same bits in every clone and the scalar tail (no FMA
# contraction), and IEEE at the ends: exp(NaN) is NaN (it passes through every operation),
# exp(-inf) is 0, overflow is inf.
EXP_HELPERS = r"""
static inline float seastar_exp(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, held in the low bits
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  const float t = xc * 1.44269504088896341f + magic;
  const float n = t - magic;
  int32_t tb; std::memcpy(&tb, &t, 4);
  int32_t mb; std::memcpy(&mb, &magic, 4);
  int32_t k = tb - mb;  // n as an integer
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // the polynomial in Estrin's form: three short chains instead of Horner's one of ten operations
  const float r2 = r * r, r4 = r2 * r2;
  const float p01 = 1.6666665459e-1f * r + 5.0000001201e-1f;
  const float p23 = 8.3334519073e-3f * r + 4.1665795894e-2f;
  const float p45 = 1.9875691500e-4f * r + 1.3981999507e-3f;
  const float p = (p23 * r2 + p01) + p45 * r4;
  const float y = p * r2 + r + 1.0f;
  // 2^k in two factors, each a normal float for every k the clamp allows (-150..128): y * 2^(k/2) is
  // exact, the second product rounds once, to a subnormal, 0 or inf where exp does (no selects)
  const int32_t half = k >> 1;
  const int32_t high = (half + 127) << 23, low = (k - half + 127) << 23;
  float s1, s2; std::memcpy(&s1, &high, 4); std::memcpy(&s2, &low, 4);
  return y * s1 * s2;
}
static inline double seastar_exp(double x) {
  const double magic = 6755399441055744.0;  // 1.5 * 2^52
  const double xc = x < -746.0 ? -746.0 : (x > 710.0 ? 710.0 : x);
  const double t = xc * 1.4426950408889634073599 + magic;
  const double n = t - magic;
  int64_t tb; std::memcpy(&tb, &t, 8);
  int64_t mb; std::memcpy(&mb, &magic, 8);
  const int64_t k = tb - mb;
  double r = xc - n * 6.93145751953125E-1;
  r = r - n * 1.42860682030941723212E-6;
  const double rr = r * r;
  const double px = r * ((1.26177193074810590878E-4 * rr + 3.02994407707441961300E-2) * rr + 9.99999999999999999910E-1);
  const double qx = ((3.00198505138664455042E-6 * rr + 2.52448340349684104192E-3) * rr + 2.27265548208155028766E-1) * rr
                    + 2.00000000000000000009E0;
  const double y = 1.0 + 2.0 * (px / (qx - px));
  const int64_t half = k >> 1;  // as for float: 2^k in two normal factors (k is -1076..1025)
  const int64_t high = (half + 1023) << 52, low = (k - half + 1023) << 52;
  double s1, s2; std::memcpy(&s1, &high, 8); std::memcpy(&s2, &low, 8);
  const double result = y * s1 * s2;
  return x > 709.782712893384 ? INFINITY : (x < -745.1332191019412 ? 0.0 : result);
}
"""


# Neighbours per chunk of a source-chunked sweep (cstyle.py: render_source_chunks). Whether gathered
# rows are cheaper from L2 or from the last-level cache depends on the CPU (docs/design.md), so a
# sweep's first call of a size class times each candidate (7/8 of a core's L2 times 1, 2 and 8, and no
# chunks) and later calls take the fastest; every candidate adds the same terms in the same order.
# SEASTAR_SOURCE_CHUNK_BYTES fixes the budget (config.py; 0: one sweep).
SOURCE_CHUNK_HELPER = r"""
static const int seastar_chunk_candidates = 4;
static inline bool seastar_chunk_fixed() { return std::getenv("SOURCE_CHUNK_BYTES") != nullptr; }
static inline int64_t seastar_source_chunk(int64_t row_bytes, int candidate) {
#ifdef _SC_LEVEL2_CACHE_SIZE
  static const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
  static const long l2 = 0;
#endif
  static const int64_t scales[seastar_chunk_candidates] = {1, 2, 8, 0};
  const char* set = std::getenv("SOURCE_CHUNK_BYTES");
  const int64_t budget = set != nullptr ? std::atoll(set) : (l2 > 0 ? l2 : (1 << 20)) / 8 * 7 * scales[candidate];
  if (budget <= 0 || row_bytes <= 0) return INT64_MAX;
  return std::max<int64_t>(1, budget / row_bytes);
}
// The candidate each size class of one sweep settled on (-1: not tuned yet).
struct seastar_chunk_tuner {
  std::mutex lock;
  int64_t keys[16];
  int chosen[16];
  int used = 0;
  int choice(int64_t key) {
    std::lock_guard<std::mutex> hold(lock);
    for (int k = 0; k < used; ++k) if (keys[k] == key) return chosen[k];
    return used < 16 ? -1 : 0;
  }
  void settle(int64_t key, int candidate) {
    std::lock_guard<std::mutex> hold(lock);
    for (int k = 0; k < used; ++k) if (keys[k] == key) return;
    if (used < 16) { keys[used] = key; chosen[used] = candidate; ++used; }
  }
};
"""


class CpuDialect(Dialect):
    name = "cpu"
    file_suffix = ".cpp"
    split_reductions = True
    source_chunks = True

    def preamble(self, dtype: str) -> str:
        return ("#include <algorithm>\n#include <chrono>\n#include <cmath>\n#include <cstdint>\n#include <cstdlib>\n"
                "#include <cstring>\n#include <mutex>\n#include <omp.h>\n#include <unistd.h>\n" + CLONES)

    def types(self, dtype: str) -> list[str]:
        lines = [f"typedef {STORAGE[dtype]} scalar_t;", f"typedef {C_TYPES[COMPUTE_TYPE[dtype]]} acc_t;"]
        if dtype in ("float16", "bfloat16"):
            lines += HALF_HELPERS.strip().splitlines()
        chunks = SOURCE_CHUNK_HELPER.replace('"SOURCE_CHUNK_BYTES"', f'"{config.SOURCE_CHUNK_BYTES}"')
        return lines + EXP_HELPERS.strip().splitlines() + chunks.strip().splitlines()

    def load(self, expr: str, dtype: str) -> str:
        return {"float16": f"seastar_from_f16({expr})", "bfloat16": f"seastar_from_bf16({expr})"}.get(dtype, expr)

    def store(self, expr: str, dtype: str) -> str:
        return {"float16": f"seastar_to_f16({expr})", "bfloat16": f"seastar_to_bf16({expr})"}.get(dtype, expr)

    def math(self, function: str, dtype: str) -> str:
        return "seastar_exp" if function == "exp" else f"std::{function}"

    def literal(self, value: float, dtype: str) -> str:
        if math.isnan(value):
            return "(acc_t)NAN"
        if math.isinf(value):
            return "(acc_t)INFINITY" if value > 0 else "(-(acc_t)INFINITY)"
        return f"(acc_t){value!r}"

    def kernel_open(self, name: str, params: str, fast: bool = False, dtype: str = "float32") -> list[str]:
        if fast:
            return [*FAST_CLONES, f"static void {name}(const {params}& p) {{"]
        return [f"SEASTAR_CLONES static void {name}(const {params}& p) {{"]

    outlines_rows = True

    def rows_open(self, name: str, params: str, fast: bool = False, dtype: str = "float32") -> list[str]:
        signature = (f"static void {name}_rows(const {params}& p, int64_t row_begin, int64_t row_end, "
                     "acc_t* __restrict__ scratch) {")
        return [*FAST_CLONES, signature] if fast else [f"SEASTAR_CLONES {signature}"]

    def rows_loop_open(self) -> list[str]:
        return ["(void)scratch;", "for (int64_t r = row_begin; r < row_end; ++r) {"]

    def rows_call(self, name: str, n_rows: str) -> list[str]:
        # a team's threads take ROW_CHUNK rows at a time, as the dynamic schedule of a row loop would
        return ["if (p.num_threads <= 1) {",
                f"  {name}_rows(p, 0, {n_rows}, p.scratch);",
                "} else {",
                f"  const int64_t chunks = ({n_rows} + {ROW_CHUNK} - 1) / {ROW_CHUNK};",
                "  #pragma omp parallel num_threads(p.num_threads)",
                "  {",
                "    acc_t* scratch = p.scratch + (int64_t)omp_get_thread_num() * p.scratch_per_row;",
                "    #pragma omp for schedule(dynamic, 1)",
                "    for (int64_t c = 0; c < chunks; ++c)",
                f"      {name}_rows(p, c * {ROW_CHUNK}, std::min<int64_t>({n_rows}, (c + 1) * {ROW_CHUNK}), scratch);",
                "  }",
                "}"]

    def row_loop_open(self, n_rows: str, order: str, uses_scratch: bool, widest: int | None = None,
                      scratch: int | None = None) -> list[str]:
        lines = [f"#pragma omp parallel for schedule(dynamic, {ROW_CHUNK}) num_threads(p.num_threads)",
                 f"for (int64_t r = 0; r < {n_rows}; ++r) {{"]
        if uses_scratch:
            lines.append("  acc_t* __restrict__ scratch = "
                         "p.scratch + (int64_t)omp_get_thread_num() * p.scratch_per_row;")
        return lines

    def row_loop_close(self) -> list[str]:
        return ["}"]

    def replicated(self, size) -> bool:
        return True  # one thread holds the whole row

    def on_stack(self, size, replicated: bool) -> bool:
        return isinstance(size, int) and size <= STACK_LIMIT

    def declare(self, name: str, size, replicated: bool, offset: str | None) -> str:
        if offset is None:
            return f"acc_t {name}[{size}];"
        return f"acc_t* __restrict__ {name} = scratch + {offset};"

    def element_loop(self, shape, size, replicated: bool) -> ElementLoop:
        coords = [f"i{d}" for d in range(len(shape))]
        header = " ".join(f"for (int64_t {v} = 0; {v} < {n}; ++{v})" for v, n in zip(coords, shape, strict=True)
                          if n != 1)
        return ElementLoop(tuple(shape), [header + " {"] if header else ["{"], ["}"], coords)

    def sync(self) -> list[str]:
        return []

    def prefetch(self, address: str, condition: str, span: str | None = None) -> list[str]:
        distance = str(PREFETCH_DISTANCE)
        address, condition = address.replace("DISTANCE", distance), condition.replace("DISTANCE", distance)
        if span is None:
            return [f"if ({condition}) __builtin_prefetch({address});"]
        return [f"if ({condition}) {{",
                f"  const auto* ahead = {address};",
                f"  for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * ({span}); q += 64) "
                "__builtin_prefetch((const char*)ahead + q);",
                "}"]

    def block_layout(self, shape: tuple, size: str, accumulators: int = 1, dtype: str = "float32") -> BlockLayout:
        per_register = 2 if COMPUTE_TYPE[dtype] == "float64" else 1
        block = BLOCK
        while block * 2 * accumulators * per_register <= REGISTER_ELEMENTS:
            block *= 2
        blocked = self.blocked_layout(shape, size, block)
        axis = blocked.vector_axis
        outer_axes = [d for d, n in enumerate(shape[:axis]) if n != 1]
        if len(outer_axes) != 1 or (size.isdigit() and int(size) > WHOLE_ROW_LIMIT):
            return blocked
        # the whole row inside the edge loop: per edge, the per-head values over the heads (one
        # vector exp for all of them), then every (head, channel) accumulator
        heads, extent = shape[outer_axes[0]], shape[axis]
        outer = ["o0" if d == outer_axes[0] else "0" for d in range(axis)]
        trailing = ["0"] * (len(shape) - axis - 1)
        return BlockLayout(
            [], [], WHOLE_ROW_LIMIT, [(None, str(extent), None)],
            [f"for (int64_t o0 = 0; o0 < {heads}; ++o0) {{", "#pragma omp simd",
             f"for (int64_t k = 0; k < {extent}; ++k) {{"], ["}", "}"],
            outer + ["k"] + trailing, None, axis, outer + ["0"] + trailing, "true", ["0"] * len(shape),
            outer_axis=outer_axes[0], outer_open=["#pragma omp simd", f"for (int64_t o0 = 0; o0 < {heads}; ++o0) {{"],
            outer_close=["}"], slot_index=f"o0 * ({extent}) + k", accumulators=size, prefetch_rows=True,
            edge_batch=EDGE_BATCH, guard=None if size.isdigit() else f"{size} <= {WHOLE_ROW_LIMIT}", fallback=blocked)

    def blocked_layout(self, shape: tuple, size: str, block: int) -> BlockLayout:
        # slots run along the last axis of extent > 1, `block` features at a time; the axes before it
        # are looped outside, so a value constant along it (GAT's per-head score beside per-head
        # channels) is computed once per edge, and the slot loop vectorises
        axis = max(d for d, n in enumerate(shape) if n != 1)
        extent = shape[axis]
        open_lines = [f"for (int64_t o{d} = 0; o{d} < {n}; ++o{d}) {{" for d, n in enumerate(shape[:axis]) if n != 1]
        outer = [f"o{d}" if n != 1 else "0" for d, n in enumerate(shape[:axis])]
        trailing = ["0"] * (len(shape) - axis - 1)
        # a constant trip count for full blocks keeps the accumulators in registers; what is left
        # under a full block takes blocks of BLOCK where it is a multiple of BLOCK, else one pass of
        # a run-time trip count (each variant sets the step, each is a pass over the row's edges): one
        # pass for a 41-wide sum beats passes of 16, 16 and 9, while a 16-wide one in a pass of
        # run-time width would be slower. With a size known here, only the blocks that occur are rendered
        variants = [(f"if (c0 + {block} <= {extent}) {{ step = {block};", str(block), None)]
        if block > BLOCK:
            variants.append((f"}} else if ((({extent}) - c0) % {BLOCK} == 0) {{ step = {BLOCK};", str(BLOCK), None))
        variants.append((f"}} else {{ step = ({extent}) - c0;", f"(int)(({extent}) - c0)", "}"))
        if isinstance(extent, int) and (extent % block == 0 or extent < block):
            variants = [(None, str(min(block, extent)), None)]
        step = "step" if len(variants) > 1 else str(block)
        open_lines.append(f"for (int64_t c0 = 0, step = {block}; c0 < {extent}; c0 += {step}) {{"
                          if len(variants) > 1 else f"for (int64_t c0 = 0; c0 < {extent}; c0 += {step}) {{")
        return BlockLayout(open_lines, ["}"] * len(open_lines), block, variants,
                           ["#pragma omp simd", "for (int k = 0; k < WIDTH; ++k) {"], ["}"],
                           outer + ["(c0 + k)"] + trailing, None, axis, outer + ["0"] + trailing, "c0 == 0",
                           outer + ["c0"] + trailing, prefetch_span=block)

    def run_kernels(self, kernels: list, params: str) -> list[str]:
        lines = [f"p.scratch_per_row = {c_max([scratch for _, _, scratch, _ in kernels])};",
                 "p.scratch = nullptr;",
                 "if (p.scratch_per_row > 0) {",
                 "  p.scratch = (acc_t*)std::malloc(sizeof(acc_t) * (size_t)p.scratch_per_row"
                 " * (size_t)num_threads);",
                 "  if (p.scratch == nullptr)",
                 "    return seastar_fail(-1, \"out of memory for the kernels' per-row scratch\");",
                 "}"]
        lines += [f"{name}(p);" for name, _, _, _ in kernels]
        return lines + ["std::free(p.scratch);", "return 0;"]
