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
  // dst rows, 1 loop(s) over their in-edges
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:x@src
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:y@dst
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // output:out0@dst
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out1@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:1@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v2 = b1 + r * 3;
    acc_t v1[3];
    acc_t v4[3];
    for (int64_t c0 = 0; c0 < 3; c0 += 32) {
      acc_t acc1[32]; for (int k = 0; k < 32; ++k) acc1[k] = (-(acc_t)INFINITY);
      acc_t acc4[32]; for (int k = 0; k < 32; ++k) acc4[k] = (acc_t)INFINITY;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 3;
        #pragma omp simd
        for (int k = 0; k < 3; ++k) {
          const acc_t e3 = (v0[(c0 + k)] * v2[(c0 + k)]);
          acc1[k] = (v0[(c0 + k)] > acc1[k] || v0[(c0 + k)] != v0[(c0 + k)]) ? v0[(c0 + k)] : acc1[k];
          acc4[k] = (e3 < acc4[k] || e3 != e3) ? e3 : acc4[k];
        }
      }
      #pragma omp simd
      for (int k = 0; k < 3; ++k) {
        v1[(c0 + k)] = acc1[k];
        v4[(c0 + k)] = acc4[k];
      }
    }
    if (begin == end) {
      for (int64_t i0 = 0; i0 < 3; ++i0) {
        v1[i0] = 0;
      }
    }
    if (begin == end) {
      for (int64_t i0 = 0; i0 < 3; ++i0) {
        v4[i0] = 0;
      }
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b2[r * 3 + i0] = v1[i0];
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b3[r * 3 + i0] = v4[i0];
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b4[r * 3 + i0] = v4[i0];
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b5[r * 3 + i0] = v1[i0];
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
  if (numels[0] != sizes[0] * 3) return 1;  // feature:x@src [3]
  if (numels[1] != sizes[1] * 3) return 2;  // feature:y@dst [3]
  if (numels[2] != sizes[1] * 3) return 3;  // output:out0@dst [3]
  if (numels[3] != sizes[1] * 3) return 4;  // output:out1@dst [3]
  if (numels[4] != sizes[1] * 3) return 5;  // saved:4@dst [3]
  if (numels[5] != sizes[1] * 3) return 6;  // saved:1@dst [3]
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
  void* buffers[10];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // adjoint:out1@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:x@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:y@dst
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:1@dst
  scalar_t* __restrict__ b7 = (scalar_t*)p.buffers[7];  // gradient:y@dst
  acc_t* __restrict__ b8 = (acc_t*)p.buffers[8];  // temp:8@dst
  acc_t* __restrict__ b9 = (acc_t*)p.buffers[9];  // temp:18@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v3 = b3 + r * 3;
    const acc_t* v5 = b4 + r * 3;
    const acc_t* v15 = b5 + r * 3;
    acc_t v7[3];
    acc_t v17[3];
    for (int64_t c0 = 0; c0 < 3; c0 += 32) {
      acc_t acc7[32]; for (int k = 0; k < 32; ++k) acc7[k] = (acc_t)0.0;
      acc_t acc17[32]; for (int k = 0; k < 32; ++k) acc17[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v2 = b2 + nbr * 3;
        #pragma omp simd
        for (int k = 0; k < 3; ++k) {
          const acc_t e4 = (v2[(c0 + k)] * v3[(c0 + k)]);
          const bool e6 = (e4 == v5[(c0 + k)]);
          const bool e16 = (v2[(c0 + k)] == v15[(c0 + k)]);
          acc7[k] += (acc_t)e6;
          acc17[k] += (acc_t)e16;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 3; ++k) {
        v7[(c0 + k)] = acc7[k];
        v17[(c0 + k)] = acc17[k];
      }
    }
    const scalar_t* v1 = b1 + r * 3;
    acc_t v8[3];
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      v8[i0] = ((acc_t)1 / v7[i0]);
    }
    acc_t v14[3];
    for (int64_t c0 = 0; c0 < 3; c0 += 64) {
      acc_t acc14[64]; for (int k = 0; k < 64; ++k) acc14[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v2 = b2 + nbr * 3;
        #pragma omp simd
        for (int k = 0; k < 3; ++k) {
          const acc_t e4 = (v2[(c0 + k)] * v3[(c0 + k)]);
          const bool e6 = (e4 == v5[(c0 + k)]);
          const acc_t e9 = ((acc_t)e6 * v8[(c0 + k)]);
          const acc_t e10 = (v1[(c0 + k)] * e9);
          const acc_t e12 = (e10 * v2[(c0 + k)]);
          acc14[k] += e12;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 3; ++k) {
        v14[(c0 + k)] = acc14[k];
      }
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b7[r * 3 + i0] = v14[i0];
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b8[r * 3 + i0] = v8[i0];
    }
    acc_t v18[3];
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      v18[i0] = ((acc_t)1 / v17[i0]);
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b9[r * 3 + i0] = v18[i0];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // adjoint:out1@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:x@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:y@dst
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:1@dst
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:x@src
  const acc_t* __restrict__ b8 = (const acc_t*)p.buffers[8];  // temp:8@dst
  const acc_t* __restrict__ b9 = (const acc_t*)p.buffers[9];  // temp:18@dst
  (void)scratch;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v2 = b2 + r * 3;
    acc_t v13[3];
    acc_t v21[3];
    for (int64_t c0 = 0; c0 < 3; c0 += 32) {
      acc_t acc13[32]; for (int k = 0; k < 32; ++k) acc13[k] = (acc_t)0.0;
      acc_t acc21[32]; for (int k = 0; k < 32; ++k) acc21[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v3 = b3 + nbr * 3;
        const acc_t* v5 = b4 + nbr * 3;
        const acc_t* v8 = b8 + nbr * 3;
        const scalar_t* v1 = b1 + nbr * 3;
        const acc_t* v15 = b5 + nbr * 3;
        const acc_t* v18 = b9 + nbr * 3;
        const scalar_t* v0 = b0 + nbr * 3;
        #pragma omp simd
        for (int k = 0; k < 3; ++k) {
          const acc_t e4 = (v2[(c0 + k)] * v3[(c0 + k)]);
          const bool e6 = (e4 == v5[(c0 + k)]);
          const acc_t e9 = ((acc_t)e6 * v8[(c0 + k)]);
          const acc_t e10 = (v1[(c0 + k)] * e9);
          const acc_t e11 = (e10 * v3[(c0 + k)]);
          const bool e16 = (v2[(c0 + k)] == v15[(c0 + k)]);
          const acc_t e19 = ((acc_t)e16 * v18[(c0 + k)]);
          const acc_t e20 = (v0[(c0 + k)] * e19);
          acc13[k] += e11;
          acc21[k] += e20;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 3; ++k) {
        v13[(c0 + k)] = acc13[k];
        v21[(c0 + k)] = acc21[k];
      }
    }
    acc_t v22[3];
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      v22[i0] = (v13[i0] + v21[i0]);
    }
    for (int64_t i0 = 0; i0 < 3; ++i0) {
      b6[r * 3 + i0] = v22[i0];
    }
  }
}

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel1(const backward_params& p) {
  // src rows, 1 loop(s) over their out-edges
  const seastar_indices indptr{p.graph[3], p.wide_indices};
  const seastar_indices nbrs{p.graph[4], p.wide_indices};
  const seastar_indices eids{p.graph[5], p.wide_indices};
  const seastar_indices order{p.graph[7], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // adjoint:out1@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:x@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:y@dst
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:1@dst
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:x@src
  const acc_t* __restrict__ b8 = (const acc_t*)p.buffers[8];  // temp:8@dst
  const acc_t* __restrict__ b9 = (const acc_t*)p.buffers[9];  // temp:18@dst
  static seastar_chunk_tuner tuner;
  bool sorted = seastar_source_chunk((3) * sizeof(scalar_t) + (3) * sizeof(scalar_t) + (3) * sizeof(scalar_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t), 0) < p.num_dst / 2 && p.num_src > 0;
  for (int64_t probe = 0; probe < 64 && sorted; ++probe) {
    const int64_t row = probe * p.num_src / 64;
    for (int64_t j = indptr[row] + 1; j < indptr[row + 1] && sorted; ++j) sorted = nbrs[j - 1] <= nbrs[j];
  }
  acc_t* partial = nullptr;
  int64_t* cursor = nullptr;
  if (sorted) {
    partial = (acc_t*)std::malloc(sizeof(acc_t) * (size_t)((3) + (3)) * (size_t)p.num_src);
    cursor = (int64_t*)std::malloc(sizeof(int64_t) * (size_t)p.num_src);
  }
  const bool chunkable = partial != nullptr && cursor != nullptr;
  const int64_t size_class = ((3) * sizeof(scalar_t) + (3) * sizeof(scalar_t) + (3) * sizeof(scalar_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t)) * 64 + (64 - __builtin_clzll((uint64_t)p.num_dst | 1));
  const int tuned = chunkable && !seastar_chunk_fixed() ? tuner.choice(size_class) : 0;
  const int attempts = tuned < 0 ? seastar_chunk_candidates + 1 : 1;
  double fastest = 0;
  int best = 0;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const int candidate = tuned >= 0 ? tuned : (attempt > 0 ? attempt - 1 : 0);
    const int64_t chunk = seastar_source_chunk((3) * sizeof(scalar_t) + (3) * sizeof(scalar_t) + (3) * sizeof(scalar_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t) + (3) * sizeof(acc_t), candidate);
    const auto start = std::chrono::steady_clock::now();
    if (chunkable && chunk < p.num_dst) {
      const int64_t chunks = (p.num_dst + chunk - 1) / chunk;
      for (int64_t c = 0; c < chunks; ++c) {
        const bool first = c == 0, last = c + 1 == chunks;
        const int64_t high = (c + 1) * chunk;  // this chunk's neighbours: below high, from the last's
        #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
        for (int64_t r = 0; r < p.num_src; ++r) {
          const int64_t begin = first ? (int64_t)indptr[r] : cursor[r];
          int64_t end = indptr[r + 1];
          if (!last) {
            int64_t stop = begin;
            while (stop < end && nbrs[stop] < high) ++stop;
            cursor[r] = end = stop;
          }
          if (begin == end && !first && !last) continue;
          const scalar_t* v2 = b2 + r * 3;
          acc_t* __restrict__ v13 = partial + r * ((3) + (3)) + 0;
          acc_t* __restrict__ v21 = partial + r * ((3) + (3)) + (3);
          for (int64_t c0 = 0; c0 < 3; c0 += 32) {
            acc_t acc13[32]; for (int k = 0; k < 32; ++k) acc13[k] = (acc_t)0.0;
            acc_t acc21[32]; for (int k = 0; k < 32; ++k) acc21[k] = (acc_t)0.0;
            if (!first) {
              #pragma omp simd
              for (int k = 0; k < 3; ++k) {
                acc13[k] = v13[(c0 + k)];
                acc21[k] = v21[(c0 + k)];
              }
            }
            for (int64_t j = begin; j < end; ++j) {
              const int64_t nbr = nbrs[j];
              const scalar_t* v3 = b3 + nbr * 3;
              const acc_t* v5 = b4 + nbr * 3;
              const acc_t* v8 = b8 + nbr * 3;
              const scalar_t* v1 = b1 + nbr * 3;
              const acc_t* v15 = b5 + nbr * 3;
              const acc_t* v18 = b9 + nbr * 3;
              const scalar_t* v0 = b0 + nbr * 3;
              #pragma omp simd
              for (int k = 0; k < 3; ++k) {
                const acc_t e4 = (v2[(c0 + k)] * v3[(c0 + k)]);
                const bool e6 = (e4 == v5[(c0 + k)]);
                const acc_t e9 = ((acc_t)e6 * v8[(c0 + k)]);
                const acc_t e10 = (v1[(c0 + k)] * e9);
                const acc_t e11 = (e10 * v3[(c0 + k)]);
                const bool e16 = (v2[(c0 + k)] == v15[(c0 + k)]);
                const acc_t e19 = ((acc_t)e16 * v18[(c0 + k)]);
                const acc_t e20 = (v0[(c0 + k)] * e19);
                acc13[k] += e11;
                acc21[k] += e20;
              }
            }
            #pragma omp simd
            for (int k = 0; k < 3; ++k) {
              v13[(c0 + k)] = acc13[k];
              v21[(c0 + k)] = acc21[k];
            }
          }
          if (!last) continue;  // the row's sums are not complete yet
          acc_t v22[3];
          for (int64_t i0 = 0; i0 < 3; ++i0) {
            v22[i0] = (v13[i0] + v21[i0]);
          }
          for (int64_t i0 = 0; i0 < 3; ++i0) {
            b6[r * 3 + i0] = v22[i0];
          }
        }
      }
    } else {
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
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (attempt > 0 && (attempt == 1 || seconds < fastest)) { fastest = seconds; best = candidate; }
  }
  if (tuned < 0) tuner.settle(size_class, best);
  std::free(partial);
  std::free(cursor);
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[1] * 3) return 1;  // adjoint:out0@dst [3]
  if (numels[1] != sizes[1] * 3) return 2;  // adjoint:out1@dst [3]
  if (numels[2] != sizes[0] * 3) return 3;  // feature:x@src [3]
  if (numels[3] != sizes[1] * 3) return 4;  // feature:y@dst [3]
  if (numels[4] != sizes[1] * 3) return 5;  // saved:4@dst [3]
  if (numels[5] != sizes[1] * 3) return 6;  // saved:1@dst [3]
  if (numels[6] != sizes[0] * 3) return 7;  // gradient:x@src [3]
  if (numels[7] != sizes[1] * 3) return 8;  // gradient:y@dst [3]
  if (numels[8] != sizes[1] * 3) return 9;  // temp:8@dst [3]
  if (numels[9] != sizes[1] * 3) return 10;  // temp:18@dst [3]
  backward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
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