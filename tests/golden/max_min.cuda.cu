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
  void* buffers[6];
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
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:x@src
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:y@dst
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // output:out0@dst
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out1@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:1@dst
  constexpr int lanes = 4;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 64, group_bits = 6;
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
    const scalar_t* v2 = b1 + r * 3;
    acc_t* __restrict__ v1 = scratch + 0;
    acc_t* __restrict__ v4 = scratch + (3);
    for (int f0 = 0; f0 < 3; f0 += lanes * 4) {
      acc_t acc1[4]; for (int k = 0; k < 4; ++k) acc1[k] = (acc_t)__int_as_float((int)0xff800000);
      acc_t acc4[4]; for (int k = 0; k < 4; ++k) acc4[k] = (acc_t)__int_as_float(0x7f800000);
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 3;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 3) {
            const auto g0 = SEASTAR_GLOBAL(v0[f]);
            const auto g1 = SEASTAR_GLOBAL(v2[f]);
            const acc_t e3 = (g0 * g1);
            acc1[k] = (g0 > acc1[k] || g0 != g0) ? g0 : acc1[k];
            acc4[k] = (e3 < acc4[k] || e3 != e3) ? e3 : acc4[k];
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 3) {
          v1[f] = acc1[k];
          v4[f] = acc4[k];
        }
      }
    }
    if (begin + slice_begin == begin + slice_end) {
      for (int f = lane; f < 3; f += lanes) {
        v1[f] = 0;
      }
    }
    if (begin + slice_begin == begin + slice_end) {
      for (int f = lane; f < 3; f += lanes) {
        v4[f] = 0;
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v1[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v1[f + (g - group) * row_scratch];
          total = (x > total || x != x) ? x : total;
        }
        v1[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v4[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v4[f + (g - group) * row_scratch];
          total = (x < total || x != x) ? x : total;
        }
        v4[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 3; f += lanes) {
          v1[f] = v1[f - group * row_scratch];
        }
        for (int f = lane; f < 3; f += lanes) {
          v4[f] = v4[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b2[r * 3 + f]) = v1[f];
    }
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b3[r * 3 + f]) = v4[f];
    }
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b4[r * 3 + f]) = v4[f];
    }
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b5[r * 3 + f]) = v1[f];
    }
    __syncwarp(group_mask);
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
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 3;
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
  void* buffers[10];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
  int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)
};

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__backward_kernel0(const backward_params p) {
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
  constexpr int lanes = 4;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 64, group_bits = 6;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 9;
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
    const scalar_t* v3 = b3 + r * 3;
    const acc_t* v5 = b4 + r * 3;
    const acc_t* v15 = b5 + r * 3;
    acc_t* __restrict__ v7 = scratch + 0;
    acc_t* __restrict__ v17 = scratch + (3);
    for (int f0 = 0; f0 < 3; f0 += lanes * 4) {
      acc_t acc7[4]; for (int k = 0; k < 4; ++k) acc7[k] = (acc_t)0.0;
      acc_t acc17[4]; for (int k = 0; k < 4; ++k) acc17[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v2 = b2 + nbr * 3;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 3) {
            const auto g0 = SEASTAR_GLOBAL(v2[f]);
            const auto g1 = SEASTAR_GLOBAL(v3[f]);
            const acc_t e4 = (g0 * g1);
            const auto g2 = SEASTAR_GLOBAL(v5[f]);
            const bool e6 = (e4 == g2);
            const auto g3 = SEASTAR_GLOBAL(v15[f]);
            const bool e16 = (g0 == g3);
            acc7[k] += (acc_t)e6;
            acc17[k] += (acc_t)e16;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 3) {
          v7[f] = acc7[k];
          v17[f] = acc17[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v7[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v7[f + (g - group) * row_scratch];
          total += x;
        }
        v7[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v17[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v17[f + (g - group) * row_scratch];
          total += x;
        }
        v17[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 3; f += lanes) {
          v7[f] = v7[f - group * row_scratch];
        }
        for (int f = lane; f < 3; f += lanes) {
          v17[f] = v17[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    const scalar_t* v1 = b1 + r * 3;
    acc_t v8[3];
    for (int i0 = 0; i0 < 3; ++i0) {
      v8[i0] = ((acc_t)1 / v7[i0]);
    }
    acc_t* __restrict__ v14 = scratch + (3) + (3);
    for (int f0 = 0; f0 < 3; f0 += lanes * 4) {
      acc_t acc14[4]; for (int k = 0; k < 4; ++k) acc14[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v2 = b2 + nbr * 3;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 3) {
            const auto g0 = SEASTAR_GLOBAL(v2[f]);
            const auto g1 = SEASTAR_GLOBAL(v3[f]);
            const acc_t e4 = (g0 * g1);
            const auto g2 = SEASTAR_GLOBAL(v5[f]);
            const bool e6 = (e4 == g2);
            const acc_t e9 = ((acc_t)e6 * v8[f]);
            const auto g3 = SEASTAR_GLOBAL(v1[f]);
            const acc_t e10 = (g3 * e9);
            const acc_t e12 = (e10 * g0);
            acc14[k] += e12;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 3) {
          v14[f] = acc14[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v14[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v14[f + (g - group) * row_scratch];
          total += x;
        }
        v14[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 3; f += lanes) {
          v14[f] = v14[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b7[r * 3 + f]) = v14[f];
    }
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b8[r * 3 + f]) = v8[f];
    }
    acc_t v18[3];
    for (int i0 = 0; i0 < 3; ++i0) {
      v18[i0] = ((acc_t)1 / v17[i0]);
    }
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b9[r * 3 + f]) = v18[f];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // adjoint:out1@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:x@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:y@dst
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:1@dst
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:x@src
  const acc_t* __restrict__ b8 = (const acc_t*)p.buffers[8];  // temp:8@dst
  const acc_t* __restrict__ b9 = (const acc_t*)p.buffers[9];  // temp:18@dst
  constexpr int lanes = 4;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 64, group_bits = 6;
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
    const scalar_t* v2 = b2 + r * 3;
    acc_t* __restrict__ v13 = scratch + 0;
    acc_t* __restrict__ v21 = scratch + (3);
    for (int f0 = 0; f0 < 3; f0 += lanes * 4) {
      acc_t acc13[4]; for (int k = 0; k < 4; ++k) acc13[k] = (acc_t)0.0;
      acc_t acc21[4]; for (int k = 0; k < 4; ++k) acc21[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v3 = b3 + nbr * 3;
        const acc_t* v5 = b4 + nbr * 3;
        const acc_t* v8 = b8 + nbr * 3;
        const scalar_t* v1 = b1 + nbr * 3;
        const acc_t* v15 = b5 + nbr * 3;
        const acc_t* v18 = b9 + nbr * 3;
        const scalar_t* v0 = b0 + nbr * 3;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 3) {
            const auto g0 = SEASTAR_GLOBAL(v2[f]);
            const auto g1 = SEASTAR_GLOBAL(v3[f]);
            const acc_t e4 = (g0 * g1);
            const auto g2 = SEASTAR_GLOBAL(v5[f]);
            const bool e6 = (e4 == g2);
            const auto g3 = SEASTAR_GLOBAL(v8[f]);
            const acc_t e9 = ((acc_t)e6 * g3);
            const auto g4 = SEASTAR_GLOBAL(v1[f]);
            const acc_t e10 = (g4 * e9);
            const acc_t e11 = (e10 * g1);
            const auto g5 = SEASTAR_GLOBAL(v15[f]);
            const bool e16 = (g0 == g5);
            const auto g6 = SEASTAR_GLOBAL(v18[f]);
            const acc_t e19 = ((acc_t)e16 * g6);
            const auto g7 = SEASTAR_GLOBAL(v0[f]);
            const acc_t e20 = (g7 * e19);
            acc13[k] += e11;
            acc21[k] += e20;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 3) {
          v13[f] = acc13[k];
          v21[f] = acc21[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v13[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v13[f + (g - group) * row_scratch];
          total += x;
        }
        v13[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 3; f += blockDim.x) {
        acc_t total = v21[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v21[f + (g - group) * row_scratch];
          total += x;
        }
        v21[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 3; f += lanes) {
          v13[f] = v13[f - group * row_scratch];
        }
        for (int f = lane; f < 3; f += lanes) {
          v21[f] = v21[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    acc_t v22[3];
    for (int i0 = 0; i0 < 3; ++i0) {
      v22[i0] = (v13[i0] + v21[i0]);
    }
    for (int f = lane; f < 3; f += lanes) {
      SEASTAR_GLOBAL(b6[r * 3 + f]) = v22[f];
    }
    __syncwarp(group_mask);
  }
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
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 3;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 9;
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
    const int64_t widest = 3;
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