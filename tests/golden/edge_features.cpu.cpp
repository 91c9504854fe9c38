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

static const char* last_error = "";
static int seastar_fail(int code, const char* message) { last_error = message; return code; }

struct forward_params {
  int64_t num_src, num_dst, num_edges;
  int64_t dims[1];
  const int64_t* graph[8];
  void* buffers[4];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
};

SEASTAR_CLONES static void __SEASTAR_PREFIX__forward_kernel0(const forward_params& p) {
  // dst rows, 1 loop(s) over their in-edges
  const int64_t* __restrict__ indptr = p.graph[0];
  const int64_t* __restrict__ nbrs = p.graph[1];
  const int64_t* __restrict__ eids = p.graph[2];
  const int64_t* __restrict__ order = p.graph[6];
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  scalar_t* __restrict__ b0 = (scalar_t*)p.buffers[0];  // feature:w@edge
  scalar_t* __restrict__ b1 = (scalar_t*)p.buffers[1];  // feature:x@src
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // feature:y@dst
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out0@dst
  #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
  for (int64_t r = 0; r < p.num_dst; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v3 = b2 + r * 6;
    acc_t v5[6];
    for (int64_t c0 = 0; c0 < 6; c0 += 16) {
      acc_t acc5[16]; for (int k = 0; k < 16; ++k) acc5[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        (void)nbr; (void)eid;
        const scalar_t* v0 = b0 + eid * 6;
        const scalar_t* v1 = b1 + nbr * 6;
        if (j + 16 < end) __builtin_prefetch(b0 + eids[j + 16] * 6 + c0);
        #pragma omp simd
        for (int k = 0; k < 6; ++k) {
          const acc_t e2 = (v0[(c0 + k)] * v1[(c0 + k)]);
          const acc_t e4 = (e2 + v3[(c0 + k)]);
          acc5[k] += e4;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 6; ++k) {
        v5[(c0 + k)] = acc5[k];
      }
    }
    for (int64_t i0 = 0; i0 < 6; ++i0) {
      b3[r * 6 + i0] = v5[i0];
    }
  }
}

extern "C" int seastar___SEASTAR_PREFIX__forward(const int64_t* sizes, const int64_t* dims, const int64_t* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[2] * 6) return 1;  // feature:w@edge [6]
  if (numels[1] != sizes[0] * 6) return 2;  // feature:x@src [6]
  if (numels[2] != sizes[1] * 6) return 3;  // feature:y@dst [6]
  if (numels[3] != sizes[1] * 6) return 4;  // output:out0@dst [6]
  forward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  for (int k = 0; k < 4; ++k) p.buffers[k] = buffers[k];
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
  void* buffers[6];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
};

SEASTAR_CLONES static void __SEASTAR_PREFIX__backward_kernel0(const backward_params& p) {
  // dst rows, 1 loop(s) over their in-edges
  const int64_t* __restrict__ indptr = p.graph[0];
  const int64_t* __restrict__ nbrs = p.graph[1];
  const int64_t* __restrict__ eids = p.graph[2];
  const int64_t* __restrict__ order = p.graph[6];
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  scalar_t* __restrict__ b0 = (scalar_t*)p.buffers[0];  // adjoint:out0@dst
  scalar_t* __restrict__ b1 = (scalar_t*)p.buffers[1];  // feature:x@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // gradient:w@edge
  scalar_t* __restrict__ b5 = (scalar_t*)p.buffers[5];  // gradient:y@dst
  #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
  for (int64_t r = 0; r < p.num_dst; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const scalar_t* v0 = b0 + r * 6;
    acc_t v1[6];
    for (int64_t i0 = 0; i0 < 6; ++i0) {
      v1[i0] = (acc_t)0.0;
    }
    for (int64_t j = begin; j < end; ++j) {
      const int64_t nbr = nbrs[j], eid = eids[j];
      (void)nbr; (void)eid;
      for (int64_t i0 = 0; i0 < 6; ++i0) {
        v1[i0] += v0[i0];
      }
      const scalar_t* v2 = b1 + nbr * 6;
      acc_t v3[6];
      for (int64_t i0 = 0; i0 < 6; ++i0) {
        v3[i0] = (v0[i0] * v2[i0]);
      }
      for (int64_t i0 = 0; i0 < 6; ++i0) {
        b3[eid * 6 + i0] = v3[i0];
      }
    }
    for (int64_t i0 = 0; i0 < 6; ++i0) {
      b5[r * 6 + i0] = v1[i0];
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
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // feature:w@edge
  scalar_t* __restrict__ b4 = (scalar_t*)p.buffers[4];  // gradient:x@src
  #pragma omp parallel for schedule(dynamic, 32) num_threads(p.num_threads)
  for (int64_t r = 0; r < p.num_src; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    acc_t v6[6];
    for (int64_t c0 = 0; c0 < 6; c0 += 16) {
      acc_t acc6[16]; for (int k = 0; k < 16; ++k) acc6[k] = (acc_t)0.0;
      for (int64_t j = begin; j < end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        (void)nbr; (void)eid;
        const scalar_t* v0 = b0 + nbr * 6;
        const scalar_t* v4 = b2 + eid * 6;
        if (j + 16 < end) __builtin_prefetch(b2 + eids[j + 16] * 6 + c0);
        #pragma omp simd
        for (int k = 0; k < 6; ++k) {
          const acc_t e5 = (v0[(c0 + k)] * v4[(c0 + k)]);
          acc6[k] += e5;
        }
      }
      #pragma omp simd
      for (int k = 0; k < 6; ++k) {
        v6[(c0 + k)] = acc6[k];
      }
    }
    for (int64_t i0 = 0; i0 < 6; ++i0) {
      b4[r * 6 + i0] = v6[i0];
    }
  }
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const int64_t* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[1] * 6) return 1;  // adjoint:out0@dst [6]
  if (numels[1] != sizes[0] * 6) return 2;  // feature:x@src [6]
  if (numels[2] != sizes[2] * 6) return 3;  // feature:w@edge [6]
  if (numels[3] != sizes[2] * 6) return 4;  // gradient:w@edge [6]
  if (numels[4] != sizes[0] * 6) return 5;  // gradient:x@src [6]
  if (numels[5] != sizes[1] * 6) return 6;  // gradient:y@dst [6]
  backward_params p;
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
  __SEASTAR_PREFIX__backward_kernel0(p);
  __SEASTAR_PREFIX__backward_kernel1(p);
  std::free(p.scratch);
  return 0;
}

extern "C" const char* seastar___SEASTAR_PREFIX__last_error() { return last_error; }

}  // namespace seastar___SEASTAR_PREFIX__