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
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:h@src
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:g@dst
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // output:out0@dst
  acc_t* __restrict__ b3 = (acc_t*)p.buffers[3];  // saved:13@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:8@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v1 = b1 + r * 10;
    acc_t v4[2];
    for (int64_t c0 = 0; c0 < 2; c0 += 64) {
      acc_t acc4[64]; for (int k = 0; k < 64; ++k) acc4[k] = (-(acc_t)INFINITY);
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 10;
        acc_t e3[64];
        #pragma omp simd
        for (int k = 0; k < 2; ++k) {
          acc_t r3 = 0;
          for (int64_t r3_1 = 0; r3_1 < 5; ++r3_1) r3 += (v0[(c0 + k) * 5 + r3_1] * v1[(c0 + k) * 5 + r3_1]);
          e3[k] = r3;
        }
        #pragma omp simd
        for (int k = 0; k < 2; ++k) {
          acc4[k] = (e3[k] > acc4[k] || e3[k] != e3[k]) ? e3[k] : acc4[k];
        }
      }
      #pragma omp simd
      for (int k = 0; k < 2; ++k) {
        v4[(c0 + k)] = acc4[k];
      }
    }
    if (begin == end) {
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v4[i0] = 0;
      }
    }
    acc_t v5[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v5[i0] = (-v4[i0]);
    }
    acc_t v8[2];
    for (int64_t c0 = 0; c0 < 2; c0 += 64) {
      acc_t acc8[64]; for (int k = 0; k < 64; ++k) acc8[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 10;
        acc_t e3[64];
        #pragma omp simd
        for (int k = 0; k < 2; ++k) {
          acc_t r3 = 0;
          for (int64_t r3_1 = 0; r3_1 < 5; ++r3_1) r3 += (v0[(c0 + k) * 5 + r3_1] * v1[(c0 + k) * 5 + r3_1]);
          e3[k] = r3;
        }
        #pragma omp simd
        for (int k = 0; k < 2; ++k) {
          const acc_t e6 = (e3[k] + v5[(c0 + k)]);
          const acc_t e7 = seastar_exp(e6);
          acc8[k] += e7;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 2; ++k) {
        v8[(c0 + k)] = acc8[k];
      }
    }
    acc_t v9[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v9[i0] = ((acc_t)1 / v8[i0]);
    }
    acc_t v13[10];
    acc_t acc13[256]; for (int k = 0; k < 10; ++k) acc13[k] = (acc_t)0.0;
    for (int64_t j0 = begin; j0 < end; j0 += 8) {
      const int64_t batch = std::min<int64_t>(8, end - j0);
      int64_t nbr_of[8], eid_of[8];
      acc_t t10[16];
      acc_t t3[16];
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t j = j0 + jb, nbr = nbrs[j], eid = eids[j];
        nbr_of[jb] = nbr; eid_of[jb] = eid;
        const scalar_t* v0 = b0 + nbr * 10;
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 2; ++o0) {
          acc_t s3 = 0;
          for (int64_t r3_1 = 0; r3_1 < 5; ++r3_1) s3 += (v0[o0 * 5 + r3_1] * v1[o0 * 5 + r3_1]);
          t3[jb * (2) + o0] = s3;
        }
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 2; ++o0) {
          const acc_t s6 = (t3[jb * (2) + o0] + v5[o0]);
          const acc_t s7 = seastar_exp(s6);
          const acc_t s10 = (s7 * v9[o0]);
          t10[jb * (2) + o0] = s10;
        }
      }
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t nbr = nbr_of[jb], eid = eid_of[jb];
        (void)nbr; (void)eid;
        const scalar_t* v0 = b0 + nbr * 10;
        for (int64_t o0 = 0; o0 < 2; ++o0) {
        #pragma omp simd
        for (int64_t k = 0; k < 5; ++k) {
            const acc_t e11 = ((acc_t)1 / ((acc_t)1 + seastar_exp(-v0[o0 * 5 + k])));
            const acc_t e12 = (t10[jb * (2) + o0] * e11);
            acc13[o0 * (5) + k] += e12;
        }
        }
      }
    }
    for (int64_t o0 = 0; o0 < 2; ++o0) {
    #pragma omp simd
    for (int64_t k = 0; k < 5; ++k) {
        v13[o0 * 5 + k] = acc13[o0 * (5) + k];
    }
    }
    acc_t v14[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v14[i0 * 5 + i1] = (v1[i0 * 5 + i1] + v13[i0 * 5 + i1]);
    }
    acc_t v15[5];
    for (int64_t i0 = 0; i0 < 5; ++i0) {
      acc_t total = 0;
      for (int64_t j0 = 0; j0 < 2; ++j0) total += v14[j0 * 5 + i0];
      v15[i0] = total;
    }
    acc_t v17[5];
    for (int64_t i0 = 0; i0 < 5; ++i0) {
      v17[i0] = (v15[i0] * (acc_t)0.5);
    }
    acc_t v18[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      acc_t total = 0;
      for (int64_t j1 = 0; j1 < 5; ++j1) total += v14[i0 * 5 + j1];
      v18[i0] = total;
    }
    acc_t v19[1];
    {
      acc_t total = 0;
      for (int64_t j0 = 0; j0 < 2; ++j0) total += v18[j0];
      v19[0] = total;
    }
    acc_t v20[1];
    {
      v20[0] = (v19[0] * (acc_t)0.5);
    }
    acc_t v21[5];
    for (int64_t i0 = 0; i0 < 5; ++i0) {
      v21[i0] = (v17[i0] + v20[0]);
    }
    for (int64_t i0 = 0; i0 < 5; ++i0) {
      b2[r * 5 + i0] = v21[i0];
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      b3[r * 10 + i0 * 5 + i1] = v13[i0 * 5 + i1];
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      b4[r * 2 + i0] = v4[i0];
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      b5[r * 2 + i0] = v8[i0];
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
  if (numels[0] != sizes[0] * 10) return 1;  // feature:h@src [2, 5]
  if (numels[1] != sizes[1] * 10) return 2;  // feature:g@dst [2, 5]
  if (numels[2] != sizes[1] * 5) return 3;  // output:out0@dst [5]
  if (numels[3] != sizes[1] * 10) return 4;  // saved:13@dst [2, 5]
  if (numels[4] != sizes[1] * 2) return 5;  // saved:4@dst [2, 1]
  if (numels[5] != sizes[1] * 2) return 6;  // saved:8@dst [2, 1]
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
  void* buffers[11];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:g@dst
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:h@src
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:8@dst
  scalar_t* __restrict__ b7 = (scalar_t*)p.buffers[7];  // gradient:g@dst
  acc_t* __restrict__ b8 = (acc_t*)p.buffers[8];  // temp:21@dst
  acc_t* __restrict__ b9 = (acc_t*)p.buffers[9];  // temp:25@dst
  acc_t* __restrict__ b10 = (acc_t*)p.buffers[10];  // temp:45@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v5 = b1 + r * 10;
    const acc_t* v20 = b4 + r * 2;
    acc_t v21[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v21[i0] = (-v20[i0]);
    }
    acc_t v38[10];
    acc_t acc38[256]; for (int k = 0; k < 10; ++k) acc38[k] = (acc_t)0.0;
    for (int64_t j0 = begin; j0 < end; j0 += 8) {
      const int64_t batch = std::min<int64_t>(8, end - j0);
      int64_t nbr_of[8], eid_of[8];
      acc_t t23[16];
      acc_t t19[16];
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t j = j0 + jb, nbr = nbrs[j], eid = eids[j];
        nbr_of[jb] = nbr; eid_of[jb] = eid;
        const scalar_t* v15 = b3 + nbr * 10;
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 2; ++o0) {
          acc_t s19 = 0;
          for (int64_t r19_1 = 0; r19_1 < 5; ++r19_1) s19 += (v15[o0 * 5 + r19_1] * v5[o0 * 5 + r19_1]);
          t19[jb * (2) + o0] = s19;
        }
        #pragma omp simd
        for (int64_t o0 = 0; o0 < 2; ++o0) {
          const acc_t s22 = (t19[jb * (2) + o0] + v21[o0]);
          const acc_t s23 = seastar_exp(s22);
          t23[jb * (2) + o0] = s23;
        }
      }
      for (int64_t jb = 0; jb < batch; ++jb) {
        const int64_t nbr = nbr_of[jb], eid = eid_of[jb];
        (void)nbr; (void)eid;
        const scalar_t* v15 = b3 + nbr * 10;
        for (int64_t o0 = 0; o0 < 2; ++o0) {
        #pragma omp simd
        for (int64_t k = 0; k < 5; ++k) {
            const acc_t e16 = ((acc_t)1 / ((acc_t)1 + seastar_exp(-v15[o0 * 5 + k])));
            const acc_t e37 = (t23[jb * (2) + o0] * e16);
            acc38[o0 * (5) + k] += e37;
        }
        }
      }
    }
    for (int64_t o0 = 0; o0 < 2; ++o0) {
    #pragma omp simd
    for (int64_t k = 0; k < 5; ++k) {
        v38[o0 * 5 + k] = acc38[o0 * (5) + k];
    }
    }
    const scalar_t* v0 = b0 + r * 5;
    acc_t v1[1];
    {
      acc_t total = 0;
      for (int64_t j0 = 0; j0 < 5; ++j0) total += v0[j0];
      v1[0] = total;
    }
    const acc_t* v2 = v1;
    acc_t v4[1];
    {
      v4[0] = (v2[0] * (acc_t)0.5);
    }
    const acc_t* v7 = v4;
    acc_t v8[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v8[i0] = v7[0];
    }
    const acc_t* v9 = v8;
    acc_t v10[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v10[i0 * 5 + i1] = v9[i0];
    }
    acc_t v11[5];
    for (int64_t i0 = 0; i0 < 5; ++i0) {
      v11[i0] = (v0[i0] * (acc_t)0.5);
    }
    const acc_t* v12 = v11;
    acc_t v13[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v13[i0 * 5 + i1] = v12[i1];
    }
    acc_t v14[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v14[i0 * 5 + i1] = (v10[i0 * 5 + i1] + v13[i0 * 5 + i1]);
    }
    const acc_t* v24 = b5 + r * 2;
    acc_t v25[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v25[i0] = ((acc_t)1 / v24[i0]);
    }
    acc_t v39[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v39[i0 * 5 + i1] = (acc_t)(v38[i0 * 5 + i1] != (acc_t)0.0);
    }
    acc_t v40[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v40[i0 * 5 + i1] = (v14[i0 * 5 + i1] * v38[i0 * 5 + i1]);
    }
    acc_t v41[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v41[i0 * 5 + i1] = (v39[i0 * 5 + i1] != 0 ? v40[i0 * 5 + i1] : (acc_t)0.0);
    }
    acc_t v42[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      acc_t total = 0;
      for (int64_t j1 = 0; j1 < 5; ++j1) total += v41[i0 * 5 + j1];
      v42[i0] = total;
    }
    acc_t v43[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v43[i0] = (v25[i0] * v25[i0]);
    }
    acc_t v44[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v44[i0] = (v42[i0] * v43[i0]);
    }
    acc_t v45[2];
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      v45[i0] = (-v44[i0]);
    }
    acc_t v53[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v53[i0 * 5 + i1] = (acc_t)0.0;
    }
    for (int64_t j = begin; j < end; ++j) {
      const int64_t nbr = nbrs[j];
      const scalar_t* v15 = b3 + nbr * 10;
      acc_t v16[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v16[i0 * 5 + i1] = ((acc_t)1 / ((acc_t)1 + seastar_exp(-v15[i0 * 5 + i1])));
      }
      acc_t v17[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v17[i0 * 5 + i1] = (v14[i0 * 5 + i1] * v16[i0 * 5 + i1]);
      }
      acc_t v28[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int64_t j1 = 0; j1 < 5; ++j1) total += v17[i0 * 5 + j1];
        v28[i0] = total;
      }
      acc_t v35[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v35[i0] = (v28[i0] * v25[i0]);
      }
      acc_t v46[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v46[i0] = (v35[i0] + v45[i0]);
      }
      acc_t v18[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v18[i0 * 5 + i1] = (v15[i0 * 5 + i1] * v5[i0 * 5 + i1]);
      }
      acc_t v19[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int64_t j1 = 0; j1 < 5; ++j1) total += v18[i0 * 5 + j1];
        v19[i0] = total;
      }
      acc_t v22[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v22[i0] = (v19[i0] + v21[i0]);
      }
      acc_t v23[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v23[i0] = seastar_exp(v22[i0]);
      }
      acc_t v47[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v47[i0] = (v46[i0] * v23[i0]);
      }
      acc_t v48[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v48[i0 * 5 + i1] = v47[i0];
      }
      acc_t v50[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v50[i0 * 5 + i1] = (v48[i0 * 5 + i1] * v15[i0 * 5 + i1]);
      }
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v53[i0 * 5 + i1] += v50[i0 * 5 + i1];
      }
    }
    acc_t v54[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v54[i0 * 5 + i1] = (v14[i0 * 5 + i1] + v53[i0 * 5 + i1]);
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      b7[r * 10 + i0 * 5 + i1] = v54[i0 * 5 + i1];
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      b8[r * 2 + i0] = v21[i0];
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      b9[r * 2 + i0] = v25[i0];
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) {
      b10[r * 2 + i0] = v45[i0];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:g@dst
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:h@src
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:h@src
  const acc_t* __restrict__ b8 = (const acc_t*)p.buffers[8];  // temp:21@dst
  const acc_t* __restrict__ b9 = (const acc_t*)p.buffers[9];  // temp:25@dst
  const acc_t* __restrict__ b10 = (const acc_t*)p.buffers[10];  // temp:45@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v15 = b3 + r * 10;
    acc_t v16[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v16[i0 * 5 + i1] = ((acc_t)1 / ((acc_t)1 + seastar_exp(-v15[i0 * 5 + i1])));
    }
    acc_t v29[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v29[i0 * 5 + i1] = (acc_t)0.0;
    }
    acc_t v51[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v51[i0 * 5 + i1] = (acc_t)0.0;
    }
    for (int64_t j = begin; j < end; ++j) {
      const int64_t nbr = nbrs[j];
      const scalar_t* v0 = b0 + nbr * 5;
      acc_t v1[1];
      {
        acc_t total = 0;
        for (int64_t j0 = 0; j0 < 5; ++j0) total += v0[j0];
        v1[0] = total;
      }
      const acc_t* v2 = v1;
      acc_t v4[1];
      {
        v4[0] = (v2[0] * (acc_t)0.5);
      }
      const acc_t* v7 = v4;
      acc_t v8[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v8[i0] = v7[0];
      }
      const acc_t* v9 = v8;
      acc_t v10[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v10[i0 * 5 + i1] = v9[i0];
      }
      acc_t v11[5];
      for (int64_t i0 = 0; i0 < 5; ++i0) {
        v11[i0] = (v0[i0] * (acc_t)0.5);
      }
      const acc_t* v12 = v11;
      acc_t v13[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v13[i0 * 5 + i1] = v12[i1];
      }
      acc_t v14[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v14[i0 * 5 + i1] = (v10[i0 * 5 + i1] + v13[i0 * 5 + i1]);
      }
      const scalar_t* v5 = b1 + nbr * 10;
      acc_t v18[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v18[i0 * 5 + i1] = (v15[i0 * 5 + i1] * v5[i0 * 5 + i1]);
      }
      acc_t v19[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int64_t j1 = 0; j1 < 5; ++j1) total += v18[i0 * 5 + j1];
        v19[i0] = total;
      }
      const acc_t* v21 = b8 + nbr * 2;
      acc_t v22[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v22[i0] = (v19[i0] + v21[i0]);
      }
      acc_t v23[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v23[i0] = seastar_exp(v22[i0]);
      }
      const acc_t* v25 = b9 + nbr * 2;
      acc_t v26[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v26[i0] = (v23[i0] * v25[i0]);
      }
      acc_t v27[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v27[i0 * 5 + i1] = (v14[i0 * 5 + i1] * v26[i0]);
      }
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v29[i0 * 5 + i1] += v27[i0 * 5 + i1];
      }
      acc_t v17[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v17[i0 * 5 + i1] = (v14[i0 * 5 + i1] * v16[i0 * 5 + i1]);
      }
      acc_t v28[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int64_t j1 = 0; j1 < 5; ++j1) total += v17[i0 * 5 + j1];
        v28[i0] = total;
      }
      acc_t v35[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v35[i0] = (v28[i0] * v25[i0]);
      }
      const acc_t* v45 = b10 + nbr * 2;
      acc_t v46[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v46[i0] = (v35[i0] + v45[i0]);
      }
      acc_t v47[2];
      for (int64_t i0 = 0; i0 < 2; ++i0) {
        v47[i0] = (v46[i0] * v23[i0]);
      }
      acc_t v48[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v48[i0 * 5 + i1] = v47[i0];
      }
      acc_t v49[10];
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v49[i0 * 5 + i1] = (v48[i0 * 5 + i1] * v5[i0 * 5 + i1]);
      }
      for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
        v51[i0 * 5 + i1] += v49[i0 * 5 + i1];
      }
    }
    acc_t v31[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v31[i0 * 5 + i1] = (-v16[i0 * 5 + i1]);
    }
    acc_t v32[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v32[i0 * 5 + i1] = ((acc_t)1.0 + v31[i0 * 5 + i1]);
    }
    acc_t v33[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v33[i0 * 5 + i1] = (v16[i0 * 5 + i1] * v32[i0 * 5 + i1]);
    }
    acc_t v34[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v34[i0 * 5 + i1] = (v29[i0 * 5 + i1] * v33[i0 * 5 + i1]);
    }
    acc_t v52[10];
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      v52[i0 * 5 + i1] = (v34[i0 * 5 + i1] + v51[i0 * 5 + i1]);
    }
    for (int64_t i0 = 0; i0 < 2; ++i0) for (int64_t i1 = 0; i1 < 5; ++i1) {
      b6[r * 10 + i0 * 5 + i1] = v52[i0 * 5 + i1];
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
  if (numels[0] != sizes[1] * 5) return 1;  // adjoint:out0@dst [5]
  if (numels[1] != sizes[1] * 10) return 2;  // feature:g@dst [2, 5]
  if (numels[2] != sizes[1] * 10) return 3;  // saved:13@dst [2, 5]
  if (numels[3] != sizes[0] * 10) return 4;  // feature:h@src [2, 5]
  if (numels[4] != sizes[1] * 2) return 5;  // saved:4@dst [2, 1]
  if (numels[5] != sizes[1] * 2) return 6;  // saved:8@dst [2, 1]
  if (numels[6] != sizes[0] * 10) return 7;  // gradient:h@src [2, 5]
  if (numels[7] != sizes[1] * 10) return 8;  // gradient:g@dst [2, 5]
  if (numels[8] != sizes[1] * 2) return 9;  // temp:21@dst [2, 1]
  if (numels[9] != sizes[1] * 2) return 10;  // temp:25@dst [2, 1]
  if (numels[10] != sizes[1] * 2) return 11;  // temp:45@dst [2, 1]
  backward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 11; ++k) p.buffers[k] = buffers[k];
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