#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <omp.h>
#include <unistd.h>
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
static const int seastar_chunk_candidates = 4;
static inline bool seastar_chunk_fixed() { return std::getenv("SEASTAR_SOURCE_CHUNK_BYTES") != nullptr; }
static inline int64_t seastar_source_chunk(int64_t row_bytes, int candidate) {
#ifdef _SC_LEVEL2_CACHE_SIZE
  static const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
  static const long l2 = 0;
#endif
  static const int64_t scales[seastar_chunk_candidates] = {1, 2, 8, 0};
  const char* set = std::getenv("SEASTAR_SOURCE_CHUNK_BYTES");
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

static const char* last_error = "";
static int seastar_fail(int code, const char* message) { last_error = message; return code; }

struct seastar_indices {
  const void* data;
  bool wide;  // int64, else int32
  inline int64_t operator[](int64_t k) const {
    return wide ? static_cast<const int64_t*>(data)[k] : (int64_t)static_cast<const int32_t*>(data)[k];
  }
};

struct forward_params {
  int64_t num_src, num_dst, num_edges;
  int64_t dims[1];
  const void* graph[8];
  bool wide_indices;  // the graph's arrays hold int64, else int32
  void* buffers[6];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
};

SEASTAR_CLONES static void __SEASTAR_PREFIX__forward_kernel0_rows(const forward_params& p, int64_t row_begin, int64_t row_end, acc_t* __restrict__ scratch) {
  // dst rows, 3 loop(s) over their in-edges
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:el@src
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:er@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:h@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out0@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:8@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v1 = b1 + r * 4;
    acc_t v4[4];
    for (int64_t c0 = 0; c0 < 4; c0 += 64) {
      acc_t acc4[64]; for (int k = 0; k < 64; ++k) acc4[k] = (-(acc_t)INFINITY);
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
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
        const int64_t nbr = nbrs[j];
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
    for (int64_t j0 = begin; j0 < end; j0 += 8) {
      const int64_t batch = std::min<int64_t>(8, end - j0);
      int64_t nbr_of[8], eid_of[8];
      acc_t t10[32];
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t j = j0 + jb, nbr = nbrs[j], eid = eids[j];
        nbr_of[jb] = nbr; eid_of[jb] = eid;
        const scalar_t* v0 = b0 + nbr * 4;
        if (j + 16 < end) {
          const auto* ahead = b2 + nbrs[j + 16] * 32;
          for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (32); q += 64) __builtin_prefetch((const char*)ahead + q);
        }
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 4; ++o0) {
          const acc_t s2 = (v0[o0] + v1[o0]);
          const acc_t s3 = (s2 > 0 ? s2 : s2 * (acc_t)0.2);
          const acc_t s6 = (s3 + v5[o0]);
          const acc_t s7 = seastar_exp(s6);
          const acc_t s10 = (s7 * v9[o0]);
          t10[jb * (4) + o0] = s10;
        }
      }
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t nbr = nbr_of[jb], eid = eid_of[jb];
        (void)nbr; (void)eid;
        const scalar_t* v11 = b2 + nbr * 32;
        for (int64_t o0 = 0; o0 < 4; ++o0) {
        #pragma omp simd
        for (int64_t k = 0; k < 8; ++k) {
            const acc_t e12 = (t10[jb * (4) + o0] * v11[o0 * 8 + k]);
            acc13[o0 * (8) + k] += e12;
        }
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

SEASTAR_CLONES static void __SEASTAR_PREFIX__forward_kernel0(const forward_params& p) {
  if (p.num_threads <= 1) {
    __SEASTAR_PREFIX__forward_kernel0_rows(p, 0, p.num_dst, p.scratch);
  } else {
    const int64_t chunks = (p.num_dst + 32 - 1) / 32;
    #pragma omp parallel num_threads(p.num_threads)
    {
      acc_t* scratch = p.scratch + (int64_t)omp_get_thread_num() * p.scratch_per_row;
      #pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < chunks; ++c)
        __SEASTAR_PREFIX__forward_kernel0_rows(p, c * 32, std::min<int64_t>(p.num_dst, (c + 1) * 32), scratch);
    }
  }
}

extern "C" int seastar___SEASTAR_PREFIX__forward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
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
  p.wide_indices = sizes[3] == 8;
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
  const void* graph[8];
  bool wide_indices;  // the graph's arrays hold int64, else int32
  void* buffers[12];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
};

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel0_rows(const backward_params& p, int64_t row_begin, int64_t row_end, acc_t* __restrict__ scratch) {
  // dst rows, 2 loop(s) over their in-edges
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:h@src
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:el@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:er@dst
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:8@dst
  scalar_t* __restrict__ b7 = (scalar_t*)p.buffers[7];  // gradient:er@dst
  acc_t* __restrict__ b9 = (acc_t*)p.buffers[9];  // temp:7@dst
  acc_t* __restrict__ b10 = (acc_t*)p.buffers[10];  // temp:11@dst
  acc_t* __restrict__ b11 = (acc_t*)p.buffers[11];  // temp:37@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v3 = b3 + r * 4;
    const acc_t* v6 = b4 + r * 4;
    acc_t v7[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v7[i0] = (-v6[i0]);
    }
    const acc_t* v10 = b5 + r * 4;
    acc_t v11[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v11[i0] = ((acc_t)1 / v10[i0]);
    }
    acc_t v18[32];
    acc_t v43[32];
    acc_t acc18[256]; for (int k = 0; k < 32; ++k) acc18[k] = (acc_t)0.0;
    acc_t acc43[256]; for (int k = 0; k < 32; ++k) acc43[k] = (acc_t)0.0;
    for (int64_t j0 = begin; j0 < end; j0 += 8) {
      const int64_t batch = std::min<int64_t>(8, end - j0);
      int64_t nbr_of[8], eid_of[8];
      acc_t t9[32];
      acc_t t30[32];
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t j = j0 + jb, nbr = nbrs[j], eid = eids[j];
        nbr_of[jb] = nbr; eid_of[jb] = eid;
        const scalar_t* v2 = b2 + nbr * 4;
        if (j + 16 < end) {
          const auto* ahead = b1 + nbrs[j + 16] * 32;
          for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (32); q += 64) __builtin_prefetch((const char*)ahead + q);
        }
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 4; ++o0) {
          const acc_t s4 = (v2[o0] + v3[o0]);
          const acc_t s5 = (s4 > 0 ? s4 : s4 * (acc_t)0.2);
          const acc_t s8 = (s5 + v7[o0]);
          const acc_t s9 = seastar_exp(s8);
          const bool s26 = (s4 > (acc_t)0.0);
          const acc_t s28 = (s26 != 0 ? (acc_t)1.0 : (acc_t)0.2);
          const acc_t s29 = (v11[o0] * s9);
          const acc_t s30 = (s29 * s28);
          t9[jb * (4) + o0] = s9;
          t30[jb * (4) + o0] = s30;
        }
      }
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t nbr = nbr_of[jb], eid = eid_of[jb];
        (void)nbr; (void)eid;
        const scalar_t* v1 = b1 + nbr * 32;
        for (int64_t o0 = 0; o0 < 4; ++o0) {
        #pragma omp simd
        for (int64_t k = 0; k < 8; ++k) {
            const acc_t e17 = (t9[jb * (4) + o0] * v1[o0 * 8 + k]);
            const acc_t e42 = (t30[jb * (4) + o0] * v1[o0 * 8 + k]);
            acc18[o0 * (8) + k] += e17;
            acc43[o0 * (8) + k] += e42;
        }
        }
      }
    }
    for (int64_t o0 = 0; o0 < 4; ++o0) {
    #pragma omp simd
    for (int64_t k = 0; k < 8; ++k) {
        v18[o0 * 8 + k] = acc18[o0 * (8) + k];
        v43[o0 * 8 + k] = acc43[o0 * (8) + k];
    }
    }
    acc_t v19[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v19[i0 * 8 + i1] = (acc_t)(v18[i0 * 8 + i1] != (acc_t)0.0);
    }
    const scalar_t* v0 = b0 + r * 32;
    acc_t v20[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v20[i0 * 8 + i1] = (v0[i0 * 8 + i1] * v18[i0 * 8 + i1]);
    }
    acc_t v21[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v21[i0 * 8 + i1] = (v19[i0 * 8 + i1] != 0 ? v20[i0 * 8 + i1] : (acc_t)0.0);
    }
    acc_t v22[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      acc_t total = 0;
      for (int64_t j1 = 0; j1 < 8; ++j1) total += v21[i0 * 8 + j1];
      v22[i0] = total;
    }
    acc_t v23[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v23[i0] = (v11[i0] * v11[i0]);
    }
    acc_t v24[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v24[i0] = (v22[i0] * v23[i0]);
    }
    acc_t v25[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v25[i0] = (-v24[i0]);
    }
    acc_t v37[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v37[i0] = ((acc_t)0.0 + v25[i0]);
    }
    acc_t v48[4];
    for (int64_t c0 = 0; c0 < 4; c0 += 64) {
      acc_t acc48[64]; for (int k = 0; k < 64; ++k) acc48[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v2 = b2 + nbr * 4;
        #pragma omp simd
        for (int k = 0; k < 4; ++k) {
          const acc_t e4 = (v2[(c0 + k)] + v3[(c0 + k)]);
          const acc_t e5 = (e4 > 0 ? e4 : e4 * (acc_t)0.2);
          const acc_t e8 = (e5 + v7[(c0 + k)]);
          const acc_t e9 = seastar_exp(e8);
          const bool e26 = (e4 > (acc_t)0.0);
          const acc_t e28 = (e26 != 0 ? (acc_t)1.0 : (acc_t)0.2);
          const acc_t e38 = (v37[(c0 + k)] * e9);
          const acc_t e39 = (e38 * e28);
          acc48[k] += e39;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 4; ++k) {
        v48[(c0 + k)] = acc48[k];
      }
    }
    acc_t v44[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v44[i0 * 8 + i1] = (acc_t)(v43[i0 * 8 + i1] != (acc_t)0.0);
    }
    acc_t v45[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v45[i0 * 8 + i1] = (v0[i0 * 8 + i1] * v43[i0 * 8 + i1]);
    }
    acc_t v46[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v46[i0 * 8 + i1] = (v44[i0 * 8 + i1] != 0 ? v45[i0 * 8 + i1] : (acc_t)0.0);
    }
    acc_t v47[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      acc_t total = 0;
      for (int64_t j1 = 0; j1 < 8; ++j1) total += v46[i0 * 8 + j1];
      v47[i0] = total;
    }
    acc_t v49[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v49[i0] = (v47[i0] + v48[i0]);
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b7[r * 4 + i0] = v49[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b9[r * 4 + i0] = v7[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b10[r * 4 + i0] = v11[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b11[r * 4 + i0] = v37[i0];
    }
  }
}

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel0(const backward_params& p) {
  if (p.num_threads <= 1) {
    __SEASTAR_PREFIX__backward_kernel0_rows(p, 0, p.num_dst, p.scratch);
  } else {
    const int64_t chunks = (p.num_dst + 32 - 1) / 32;
    #pragma omp parallel num_threads(p.num_threads)
    {
      acc_t* scratch = p.scratch + (int64_t)omp_get_thread_num() * p.scratch_per_row;
      #pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < chunks; ++c)
        __SEASTAR_PREFIX__backward_kernel0_rows(p, c * 32, std::min<int64_t>(p.num_dst, (c + 1) * 32), scratch);
    }
  }
}

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel1_rows(const backward_params& p, int64_t row_begin, int64_t row_end, acc_t* __restrict__ scratch) {
  // src rows, 1 loop(s) over their out-edges
  const seastar_indices indptr{p.graph[3], p.wide_indices};
  const seastar_indices nbrs{p.graph[4], p.wide_indices};
  const seastar_indices eids{p.graph[5], p.wide_indices};
  const seastar_indices order{p.graph[7], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:h@src
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:el@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:er@dst
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:el@src
  scalar_t* __restrict__ b8 = (scalar_t*)p.buffers[8];  // gradient:h@src
  const acc_t* __restrict__ b9 = (const acc_t*)p.buffers[9];  // temp:7@dst
  const acc_t* __restrict__ b10 = (const acc_t*)p.buffers[10];  // temp:11@dst
  const acc_t* __restrict__ b11 = (const acc_t*)p.buffers[11];  // temp:37@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v2 = b2 + r * 4;
    acc_t v14[32];
    acc_t v32[32];
    acc_t v40[4];
    acc_t acc14[256]; for (int k = 0; k < 32; ++k) acc14[k] = (acc_t)0.0;
    acc_t acc32[256]; for (int k = 0; k < 32; ++k) acc32[k] = (acc_t)0.0;
    acc_t acc40[256]; for (int k = 0; k < 32; ++k) acc40[k] = (acc_t)0.0;
    for (int64_t j0 = begin; j0 < end; j0 += 8) {
      const int64_t batch = std::min<int64_t>(8, end - j0);
      int64_t nbr_of[8], eid_of[8];
      acc_t t12[32];
      acc_t t30[32];
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t j = j0 + jb, nbr = nbrs[j], eid = eids[j];
        nbr_of[jb] = nbr; eid_of[jb] = eid;
        const scalar_t* v3 = b3 + nbr * 4;
        const acc_t* v7 = b9 + nbr * 4;
        const acc_t* v11 = b10 + nbr * 4;
        const acc_t* v37 = b11 + nbr * 4;
        if (j + 16 < end) {
          const auto* ahead = b0 + nbrs[j + 16] * 32;
          for (int64_t q = 0; q < (int64_t)sizeof(*ahead) * (32); q += 64) __builtin_prefetch((const char*)ahead + q);
        }
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 4; ++o0) {
          const acc_t s4 = (v2[o0] + v3[o0]);
          const acc_t s5 = (s4 > 0 ? s4 : s4 * (acc_t)0.2);
          const acc_t s8 = (s5 + v7[o0]);
          const acc_t s9 = seastar_exp(s8);
          const acc_t s12 = (s9 * v11[o0]);
          const bool s26 = (s4 > (acc_t)0.0);
          const acc_t s28 = (s26 != 0 ? (acc_t)1.0 : (acc_t)0.2);
          const acc_t s29 = (v11[o0] * s9);
          const acc_t s30 = (s29 * s28);
          const acc_t s38 = (v37[o0] * s9);
          const acc_t s39 = (s38 * s28);
          acc40[o0] += s39;
          t12[jb * (4) + o0] = s12;
          t30[jb * (4) + o0] = s30;
        }
      }
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t nbr = nbr_of[jb], eid = eid_of[jb];
        (void)nbr; (void)eid;
        const scalar_t* v0 = b0 + nbr * 32;
        for (int64_t o0 = 0; o0 < 4; ++o0) {
        #pragma omp simd
        for (int64_t k = 0; k < 8; ++k) {
            const acc_t e13 = (v0[o0 * 8 + k] * t12[jb * (4) + o0]);
            const acc_t e31 = (t30[jb * (4) + o0] * v0[o0 * 8 + k]);
            acc14[o0 * (8) + k] += e13;
            acc32[o0 * (8) + k] += e31;
        }
        }
      }
    }
    for (int64_t o0 = 0; o0 < 4; ++o0) {
    #pragma omp simd
    for (int64_t k = 0; k < 8; ++k) {
        v14[o0 * 8 + k] = acc14[o0 * (8) + k];
        v32[o0 * 8 + k] = acc32[o0 * (8) + k];
    }
    }
    #pragma omp simd
    for (int64_t o0 = 0; o0 < 4; ++o0) {
      v40[o0] = acc40[o0];
    }
    acc_t v33[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v33[i0 * 8 + i1] = (acc_t)(v32[i0 * 8 + i1] != (acc_t)0.0);
    }
    const scalar_t* v1 = b1 + r * 32;
    acc_t v34[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v34[i0 * 8 + i1] = (v1[i0 * 8 + i1] * v32[i0 * 8 + i1]);
    }
    acc_t v35[32];
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      v35[i0 * 8 + i1] = (v33[i0 * 8 + i1] != 0 ? v34[i0 * 8 + i1] : (acc_t)0.0);
    }
    acc_t v36[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      acc_t total = 0;
      for (int64_t j1 = 0; j1 < 8; ++j1) total += v35[i0 * 8 + j1];
      v36[i0] = total;
    }
    acc_t v41[4];
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      v41[i0] = (v36[i0] + v40[i0]);
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) {
      b6[r * 4 + i0] = v41[i0];
    }
    for (int64_t i0 = 0; i0 < 4; ++i0) for (int64_t i1 = 0; i1 < 8; ++i1) {
      b8[r * 32 + i0 * 8 + i1] = v14[i0 * 8 + i1];
    }
  }
}

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel1(const backward_params& p) {
  if (p.num_threads <= 1) {
    __SEASTAR_PREFIX__backward_kernel1_rows(p, 0, p.num_src, p.scratch);
  } else {
    const int64_t chunks = (p.num_src + 32 - 1) / 32;
    #pragma omp parallel num_threads(p.num_threads)
    {
      acc_t* scratch = p.scratch + (int64_t)omp_get_thread_num() * p.scratch_per_row;
      #pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < chunks; ++c)
        __SEASTAR_PREFIX__backward_kernel1_rows(p, c * 32, std::min<int64_t>(p.num_src, (c + 1) * 32), scratch);
    }
  }
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[1] * 32) return 1;  // adjoint:out0@dst [4, 8]
  if (numels[1] != sizes[0] * 32) return 2;  // feature:h@src [4, 8]
  if (numels[2] != sizes[0] * 4) return 3;  // feature:el@src [4, 1]
  if (numels[3] != sizes[1] * 4) return 4;  // feature:er@dst [4, 1]
  if (numels[4] != sizes[1] * 4) return 5;  // saved:4@dst [4, 1]
  if (numels[5] != sizes[1] * 4) return 6;  // saved:8@dst [4, 1]
  if (numels[6] != sizes[0] * 4) return 7;  // gradient:el@src [4, 1]
  if (numels[7] != sizes[1] * 4) return 8;  // gradient:er@dst [4, 1]
  if (numels[8] != sizes[0] * 32) return 9;  // gradient:h@src [4, 8]
  if (numels[9] != sizes[1] * 4) return 10;  // temp:7@dst [4, 1]
  if (numels[10] != sizes[1] * 4) return 11;  // temp:11@dst [4, 1]
  if (numels[11] != sizes[1] * 4) return 12;  // temp:37@dst [4, 1]
  backward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 12; ++k) p.buffers[k] = buffers[k];
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