#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GNUC__)
#define SEASTAR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SEASTAR_CLONES
#endif

namespace seastar___SEASTAR_PREFIX__ {
typedef float scalar_t;
typedef float acc_t;
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
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // 2^k outside the normal range (results near overflow or subnormal): scaled in two steps
  const bool small = k < -125, big = k > 127;
  const int32_t kk = small ? k + 25 : (big ? k - 1 : k);
  const int32_t sb = (kk + 127) << 23;
  float s; std::memcpy(&s, &sb, 4);
  const float result = y * s * (small ? 2.98023223876953125e-8f : (big ? 2.0f : 1.0f));
  return x != x ? x : (x > 88.72283935546875f ? INFINITY : (x < -103.97208f ? 0.0f : result));
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
  const bool small = k < -1021, big = k > 1023;
  const int64_t kk = small ? k + 54 : (big ? k - 1 : k);
  const int64_t sb = (kk + 1023) << 52;
  double s; std::memcpy(&s, &sb, 8);
  const double result = y * s * (small ? 5.5511151231257827e-17 : (big ? 2.0 : 1.0));
  return x != x ? x : (x > 709.782712893384 ? INFINITY : (x < -745.1332191019412 ? 0.0 : result));
}

static const char* last_error = "";
static int seastar_fail(int code, const char* message) { last_error = message; return code; }

struct forward_params {
  int64_t num_src, num_dst, num_edges;
  int64_t dims[1];
  const int64_t* graph[8];
  void* buffers[6];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
};

SEASTAR_CLONES static void __SEASTAR_PREFIX__forward_kernel0(const forward_params& p) {
  // dst rows, 3 loop(s) over their in-edges
  const int64_t* __restrict__ indptr = p.graph[0];
  const int64_t* __restrict__ nbrs = p.graph[1];
  const int64_t* __restrict__ eids = p.graph[2];
  const int64_t* __restrict__ order = p.graph[6];
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  scalar_t* __restrict__ b0 = (scalar_t*)p.buffers[0];  // feature:el@src
  scalar_t* __restrict__ b1 = (scalar_t*)p.buffers[1];  // feature:er@dst
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // feature:h@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out0@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:8@dst
  #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
  for (int64_t r = 0; r < p.num_dst; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v1 = b1 + r * 4;
    acc_t v4[4];
    for (int64_t c0 = 0; c0 < 4; c0 += 64) {
      acc_t acc4[64]; for (int k = 0; k < 64; ++k) acc4[k] = (-(acc_t)INFINITY);
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        (void)nbr; (void)eid;
        const scalar_t* v0 = b0 + nbr * 4;
        #pragma omp simd
        for (int k = 0; k < 4; ++k) {
          const acc_t e2 = (v0[(c0 + k)] + v1[(c0 + k)]);
          const acc_t e3 = (e2 > 0 ? e2 : e2 * (acc_t)0.2);
          acc4[k] = (e3 > acc4[k] || e3 != e3) ? e3 : acc4[k];
        }
      }
      #pragma omp simd
      for (int k = 0; k < 4; ++k) {
        v4[(c0 + k)] = acc4[k];
      }
    }
    if (begin == end) {
      for (int64_t i0 = 0; i0 < 4; ++i0) {
        v4[i0] = 0;
      }
    }
    acc_t v5[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v5[i0] = (-v4[i0]);
    }
    acc_t v8[4];
    for (int64_t c0 = 0; c0 < 4; c0 += 64) {
      acc_t acc8[64]; for (int k = 0; k < 64; ++k) acc8[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        (void)nbr; (void)eid;
        const scalar_t* v0 = b0 + nbr * 4;
        #pragma omp simd
        for (int k = 0; k < 4; ++k) {
          const acc_t e2 = (v0[(c0 + k)] + v1[(c0 + k)]);
          const acc_t e3 = (e2 > 0 ? e2 : e2 * (acc_t)0.2);
          const acc_t e6 = (e3 + v5[(c0 + k)]);
          const acc_t e7 = seastar_exp(e6);
          acc8[k] += e7;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 4; ++k) {
        v8[(c0 + k)] = acc8[k];
      }
    }
    acc_t v9[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v9[i0] = ((acc_t)1 / v8[i0]);
    }
    acc_t v13[32];
    acc_t acc13[256]; for (int k = 0; k < 32; ++k) acc13[k] = (acc_t)0.0;
    for (int64_t j = begin; j < end; ++j) {
      const int64_t nbr = nbrs[j], eid = eids[j];
      (void)nbr; (void)eid;
      const scalar_t* v0 = b0 + nbr * 4;
      const scalar_t* v11 = b2 + nbr * 32;
      if (j + 16 < end) {
        const auto* ahead = b2 + nbrs[j + 16] * 32;
        for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (32); q += 64) __builtin_prefetch((const char*)ahead + q);
      }
      acc_t t10[256];
      #pragma omp simd
      for (int64_t o0 = 0; o0 < 4; ++o0) {
        const acc_t s2 = (v0[o0] + v1[o0]);
        const acc_t s3 = (s2 > 0 ? s2 : s2 * (acc_t)0.2);
        const acc_t s6 = (s3 + v5[o0]);
        const acc_t s7 = seastar_exp(s6);
        const acc_t s10 = (s7 * v9[o0]);
        t10[o0] = s10;
      }
      for (int64_t o0 = 0; o0 < 4; ++o0) {
      #pragma omp simd
      for (int64_t k = 0; k < 8; ++k) {
          const acc_t e12 = (t10[o0] * v11[o0 * 8 + k]);
          acc13[o0 * (8) + k] += e12;
      }
      }
    }
    for (int64_t o0 = 0; o0 < 4; ++o0) {
    #pragma omp simd
    for (int64_t k = 0; k < 8; ++k) {
        v13[o0 * 8 + k] = acc13[o0 * (8) + k];
    }
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      b3[r * 32 + i0 * 8 + i1] = v13[i0 * 8 + i1];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b4[r * 4 + i0] = v4[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b5[r * 4 + i0] = v8[i0];
    }
  }
}

