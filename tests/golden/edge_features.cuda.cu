#include <algorithm>
#include <cstdint>
#include <cstdio>
#include "seastar_cuda.h"

namespace seastar___SEASTAR_PREFIX__ {
typedef float scalar_t;
typedef float acc_t;

static const char* last_error = "";
static int seastar_fail(int code, const char* message) { last_error = message; return code; }

struct seastar_indices {
  const void* data;
  bool wide;  // int64, else int32
  __host__ __device__ inline int64_t operator[](int64_t k) const {
    return wide ? SEASTAR_GLOBAL(static_cast<const int64_t*>(data)[k]) : (int64_t)SEASTAR_GLOBAL(static_cast<const int32_t*>(data)[k]);
  }
};

struct forward_params {
  int64_t num_src, num_dst, num_edges;
  int64_t dims[1];
  const void* graph[8];
  bool wide_indices;  // the graph's arrays hold int64, else int32
  void* buffers[4];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
  int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)
};

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__forward_kernel0(const forward_params p) {
  // dst rows, 1 loop(s) over their in-edges
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:w@edge
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:x@src
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:y@dst
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out0@dst
  constexpr int lanes = 8;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 32, group_bits = 5;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 6;
  acc_t* __restrict__ scratch = shared + group * row_scratch;
  for (int64_t rr = hub_block ? blockIdx.x : ((int64_t)blockIdx.x - p.hub_blocks) * block_groups + group; rr < p.num_dst; rr += hub_block ? p.num_dst : groups) {
    const int64_t r = order.data != nullptr ? order[rr] : rr;
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const bool split = rr < p.hub_blocks && end - begin >= 256;
    if (split != hub_block) continue;  // a hub block's row that is no hub, or a hub in another group
    // int offsets from begin: fewer registers live across the loops than two 64-bit bounds
    const int slice_begin = split ? (int)(((end - begin) * group) >> group_bits) : 0;
    const int slice_end = split ? (int)(((end - begin) * (group + 1)) >> group_bits)
                                : (int)(end - begin);
    (void)slice_begin; (void)slice_end;
    const scalar_t* v3 = b2 + r * 6;
    acc_t* __restrict__ v5 = scratch + 0;
    for (int f0 = 0; f0 < 6; f0 += lanes * 4) {
      acc_t acc5[4]; for (int k = 0; k < 4; ++k) acc5[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        const scalar_t* v0 = b0 + eid * 6;
        const scalar_t* v1 = b1 + nbr * 6;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 6) {
            const auto g0 = SEASTAR_GLOBAL(v0[f]);
            const auto g1 = SEASTAR_GLOBAL(v1[f]);
            const acc_t e2 = (g0 * g1);
            const auto g2 = SEASTAR_GLOBAL(v3[f]);
            const acc_t e4 = (e2 + g2);
            acc5[k] += e4;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 6) {
          v5[f] = acc5[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 6; f += blockDim.x) {
        acc_t total = v5[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v5[f + (g - group) * row_scratch];
          total += x;
        }
        v5[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 6; f += lanes) {
          v5[f] = v5[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < 6; f += lanes) {
      SEASTAR_GLOBAL(b3[r * 6 + f]) = v5[f];
    }
    __syncwarp(group_mask);
  }
}

extern "C" int seastar___SEASTAR_PREFIX__forward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[2] * 6) return 1;  // feature:w@edge [6]
  if (numels[1] != sizes[0] * 6) return 2;  // feature:x@src [6]
  if (numels[2] != sizes[1] * 6) return 3;  // feature:y@dst [6]
  if (numels[3] != sizes[1] * 6) return 4;  // output:out0@dst [6]
  forward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 4; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 6;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 6;
    const int64_t groups_per_block = 256 / lanes;
    const int64_t row_bytes = p.scratch_per_row * (int64_t)sizeof(acc_t);
    int64_t shared = groups_per_block * row_bytes;
    const int64_t rows = p.num_dst;
    int64_t blocks = std::min<int64_t>((rows + groups_per_block - 1) / groups_per_block, 1 << 20);
    // the heaviest rows' blocks: as many as rows can have SPLIT_DEGREE edges, HUB_ROWS at most
    p.hub_blocks = std::min<int64_t>({rows, (int64_t)1024, p.num_edges / 256});
    p.scratch = nullptr;
    if (rows > 0) {
      SEASTAR_LAUNCH(__SEASTAR_PREFIX__forward_kernel0, (unsigned)(p.hub_blocks + blocks), 256, (size_t)shared, st)(p);
      const cudaError_t launched = cudaGetLastError();
      const cudaError_t freed = p.scratch != nullptr ? cudaFreeAsync(p.scratch, st) : cudaSuccess;
      if (launched != cudaSuccess || freed != cudaSuccess) {
        static char message[1024];  // what failed, in which kernel, launched how
        std::snprintf(message, sizeof message, "%s %s (%lld rows, %d threads a row, %lld bytes of shared memory a block): %s",
                      launched != cudaSuccess ? "launching" : "freeing the scratch of", "__SEASTAR_PREFIX__forward_kernel0",
                      (long long)rows, lanes, (long long)shared,
                      cudaGetErrorString(launched != cudaSuccess ? launched : freed));
        return seastar_fail(-3, message);
      }
    }
  }
  return 0;
}

struct backward_params {
  int64_t num_src, num_dst, num_edges;
  int64_t dims[1];
  const void* graph[8];
  bool wide_indices;  // the graph's arrays hold int64, else int32
  void* buffers[6];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
  int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)
};

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__backward_kernel0(const backward_params p) {
  // dst rows, 1 loop(s) over their in-edges
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:x@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // gradient:w@edge
  scalar_t* __restrict__ b5 = (scalar_t*)p.buffers[5];  // gradient:y@dst
  constexpr int lanes = 8;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 32, group_bits = 5;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 12;
  acc_t* __restrict__ scratch = shared + group * row_scratch;
  for (int64_t rr = hub_block ? blockIdx.x : ((int64_t)blockIdx.x - p.hub_blocks) * block_groups + group; rr < p.num_dst; rr += hub_block ? p.num_dst : groups) {
    const int64_t r = order.data != nullptr ? order[rr] : rr;
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const bool split = rr < p.hub_blocks && end - begin >= 256;
    if (split != hub_block) continue;  // a hub block's row that is no hub, or a hub in another group
    // int offsets from begin: fewer registers live across the loops than two 64-bit bounds
    const int slice_begin = split ? (int)(((end - begin) * group) >> group_bits) : 0;
    const int slice_end = split ? (int)(((end - begin) * (group + 1)) >> group_bits)
                                : (int)(end - begin);
    (void)slice_begin; (void)slice_end;
    const scalar_t* v0 = b0 + r * 6;
    acc_t* __restrict__ v1 = scratch + 0;
    for (int f = lane; f < 6; f += lanes) {
      v1[f] = (acc_t)0.0;
    }
    for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
      const int64_t nbr = nbrs[j], eid = eids[j];
      for (int f = lane; f < 6; f += lanes) {
        v1[f] += SEASTAR_GLOBAL(v0[f]);
      }
      const scalar_t* v2 = b1 + nbr * 6;
      acc_t* __restrict__ v3 = scratch + (6);
      for (int f = lane; f < 6; f += lanes) {
        v3[f] = (SEASTAR_GLOBAL(v0[f]) * SEASTAR_GLOBAL(v2[f]));
      }
      __syncwarp(group_mask);
      for (int f = lane; f < 6; f += lanes) {
        SEASTAR_GLOBAL(b3[eid * 6 + f]) = v3[f];
      }
      __syncwarp(group_mask);
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 6; f += blockDim.x) {
        acc_t total = v1[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v1[f + (g - group) * row_scratch];
          total += x;
        }
        v1[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 6; f += lanes) {
          v1[f] = v1[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < 6; f += lanes) {
      SEASTAR_GLOBAL(b5[r * 6 + f]) = v1[f];
    }
    __syncwarp(group_mask);
  }
}

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__backward_kernel1(const backward_params p) {
  // src rows, 1 loop(s) over their out-edges
  const seastar_indices indptr{p.graph[3], p.wide_indices};
  const seastar_indices nbrs{p.graph[4], p.wide_indices};
  const seastar_indices eids{p.graph[5], p.wide_indices};
  const seastar_indices order{p.graph[7], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:w@edge
  scalar_t* __restrict__ b4 = (scalar_t*)p.buffers[4];  // gradient:x@src
  constexpr int lanes = 8;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 32, group_bits = 5;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 6;
  acc_t* __restrict__ scratch = shared + group * row_scratch;
  for (int64_t rr = hub_block ? blockIdx.x : ((int64_t)blockIdx.x - p.hub_blocks) * block_groups + group; rr < p.num_src; rr += hub_block ? p.num_src : groups) {
    const int64_t r = order.data != nullptr ? order[rr] : rr;
    const int64_t begin = indptr[r], end = indptr[r + 1];
    (void)begin; (void)end;
    const bool split = rr < p.hub_blocks && end - begin >= 256;
    if (split != hub_block) continue;  // a hub block's row that is no hub, or a hub in another group
    // int offsets from begin: fewer registers live across the loops than two 64-bit bounds
    const int slice_begin = split ? (int)(((end - begin) * group) >> group_bits) : 0;
    const int slice_end = split ? (int)(((end - begin) * (group + 1)) >> group_bits)
                                : (int)(end - begin);
    (void)slice_begin; (void)slice_end;
    acc_t* __restrict__ v6 = scratch + 0;
    for (int f0 = 0; f0 < 6; f0 += lanes * 4) {
      acc_t acc6[4]; for (int k = 0; k < 4; ++k) acc6[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j], eid = eids[j];
        const scalar_t* v0 = b0 + nbr * 6;
        const scalar_t* v4 = b2 + eid * 6;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 6) {
            const auto g0 = SEASTAR_GLOBAL(v0[f]);
            const auto g1 = SEASTAR_GLOBAL(v4[f]);
            const acc_t e5 = (g0 * g1);
            acc6[k] += e5;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 6) {
          v6[f] = acc6[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 6; f += blockDim.x) {
        acc_t total = v6[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v6[f + (g - group) * row_scratch];
          total += x;
        }
        v6[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 6; f += lanes) {
          v6[f] = v6[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < 6; f += lanes) {
      SEASTAR_GLOBAL(b4[r * 6 + f]) = v6[f];
    }
    __syncwarp(group_mask);
  }
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
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
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 6; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 6;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 12;
    const int64_t groups_per_block = 256 / lanes;
    const int64_t row_bytes = p.scratch_per_row * (int64_t)sizeof(acc_t);
    int64_t shared = groups_per_block * row_bytes;
    const int64_t rows = p.num_dst;
    int64_t blocks = std::min<int64_t>((rows + groups_per_block - 1) / groups_per_block, 1 << 20);
    // the heaviest rows' blocks: as many as rows can have SPLIT_DEGREE edges, HUB_ROWS at most
    p.hub_blocks = std::min<int64_t>({rows, (int64_t)1024, p.num_edges / 256});
    p.scratch = nullptr;
    if (rows > 0) {
      SEASTAR_LAUNCH(__SEASTAR_PREFIX__backward_kernel0, (unsigned)(p.hub_blocks + blocks), 256, (size_t)shared, st)(p);
      const cudaError_t launched = cudaGetLastError();
      const cudaError_t freed = p.scratch != nullptr ? cudaFreeAsync(p.scratch, st) : cudaSuccess;
      if (launched != cudaSuccess || freed != cudaSuccess) {
        static char message[1024];  // what failed, in which kernel, launched how
        std::snprintf(message, sizeof message, "%s %s (%lld rows, %d threads a row, %lld bytes of shared memory a block): %s",
                      launched != cudaSuccess ? "launching" : "freeing the scratch of", "__SEASTAR_PREFIX__backward_kernel0",
                      (long long)rows, lanes, (long long)shared,
                      cudaGetErrorString(launched != cudaSuccess ? launched : freed));
        return seastar_fail(-3, message);
      }
    }
  }
  {
    const int64_t widest = 6;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 6;
    const int64_t groups_per_block = 256 / lanes;
    const int64_t row_bytes = p.scratch_per_row * (int64_t)sizeof(acc_t);
    int64_t shared = groups_per_block * row_bytes;
    const int64_t rows = p.num_src;
    int64_t blocks = std::min<int64_t>((rows + groups_per_block - 1) / groups_per_block, 1 << 20);
    // the heaviest rows' blocks: as many as rows can have SPLIT_DEGREE edges, HUB_ROWS at most
    p.hub_blocks = std::min<int64_t>({rows, (int64_t)1024, p.num_edges / 256});
    p.scratch = nullptr;
    if (rows > 0) {
      SEASTAR_LAUNCH(__SEASTAR_PREFIX__backward_kernel1, (unsigned)(p.hub_blocks + blocks), 256, (size_t)shared, st)(p);
      const cudaError_t launched = cudaGetLastError();
      const cudaError_t freed = p.scratch != nullptr ? cudaFreeAsync(p.scratch, st) : cudaSuccess;
      if (launched != cudaSuccess || freed != cudaSuccess) {
        static char message[1024];  // what failed, in which kernel, launched how
        std::snprintf(message, sizeof message, "%s %s (%lld rows, %d threads a row, %lld bytes of shared memory a block): %s",
                      launched != cudaSuccess ? "launching" : "freeing the scratch of", "__SEASTAR_PREFIX__backward_kernel1",
                      (long long)rows, lanes, (long long)shared,
                      cudaGetErrorString(launched != cudaSuccess ? launched : freed));
        return seastar_fail(-3, message);
      }
    }
  }
  return 0;
}

extern "C" const char* seastar___SEASTAR_PREFIX__last_error() { return last_error; }

}  // namespace seastar___SEASTAR_PREFIX__