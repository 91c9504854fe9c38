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
  // dst rows, 2 loop(s) over their in-edges
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
  constexpr int lanes = 16;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 16, group_bits = 4;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 39;
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
    const scalar_t* v1 = b1 + r * 10;
    acc_t* __restrict__ v4 = scratch + 0;
    acc_t* __restrict__ v8 = scratch + (2);
    for (int f0 = 0; f0 < 2; f0 += lanes * 4) {
      acc_t acc4[4]; for (int k = 0; k < 4; ++k) acc4[k] = (acc_t)__int_as_float((int)0xff800000);
      acc_t acc8[4]; for (int k = 0; k < 4; ++k) acc8[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 10;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 2) {
            acc_t e3 = 0;
            for (int r3_1 = 0; r3_1 < 5; ++r3_1) e3 += (SEASTAR_GLOBAL(v0[f * 5 + r3_1]) * SEASTAR_GLOBAL(v1[f * 5 + r3_1]));
            if (e3 > acc4[k] || e3 != e3) {
              const acc_t rescale4 = expf(acc4[k] - e3);
              acc8[k] *= rescale4;
              acc4[k] = e3;
            }
            const acc_t e5 = (-acc4[k]);
            const acc_t e6 = (e3 + e5);
            const acc_t e7 = expf(e6);
            acc8[k] += e7;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 2) {
          v4[f] = acc4[k];
          v8[f] = acc8[k];
        }
      }
    }
    if (begin + slice_begin == begin + slice_end) {
      for (int f = lane; f < 2; f += lanes) {
        v4[f] = 0;
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 2; f += blockDim.x) {
        const int i0 = f;
        acc_t top = v4[i0 - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v4[i0 + (g - group) * row_scratch];
          top = (x > top || x != x) ? x : top;
        }
        acc_t total = 0;
        for (int g = 0; g < block_groups; ++g) {
          const acc_t scale = expf(v4[i0 + (g - group) * row_scratch] - top);
          total += v8[f + (g - group) * row_scratch] * scale;
        }
        v8[f - group * row_scratch] = total;
      }
      __syncthreads();
      for (int f = threadIdx.x; f < 2; f += blockDim.x) {
        acc_t total = v4[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v4[f + (g - group) * row_scratch];
          total = (x > total || x != x) ? x : total;
        }
        v4[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 2; f += lanes) {
          v4[f] = v4[f - group * row_scratch];
        }
        for (int f = lane; f < 2; f += lanes) {
          v8[f] = v8[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    acc_t v5[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v5[i0] = (-v4[i0]);
    }
    acc_t v9[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v9[i0] = ((acc_t)1 / v8[i0]);
    }
    acc_t* __restrict__ v13 = scratch + (2) + (2);
    for (int f0 = 0; f0 < 10; f0 += lanes * 4) {
      acc_t acc13[4]; for (int k = 0; k < 4; ++k) acc13[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 10;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 10) {
            acc_t e3 = 0;
            for (int r3_1 = 0; r3_1 < 5; ++r3_1) e3 += (SEASTAR_GLOBAL(v0[(f / (5)) * 5 + r3_1]) * SEASTAR_GLOBAL(v1[(f / (5)) * 5 + r3_1]));
            const acc_t e6 = (e3 + v5[(f / (5))]);
            const acc_t e7 = expf(e6);
            const acc_t e10 = (e7 * v9[(f / (5))]);
            const auto g0 = SEASTAR_GLOBAL(v0[f]);
            const acc_t e11 = ((acc_t)1 / ((acc_t)1 + expf(-g0)));
            const acc_t e12 = (e10 * e11);
            acc13[k] += e12;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 10) {
          v13[f] = acc13[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 10; f += blockDim.x) {
        acc_t total = v13[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v13[f + (g - group) * row_scratch];
          total += x;
        }
        v13[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 10; f += lanes) {
          v13[f] = v13[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    acc_t* __restrict__ v14 = scratch + (2) + (2) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v14[f] = (SEASTAR_GLOBAL(v1[f]) + v13[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v15 = scratch + (2) + (2) + (10) + (10);
    for (int f = lane; f < 5; f += lanes) {
      const int i0 = f;
      acc_t total = 0;
      for (int j0 = 0; j0 < 2; ++j0) total += v14[j0 * 5 + i0];
      v15[f] = total;
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v17 = scratch + (2) + (2) + (10) + (10) + (5);
    for (int f = lane; f < 5; f += lanes) {
      v17[f] = (v15[f] * (acc_t)0.5);
    }
    __syncwarp(group_mask);
    acc_t v18[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      acc_t total = 0;
      for (int j1 = 0; j1 < 5; ++j1) total += v14[i0 * 5 + j1];
      v18[i0] = total;
    }
    acc_t v19[1];
    {
      acc_t total = 0;
      for (int j0 = 0; j0 < 2; ++j0) total += v18[j0];
      v19[0] = total;
    }
    acc_t v20[1];
    {
      v20[0] = (v19[0] * (acc_t)0.5);
    }
    acc_t* __restrict__ v21 = scratch + (2) + (2) + (10) + (10) + (5) + (5);
    for (int f = lane; f < 5; f += lanes) {
      v21[f] = (v17[f] + v20[0]);
    }
    __syncwarp(group_mask);
    for (int f = lane; f < 5; f += lanes) {
      SEASTAR_GLOBAL(b2[r * 5 + f]) = v21[f];
    }
    for (int f = lane; f < 10; f += lanes) {
      SEASTAR_GLOBAL(b3[r * 10 + f]) = v13[f];
    }
    for (int f = lane; f < 2; f += lanes) {
      SEASTAR_GLOBAL(b4[r * 2 + f]) = v4[f];
    }
    for (int f = lane; f < 2; f += lanes) {
      SEASTAR_GLOBAL(b5[r * 2 + f]) = v8[f];
    }
    __syncwarp(group_mask);
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
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 10;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 39;
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
  void* buffers[11];
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
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:g@dst
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:h@src
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:8@dst
  scalar_t* __restrict__ b7 = (scalar_t*)p.buffers[7];  // gradient:g@dst
  acc_t* __restrict__ b8 = (acc_t*)p.buffers[8];  // temp:21@dst
  acc_t* __restrict__ b9 = (acc_t*)p.buffers[9];  // temp:25@dst
  acc_t* __restrict__ b10 = (acc_t*)p.buffers[10];  // temp:45@dst
  constexpr int lanes = 16;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 16, group_bits = 4;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 145;
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
    const scalar_t* v5 = b1 + r * 10;
    const acc_t* v20 = b4 + r * 2;
    acc_t v21[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v21[i0] = (-SEASTAR_GLOBAL(v20[i0]));
    }
    acc_t* __restrict__ v38 = scratch + 0;
    for (int f0 = 0; f0 < 10; f0 += lanes * 4) {
      acc_t acc38[4]; for (int k = 0; k < 4; ++k) acc38[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v15 = b3 + nbr * 10;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 10) {
            const auto g0 = SEASTAR_GLOBAL(v15[f]);
            const acc_t e16 = ((acc_t)1 / ((acc_t)1 + expf(-g0)));
            acc_t e19 = 0;
            for (int r19_1 = 0; r19_1 < 5; ++r19_1) e19 += (SEASTAR_GLOBAL(v15[(f / (5)) * 5 + r19_1]) * SEASTAR_GLOBAL(v5[(f / (5)) * 5 + r19_1]));
            const acc_t e22 = (e19 + v21[(f / (5))]);
            const acc_t e23 = expf(e22);
            const acc_t e37 = (e23 * e16);
            acc38[k] += e37;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 10) {
          v38[f] = acc38[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 10; f += blockDim.x) {
        acc_t total = v38[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v38[f + (g - group) * row_scratch];
          total += x;
        }
        v38[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 10; f += lanes) {
          v38[f] = v38[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    const scalar_t* v0 = b0 + r * 5;
    acc_t v1[1];
    {
      acc_t total = 0;
      for (int j0 = 0; j0 < 5; ++j0) total += SEASTAR_GLOBAL(v0[j0]);
      v1[0] = total;
    }
    const acc_t* v2 = v1;
    acc_t v4[1];
    {
      v4[0] = (v2[0] * (acc_t)0.5);
    }
    const acc_t* v7 = v4;
    acc_t v8[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v8[i0] = v7[0];
    }
    const acc_t* v9 = v8;
    acc_t* __restrict__ v10 = scratch + (10);
    for (int f = lane; f < 10; f += lanes) {
      const int i0 = (f / (5));
      v10[f] = v9[i0];
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v11 = scratch + (10) + (10);
    for (int f = lane; f < 5; f += lanes) {
      v11[f] = (SEASTAR_GLOBAL(v0[f]) * (acc_t)0.5);
    }
    __syncwarp(group_mask);
    const acc_t* v12 = v11;
    acc_t* __restrict__ v13 = scratch + (10) + (10) + (5);
    for (int f = lane; f < 10; f += lanes) {
      const int i1 = (f % (5));
      v13[f] = v12[i1];
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v14 = scratch + (10) + (10) + (5) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v14[f] = (v10[f] + v13[f]);
    }
    __syncwarp(group_mask);
    const acc_t* v24 = b5 + r * 2;
    acc_t v25[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v25[i0] = ((acc_t)1 / SEASTAR_GLOBAL(v24[i0]));
    }
    acc_t* __restrict__ v39 = scratch + (10) + (10) + (5) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v39[f] = (acc_t)(v38[f] != (acc_t)0.0);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v40 = scratch + (10) + (10) + (5) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v40[f] = (v14[f] * v38[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v41 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v41[f] = (v39[f] != 0 ? v40[f] : (acc_t)0.0);
    }
    __syncwarp(group_mask);
    acc_t v42[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      acc_t total = 0;
      for (int j1 = 0; j1 < 5; ++j1) total += v41[i0 * 5 + j1];
      v42[i0] = total;
    }
    acc_t v43[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v43[i0] = (v25[i0] * v25[i0]);
    }
    acc_t v44[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v44[i0] = (v42[i0] * v43[i0]);
    }
    acc_t v45[2];
    for (int i0 = 0; i0 < 2; ++i0) {
      v45[i0] = (-v44[i0]);
    }
    acc_t* __restrict__ v53 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v53[f] = (acc_t)0.0;
    }
    for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
      const int64_t nbr = nbrs[j];
      const scalar_t* v15 = b3 + nbr * 10;
      acc_t* __restrict__ v16 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v16[f] = ((acc_t)1 / ((acc_t)1 + expf(-SEASTAR_GLOBAL(v15[f]))));
      }
      __syncwarp(group_mask);
      acc_t* __restrict__ v17 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v17[f] = (v14[f] * v16[f]);
      }
      __syncwarp(group_mask);
      acc_t v28[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int j1 = 0; j1 < 5; ++j1) total += v17[i0 * 5 + j1];
        v28[i0] = total;
      }
      acc_t v35[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v35[i0] = (v28[i0] * v25[i0]);
      }
      acc_t v46[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v46[i0] = (v35[i0] + v45[i0]);
      }
      acc_t* __restrict__ v18 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v18[f] = (SEASTAR_GLOBAL(v15[f]) * SEASTAR_GLOBAL(v5[f]));
      }
      __syncwarp(group_mask);
      acc_t v19[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int j1 = 0; j1 < 5; ++j1) total += v18[i0 * 5 + j1];
        v19[i0] = total;
      }
      acc_t v22[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v22[i0] = (v19[i0] + v21[i0]);
      }
      acc_t v23[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v23[i0] = expf(v22[i0]);
      }
      acc_t v47[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v47[i0] = (v46[i0] * v23[i0]);
      }
      acc_t* __restrict__ v48 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        const int i0 = (f / (5));
        v48[f] = v47[i0];
      }
      __syncwarp(group_mask);
      acc_t* __restrict__ v50 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v50[f] = (v48[f] * SEASTAR_GLOBAL(v15[f]));
      }
      __syncwarp(group_mask);
      for (int f = lane; f < 10; f += lanes) {
        v53[f] += v50[f];
      }
      __syncwarp(group_mask);
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 10; f += blockDim.x) {
        acc_t total = v53[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v53[f + (g - group) * row_scratch];
          total += x;
        }
        v53[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 10; f += lanes) {
          v53[f] = v53[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    acc_t* __restrict__ v54 = scratch + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v54[f] = (v14[f] + v53[f]);
    }
    __syncwarp(group_mask);
    for (int f = lane; f < 10; f += lanes) {
      SEASTAR_GLOBAL(b7[r * 10 + f]) = v54[f];
    }
    for (int f = lane; f < 2; f += lanes) {
      SEASTAR_GLOBAL(b8[r * 2 + f]) = v21[f];
    }
    for (int f = lane; f < 2; f += lanes) {
      SEASTAR_GLOBAL(b9[r * 2 + f]) = v25[f];
    }
    for (int f = lane; f < 2; f += lanes) {
      SEASTAR_GLOBAL(b10[r * 2 + f]) = v45[f];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:g@dst
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:h@src
  scalar_t* __restrict__ b6 = (scalar_t*)p.buffers[6];  // gradient:h@src
  const acc_t* __restrict__ b8 = (const acc_t*)p.buffers[8];  // temp:21@dst
  const acc_t* __restrict__ b9 = (const acc_t*)p.buffers[9];  // temp:25@dst
  const acc_t* __restrict__ b10 = (const acc_t*)p.buffers[10];  // temp:45@dst
  constexpr int lanes = 16;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 16, group_bits = 4;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 165;
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
    const scalar_t* v15 = b3 + r * 10;
    acc_t* __restrict__ v16 = scratch + 0;
    for (int f = lane; f < 10; f += lanes) {
      v16[f] = ((acc_t)1 / ((acc_t)1 + expf(-SEASTAR_GLOBAL(v15[f]))));
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v29 = scratch + (10);
    for (int f = lane; f < 10; f += lanes) {
      v29[f] = (acc_t)0.0;
    }
    acc_t* __restrict__ v51 = scratch + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v51[f] = (acc_t)0.0;
    }
    for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
      const int64_t nbr = nbrs[j];
      const scalar_t* v0 = b0 + nbr * 5;
      acc_t v1[1];
      {
        acc_t total = 0;
        for (int j0 = 0; j0 < 5; ++j0) total += SEASTAR_GLOBAL(v0[j0]);
        v1[0] = total;
      }
      const acc_t* v2 = v1;
      acc_t v4[1];
      {
        v4[0] = (v2[0] * (acc_t)0.5);
      }
      const acc_t* v7 = v4;
      acc_t v8[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v8[i0] = v7[0];
      }
      const acc_t* v9 = v8;
      acc_t* __restrict__ v10 = scratch + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        const int i0 = (f / (5));
        v10[f] = v9[i0];
      }
      __syncwarp(group_mask);
      acc_t* __restrict__ v11 = scratch + (10) + (10) + (10) + (10);
      for (int f = lane; f < 5; f += lanes) {
        v11[f] = (SEASTAR_GLOBAL(v0[f]) * (acc_t)0.5);
      }
      __syncwarp(group_mask);
      const acc_t* v12 = v11;
      acc_t* __restrict__ v13 = scratch + (10) + (10) + (10) + (10) + (5);
      for (int f = lane; f < 10; f += lanes) {
        const int i1 = (f % (5));
        v13[f] = v12[i1];
      }
      __syncwarp(group_mask);
      acc_t* __restrict__ v14 = scratch + (10) + (10) + (10) + (10) + (5) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v14[f] = (v10[f] + v13[f]);
      }
      __syncwarp(group_mask);
      const scalar_t* v5 = b1 + nbr * 10;
      acc_t* __restrict__ v18 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v18[f] = (SEASTAR_GLOBAL(v15[f]) * SEASTAR_GLOBAL(v5[f]));
      }
      __syncwarp(group_mask);
      acc_t v19[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int j1 = 0; j1 < 5; ++j1) total += v18[i0 * 5 + j1];
        v19[i0] = total;
      }
      const acc_t* v21 = b8 + nbr * 2;
      acc_t v22[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v22[i0] = (v19[i0] + SEASTAR_GLOBAL(v21[i0]));
      }
      acc_t v23[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v23[i0] = expf(v22[i0]);
      }
      const acc_t* v25 = b9 + nbr * 2;
      acc_t v26[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v26[i0] = (v23[i0] * SEASTAR_GLOBAL(v25[i0]));
      }
      acc_t* __restrict__ v27 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        const int i0 = (f / (5));
        v27[f] = (v14[f] * v26[i0]);
      }
      __syncwarp(group_mask);
      for (int f = lane; f < 10; f += lanes) {
        v29[f] += v27[f];
      }
      acc_t* __restrict__ v17 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v17[f] = (v14[f] * v16[f]);
      }
      __syncwarp(group_mask);
      acc_t v28[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        acc_t total = 0;
        for (int j1 = 0; j1 < 5; ++j1) total += v17[i0 * 5 + j1];
        v28[i0] = total;
      }
      acc_t v35[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v35[i0] = (v28[i0] * SEASTAR_GLOBAL(v25[i0]));
      }
      const acc_t* v45 = b10 + nbr * 2;
      acc_t v46[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v46[i0] = (v35[i0] + SEASTAR_GLOBAL(v45[i0]));
      }
      acc_t v47[2];
      for (int i0 = 0; i0 < 2; ++i0) {
        v47[i0] = (v46[i0] * v23[i0]);
      }
      acc_t* __restrict__ v48 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        const int i0 = (f / (5));
        v48[f] = v47[i0];
      }
      __syncwarp(group_mask);
      acc_t* __restrict__ v49 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10);
      for (int f = lane; f < 10; f += lanes) {
        v49[f] = (v48[f] * SEASTAR_GLOBAL(v5[f]));
      }
      __syncwarp(group_mask);
      for (int f = lane; f < 10; f += lanes) {
        v51[f] += v49[f];
      }
      __syncwarp(group_mask);
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 10; f += blockDim.x) {
        acc_t total = v29[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v29[f + (g - group) * row_scratch];
          total += x;
        }
        v29[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 10; f += blockDim.x) {
        acc_t total = v51[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v51[f + (g - group) * row_scratch];
          total += x;
        }
        v51[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 10; f += lanes) {
          v29[f] = v29[f - group * row_scratch];
        }
        for (int f = lane; f < 10; f += lanes) {
          v51[f] = v51[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    acc_t* __restrict__ v31 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v31[f] = (-v16[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v32 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v32[f] = ((acc_t)1.0 + v31[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v33 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v33[f] = (v16[f] * v32[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v34 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v34[f] = (v29[f] * v33[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v52 = scratch + (10) + (10) + (10) + (10) + (5) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10) + (10);
    for (int f = lane; f < 10; f += lanes) {
      v52[f] = (v34[f] + v51[f]);
    }
    __syncwarp(group_mask);
    for (int f = lane; f < 10; f += lanes) {
      SEASTAR_GLOBAL(b6[r * 10 + f]) = v52[f];
    }
    __syncwarp(group_mask);
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
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 10;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 145;
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
    const int64_t widest = 10;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 165;
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