extern "C" int seastar___SEASTAR_PREFIX__forward(const int64_t* sizes, const int64_t* dims, const int64_t* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[0] * 4) return 1;  // feature:el@src [4, 1]
  if (numels[1] != sizes[1] * 4) return 2;  // feature:er@dst [4, 1]
  if (numels[2] != sizes[0] * 32) return 3;  // feature:h@src [4, 8]
  if (numels[3] != sizes[1] * 32) return 4;  // output:out0@dst [4, 8]
  if (numels[4] != sizes[1] * 4) return 5;  // saved:4@dst [4, 1]
  if (numels[5] != sizes[1] * 4) return 6;  // saved:8@dst [4, 1]
  forward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  for (int k = 0; k < 6; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  p.scratch_per_row = 0;
  p.scratch = nullptr;
  if (p.scratch_per_row > 0) {
    p.scratch = (acc_t*)std::malloc(sizeof(acc_t) * (size_t)p.scratch_per_row * (size_t)num_threads);
    if (p.scratch == nullptr)
      return seastar_fail(-1, "out of memory for the kernels' per-row scratch");
  }
  __SEASTAR_PREFIX__forward_kernel0(p);
  std::free(p.scratch);
  return 0;
}

struct backward_params {
  int64_t num_src, num_dst, num_edges;
  int64_t dims[1];
  const int64_t* graph[8];
  void* buffers[10];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
};

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel0(const backward_params& p) {
  // dst rows, 2 loop(s) over their in-edges
  const int64_t* __restrict__ indptr = p.graph[0];
  const int64_t* __restrict__ nbrs = p.graph[1];
  const int64_t* __restrict__ eids = p.graph[2];
  const int64_t* __restrict__ order = p.graph[6];
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  scalar_t* __restrict__ b0 = (scalar_t*)p.buffers[0];  // adjoint:out0@dst
  scalar_t* __restrict__ b1 = (scalar_t*)p.buffers[1];  // feature:h@src
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // feature:el@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // feature:er@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:8@dst
  scalar_t* __restrict__ b7 = (scalar_t*)p.buffers[7];  // gradient:er@dst
  acc_t* __restrict__ b9 = (acc_t*)p.buffers[9];  // temp:19@dst
  #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
  for (int64_t r = 0; r < p.num_dst; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v0 = b0 + r * 32;
    const scalar_t* v4 = b3 + r * 4;
    const acc_t* v7 = b4 + r * 4;
    acc_t v8[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v8[i0] = (-v7[i0]);
    }
    acc_t v19[4];
    for (int64_t c0 = 0; c0 < 4; c0 += 64) {
      acc_t acc19[64]; for (int k = 0; k < 64; ++k) acc19[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        (void)nbr; (void)eid;
        const scalar_t* v3 = b2 + nbr * 4;
        const scalar_t* v1 = b1 + nbr * 32;
        if (j + 16 < end) {
          const auto* ahead = b1 + nbrs[j + 16] * 32 + c0 * 8 + 0;
          for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (64); q += 64) __builtin_prefetch((const char*)ahead + q);
        }
        acc_t e15[64];
        for (int k = 0; k < 4; ++k) {
          acc_t r15 = 0;
          #pragma omp simd reduction(+:r15)
          for (int64_t r15_1 = 0; r15_1 < 8; ++r15_1) r15 += (v0[(c0 + k) * 8 + r15_1] * v1[(c0 + k) * 8 + r15_1]);
          e15[k] = r15;
        }
        #pragma omp simd
        for (int k = 0; k < 4; ++k) {
          const acc_t e5 = (v3[(c0 + k)] + v4[(c0 + k)]);
          const acc_t e6 = (e5 > 0 ? e5 : e5 * (acc_t)0.2);
          const acc_t e9 = (e6 + v8[(c0 + k)]);
          const acc_t e10 = seastar_exp(e9);
          const acc_t e18 = (e15[k] * e10);
          acc19[k] += e18;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 4; ++k) {
        v19[(c0 + k)] = acc19[k];
      }
    }
    const acc_t* v11 = b5 + r * 4;
    acc_t v12[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v12[i0] = ((acc_t)1 / v11[i0]);
    }
    acc_t v20[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v20[i0] = (v12[i0] * v12[i0]);
    }
    acc_t v21[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v21[i0] = (v19[i0] * v20[i0]);
    }
    acc_t v22[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v22[i0] = (-v21[i0]);
    }
    acc_t v32[4];
    for (int64_t c0 = 0; c0 < 4; c0 += 64) {
      acc_t acc32[64]; for (int k = 0; k < 64; ++k) acc32[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        (void)nbr; (void)eid;
        const scalar_t* v3 = b2 + nbr * 4;
        const scalar_t* v1 = b1 + nbr * 32;
        if (j + 16 < end) {
          const auto* ahead = b1 + nbrs[j + 16] * 32 + c0 * 8 + 0;
          for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (64); q += 64) __builtin_prefetch((const char*)ahead + q);
        }
        acc_t e15[64];
        for (int k = 0; k < 4; ++k) {
          acc_t r15 = 0;
          #pragma omp simd reduction(+:r15)
          for (int64_t r15_1 = 0; r15_1 < 8; ++r15_1) r15 += (v0[(c0 + k) * 8 + r15_1] * v1[(c0 + k) * 8 + r15_1]);
          e15[k] = r15;
        }
        #pragma omp simd
        for (int k = 0; k < 4; ++k) {
          const acc_t e5 = (v3[(c0 + k)] + v4[(c0 + k)]);
          const acc_t e6 = (e5 > 0 ? e5 : e5 * (acc_t)0.2);
          const acc_t e9 = (e6 + v8[(c0 + k)]);
          const acc_t e10 = seastar_exp(e9);
          const acc_t e17 = (e15[k] * v12[(c0 + k)]);
          const acc_t e23 = (e17 + v22[(c0 + k)]);
          const acc_t e24 = (e23 * e10);
          const bool e26 = (e5 > (acc_t)0.0);
          const acc_t e29 = (e26 != 0 ? (acc_t)1.0 : (acc_t)0.2);
          const acc_t e30 = (e24 * e29);
          acc32[k] += e30;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 4; ++k) {
        v32[(c0 + k)] = acc32[k];
      }
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b7[r * 4 + i0] = v32[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b9[r * 4 + i0] = v19[i0];
    }
  }
}

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel1(const backward_params& p) {
  // src rows, 1 loop(s) over their out-edges
  const int64_t* __restrict__ indptr = p.graph[3];
  const int64_t* __restrict__ nbrs = p.graph[4];
  const int64_t* __restrict__ eids = p.graph[5];
  const int64_t* __restrict__ order = p.graph[7];
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  scalar_t* __restrict__ b0 = (scalar_t*)p.buffers[0];  // adjoint:out0@dst
  scalar_t* __restrict__ b1 = (scalar_t*)p.buffers[1];  // feature:h@src
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // feature:el@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // feature:er@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:8@dst
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:el@src
  scalar_t* __restrict__ b8 = (scalar_t*)p.buffers[8];  // gradient:h@src
  acc_t* __restrict__ b9 = (acc_t*)p.buffers[9];  // temp:19@dst
  #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
  for (int64_t r = 0; r < p.num_src; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v3 = b2 + r * 4;
    const scalar_t* v1 = b1 + r * 32;
    acc_t v16[32];
    acc_t v31[4];
    acc_t acc16[256]; for (int k = 0; k < 32; ++k) acc16[k] = (acc_t)0.0;
    acc_t acc31[256]; for (int k = 0; k < 32; ++k) acc31[k] = (acc_t)0.0;
    for (int64_t j = begin; j < end; ++j) {
      const int64_t nbr = nbrs[j], eid = eids[j];
      (void)nbr; (void)eid;
      const scalar_t* v4 = b3 + nbr * 4;
      const acc_t* v7 = b4 + nbr * 4;
      const acc_t* v11 = b5 + nbr * 4;
      const scalar_t* v0 = b0 + nbr * 32;
      const acc_t* v19 = b9 + nbr * 4;
      if (j + 16 < end) {
        const auto* ahead = b0 + nbrs[j + 16] * 32;
        for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (32); q += 64) __builtin_prefetch((const char*)ahead + q);
      }
      acc_t t13[256];
      acc_t t15[256];
      for (int64_t o0 = 0; o0 < 4; ++o0) {
        acc_t s15 = 0;
        #pragma omp simd reduction(+:s15)
        for (int64_t r15_1 = 0; r15_1 < 8; ++r15_1) s15 += (v0[o0 * 8 + r15_1] * v1[o0 * 8 + r15_1]);
        t15[o0] = s15;
      }
      #pragma omp simd
      for (int64_t o0 = 0; o0 < 4; ++o0) {
        const acc_t s5 = (v3[o0] + v4[o0]);
        const acc_t s6 = (s5 > 0 ? s5 : s5 * (acc_t)0.2);
        const acc_t s8 = (-v7[o0]);
        const acc_t s9 = (s6 + s8);
        const acc_t s10 = seastar_exp(s9);
        const acc_t s12 = ((acc_t)1 / v11[o0]);
        const acc_t s13 = (s10 * s12);
        const acc_t s17 = (t15[o0] * s12);
        const acc_t s20 = (s12 * s12);
        const acc_t s21 = (v19[o0] * s20);
        const acc_t s22 = (-s21);
        const acc_t s23 = (s17 + s22);
        const acc_t s24 = (s23 * s10);
        const bool s26 = (s5 > (acc_t)0.0);
        const acc_t s29 = (s26 != 0 ? (acc_t)1.0 : (acc_t)0.2);
        const acc_t s30 = (s24 * s29);
        acc31[o0] += s30;
        t13[o0] = s13;
      }
      for (int64_t o0 = 0; o0 < 4; ++o0) {
      #pragma omp simd
      for (int64_t k = 0; k < 8; ++k) {
          const acc_t e14 = (v0[o0 * 8 + k] * t13[o0]);
          acc16[o0 * (8) + k] += e14;
      }
      }
    }
    for (int64_t o0 = 0; o0 < 4; ++o0) {
    #pragma omp simd
    for (int64_t k = 0; k < 8; ++k) {
        v16[o0 * 8 + k] = acc16[o0 * (8) + k];
    }
    }
    #pragma omp simd
    for (int64_t o0 = 0; o0 < 4; ++o0) {
      v31[o0] = acc31[o0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b6[r * 4 + i0] = v31[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      b8[r * 32 + i0 * 8 + i1] = v16[i0 * 8 + i1];
    }
  }
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const int64_t* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[1] * 32) return 1;  // adjoint:out0@dst [4, 8]
  if (numels[1] != sizes[0] * 32) return 2;  // feature:h@src [4, 8]
  if (numels[2] != sizes[0] * 4) return 3;  // feature:el@src [4, 1]
  if (numels[3] != sizes[1] * 4) return 4;  // feature:er@dst [4, 1]
  if (numels[4] != sizes[1] * 4) return 5;  // saved:4@dst [4, 1]
  if (numels[5] != sizes[1] * 4) return 6;  // saved:8@dst [4, 1]
  if (numels[6] != sizes[0] * 4) return 7;  // gradient:el@src [4, 1]
  if (numels[7] != sizes[1] * 4) return 8;  // gradient:er@dst [4, 1]
  if (numels[8] != sizes[0] * 32) return 9;  // gradient:h@src [4, 8]
  if (numels[9] != sizes[1] * 4) return 10;  // temp:19@dst [4, 1]
  backward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  for (int k = 0; k < 10; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  p.scratch_per_row = 0;
  p.scratch = nullptr;
  if (p.scratch_per_row > 0) {
    p.scratch = (acc_t*)std::malloc(sizeof(acc_t) * (size_t)p.scratch_per_row * (size_t)num_threads);
    if (p.scratch == nullptr)
      return seastar_fail(-1, "out of memory for the kernels' per-row scratch");
  }
  __SEASTAR_PREFIX__backward_kernel0(p);
  __SEASTAR_PREFIX__backward_kernel1(p);
  std::free(p.scratch);
  return 0;
}

extern "C" const char* seastar___SEASTAR_PREFIX__last_error() { return last_error; }

}  // namespace seastar___SEASTAR_PREFIX__