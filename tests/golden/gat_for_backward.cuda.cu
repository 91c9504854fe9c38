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
  void* buffers[9];
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
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:el@src
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:er@dst
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:h@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // output:out0@dst
  acc_t* __restrict__ b4 = (acc_t*)p.buffers[4];  // saved:4@dst
  acc_t* __restrict__ b5 = (acc_t*)p.buffers[5];  // saved:8@dst
  acc_t* __restrict__ b6 = (acc_t*)p.buffers[6];  // saved:15@dst
  acc_t* __restrict__ b7 = (acc_t*)p.buffers[7];  // saved:24@dst
  acc_t* __restrict__ b8 = (acc_t*)p.buffers[8];  // saved:26@dst
  constexpr int lanes = 32;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 8, group_bits = 3;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 108;
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
    const scalar_t* v1 = b1 + r * 4;
    acc_t* __restrict__ v4 = scratch + 0;
    acc_t* __restrict__ v8 = scratch + (4);
    acc_t* __restrict__ v15 = scratch + (4) + (4);
    acc_t* __restrict__ v26 = scratch + (4) + (4) + (32);
    for (int f0 = 0; f0 < 32; f0 += lanes * 4) {
      acc_t acc4[4]; for (int k = 0; k < 4; ++k) acc4[k] = (acc_t)__int_as_float((int)0xff800000);
      acc_t acc8[4]; for (int k = 0; k < 4; ++k) acc8[k] = (acc_t)0.0;
      acc_t acc15[4]; for (int k = 0; k < 4; ++k) acc15[k] = (acc_t)0.0;
      acc_t acc26[4]; for (int k = 0; k < 4; ++k) acc26[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 4;
        const scalar_t* v11 = b2 + nbr * 32;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 32) {
            const auto g0 = SEASTAR_GLOBAL(v0[(f / (8))]);
            const auto g1 = SEASTAR_GLOBAL(v1[(f / (8))]);
            const acc_t e2 = (g0 + g1);
            const acc_t e3 = (e2 > 0 ? e2 : e2 * (acc_t)0.2);
            const bool e18 = (e2 > (acc_t)0.0);
            const acc_t e21 = (e18 != 0 ? (acc_t)1.0 : (acc_t)0.2);
            if (e3 > acc4[k] || e3 != e3) {
              const acc_t rescale4 = expf(acc4[k] - e3);
              acc8[k] *= rescale4;
              acc15[k] *= rescale4;
              acc26[k] *= rescale4;
              acc4[k] = e3;
            }
            const acc_t e5 = (-acc4[k]);
            const acc_t e6 = (e3 + e5);
            const acc_t e7 = expf(e6);
            const auto g2 = SEASTAR_GLOBAL(v11[f]);
            const acc_t e14 = (e7 * g2);
            const acc_t e25 = (e7 * e21);
            acc15[k] += e14;
            if ((f % (8)) == 0) acc8[k] += e7;
            if ((f % (8)) == 0) acc26[k] += e25;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 32) {
          v15[f] = acc15[k];
          if ((f % (8)) == 0) v4[(f / (8))] = begin + slice_begin == begin + slice_end ? (acc_t)0 : acc4[k];
          if ((f % (8)) == 0) v8[(f / (8))] = acc8[k];
          if ((f % (8)) == 0) v26[(f / (8))] = acc26[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 4; f += blockDim.x) {
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
      for (int f = threadIdx.x; f < 32; f += blockDim.x) {
        const int i0 = (f / (8));
        acc_t top = v4[i0 - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v4[i0 + (g - group) * row_scratch];
          top = (x > top || x != x) ? x : top;
        }
        acc_t total = 0;
        for (int g = 0; g < block_groups; ++g) {
          const acc_t scale = expf(v4[i0 + (g - group) * row_scratch] - top);
          total += v15[f + (g - group) * row_scratch] * scale;
        }
        v15[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 4; f += blockDim.x) {
        const int i0 = f;
        acc_t top = v4[i0 - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v4[i0 + (g - group) * row_scratch];
          top = (x > top || x != x) ? x : top;
        }
        acc_t total = 0;
        for (int g = 0; g < block_groups; ++g) {
          const acc_t scale = expf(v4[i0 + (g - group) * row_scratch] - top);
          total += v26[f + (g - group) * row_scratch] * scale;
        }
        v26[f - group * row_scratch] = total;
      }
      __syncthreads();
      for (int f = threadIdx.x; f < 4; f += blockDim.x) {
        acc_t total = v4[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v4[f + (g - group) * row_scratch];
          total = (x > total || x != x) ? x : total;
        }
        v4[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 4; f += lanes) {
          v4[f] = v4[f - group * row_scratch];
        }
        for (int f = lane; f < 4; f += lanes) {
          v8[f] = v8[f - group * row_scratch];
        }
        for (int f = lane; f < 32; f += lanes) {
          v15[f] = v15[f - group * row_scratch];
        }
        for (int f = lane; f < 4; f += lanes) {
          v26[f] = v26[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    acc_t v5[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v5[i0] = (-v4[i0]);
    }
    acc_t v9[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v9[i0] = ((acc_t)1 / v8[i0]);
    }
    acc_t* __restrict__ v13 = scratch + (4) + (4) + (32) + (4);
    acc_t* __restrict__ v24 = scratch + (4) + (4) + (32) + (4) + (32);
    for (int f0 = 0; f0 < 32; f0 += lanes * 4) {
      acc_t acc13[4]; for (int k = 0; k < 4; ++k) acc13[k] = (acc_t)0.0;
      acc_t acc24[4]; for (int k = 0; k < 4; ++k) acc24[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * 4;
        const scalar_t* v11 = b2 + nbr * 32;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 32) {
            const auto g0 = SEASTAR_GLOBAL(v0[(f / (8))]);
            const auto g1 = SEASTAR_GLOBAL(v1[(f / (8))]);
            const acc_t e2 = (g0 + g1);
            const acc_t e3 = (e2 > 0 ? e2 : e2 * (acc_t)0.2);
            const acc_t e6 = (e3 + v5[(f / (8))]);
            const acc_t e7 = expf(e6);
            const acc_t e10 = (e7 * v9[(f / (8))]);
            const auto g2 = SEASTAR_GLOBAL(v11[f]);
            const acc_t e12 = (e10 * g2);
            const acc_t e16 = (v9[(f / (8))] * e7);
            const bool e18 = (e2 > (acc_t)0.0);
            const acc_t e21 = (e18 != 0 ? (acc_t)1.0 : (acc_t)0.2);
            const acc_t e22 = (e16 * e21);
            const acc_t e23 = (e22 * g2);
            acc13[k] += e12;
            acc24[k] += e23;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 32) {
          v13[f] = acc13[k];
          v24[f] = acc24[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 32; f += blockDim.x) {
        acc_t total = v13[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v13[f + (g - group) * row_scratch];
          total += x;
        }
        v13[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 32; f += blockDim.x) {
        acc_t total = v24[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v24[f + (g - group) * row_scratch];
          total += x;
        }
        v24[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 32; f += lanes) {
          v13[f] = v13[f - group * row_scratch];
        }
        for (int f = lane; f < 32; f += lanes) {
          v24[f] = v24[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < 32; f += lanes) {
      SEASTAR_GLOBAL(b3[r * 32 + f]) = v13[f];
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b4[r * 4 + f]) = v4[f];
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b5[r * 4 + f]) = v8[f];
    }
    for (int f = lane; f < 32; f += lanes) {
      SEASTAR_GLOBAL(b6[r * 32 + f]) = v15[f];
    }
    for (int f = lane; f < 32; f += lanes) {
      SEASTAR_GLOBAL(b7[r * 32 + f]) = v24[f];
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b8[r * 4 + f]) = v26[f];
    }
    __syncwarp(group_mask);
  }
}

extern "C" int seastar___SEASTAR_PREFIX__forward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[0] * 4) return 1;  // feature:el@src [4, 1]
  if (numels[1] != sizes[1] * 4) return 2;  // feature:er@dst [4, 1]
  if (numels[2] != sizes[0] * 32) return 3;  // feature:h@src [4, 8]
  if (numels[3] != sizes[1] * 32) return 4;  // output:out0@dst [4, 8]
  if (numels[4] != sizes[1] * 4) return 5;  // saved:4@dst [4, 1]
  if (numels[5] != sizes[1] * 4) return 6;  // saved:8@dst [4, 1]
  if (numels[6] != sizes[1] * 32) return 7;  // saved:15@dst [4, 8]
  if (numels[7] != sizes[1] * 32) return 8;  // saved:24@dst [4, 8]
  if (numels[8] != sizes[1] * 4) return 9;  // saved:26@dst [4, 1]
  forward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 9; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 32;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 108;
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
  void* buffers[15];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
  int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)
};

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__backward_kernel0(const backward_params p) {
  // dst rows, 0 loop(s) over their in-edges
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const acc_t* __restrict__ b4 = (const acc_t*)p.buffers[4];  // saved:4@dst
  const acc_t* __restrict__ b5 = (const acc_t*)p.buffers[5];  // saved:8@dst
  const acc_t* __restrict__ b6 = (const acc_t*)p.buffers[6];  // saved:15@dst
  const acc_t* __restrict__ b7 = (const acc_t*)p.buffers[7];  // saved:24@dst
  const acc_t* __restrict__ b8 = (const acc_t*)p.buffers[8];  // saved:26@dst
  scalar_t* __restrict__ b10 = (scalar_t*)p.buffers[10];  // gradient:er@dst
  acc_t* __restrict__ b12 = (acc_t*)p.buffers[12];  // temp:7@dst
  acc_t* __restrict__ b13 = (acc_t*)p.buffers[13];  // temp:11@dst
  acc_t* __restrict__ b14 = (acc_t*)p.buffers[14];  // temp:36@dst
  constexpr int lanes = 32;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 8, group_bits = 3;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 192;
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
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    const acc_t* v41 = b7 + r * 32;
    acc_t* __restrict__ v42 = scratch + 0;
    for (int f = lane; f < 32; f += lanes) {
      v42[f] = (acc_t)(SEASTAR_GLOBAL(v41[f]) != (acc_t)0.0);
    }
    __syncwarp(group_mask);
    const scalar_t* v0 = b0 + r * 32;
    acc_t* __restrict__ v43 = scratch + (32);
    for (int f = lane; f < 32; f += lanes) {
      v43[f] = (SEASTAR_GLOBAL(v0[f]) * SEASTAR_GLOBAL(v41[f]));
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v44 = scratch + (32) + (32);
    for (int f = lane; f < 32; f += lanes) {
      v44[f] = (v42[f] != 0 ? v43[f] : (acc_t)0.0);
    }
    __syncwarp(group_mask);
    acc_t v45[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      acc_t total = 0;
      for (int j1 = 0; j1 < 8; ++j1) total += v44[i0 * 8 + j1];
      v45[i0] = total;
    }
    const acc_t* v46 = b8 + r * 4;
    acc_t v47[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v47[i0] = (acc_t)(SEASTAR_GLOBAL(v46[i0]) != (acc_t)0.0);
    }
    const acc_t* v17 = b6 + r * 32;
    acc_t* __restrict__ v18 = scratch + (32) + (32) + (32);
    for (int f = lane; f < 32; f += lanes) {
      v18[f] = (acc_t)(SEASTAR_GLOBAL(v17[f]) != (acc_t)0.0);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v19 = scratch + (32) + (32) + (32) + (32);
    for (int f = lane; f < 32; f += lanes) {
      v19[f] = (SEASTAR_GLOBAL(v0[f]) * SEASTAR_GLOBAL(v17[f]));
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v20 = scratch + (32) + (32) + (32) + (32) + (32);
    for (int f = lane; f < 32; f += lanes) {
      v20[f] = (v18[f] != 0 ? v19[f] : (acc_t)0.0);
    }
    __syncwarp(group_mask);
    acc_t v21[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      acc_t total = 0;
      for (int j1 = 0; j1 < 8; ++j1) total += v20[i0 * 8 + j1];
      v21[i0] = total;
    }
    const acc_t* v10 = b5 + r * 4;
    acc_t v11[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v11[i0] = ((acc_t)1 / SEASTAR_GLOBAL(v10[i0]));
    }
    acc_t v22[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v22[i0] = (v11[i0] * v11[i0]);
    }
    acc_t v23[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v23[i0] = (v21[i0] * v22[i0]);
    }
    acc_t v24[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v24[i0] = (-v23[i0]);
    }
    acc_t v36[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v36[i0] = ((acc_t)0.0 + v24[i0]);
    }
    acc_t v48[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v48[i0] = (v36[i0] * SEASTAR_GLOBAL(v46[i0]));
    }
    acc_t v49[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v49[i0] = (v47[i0] != 0 ? v48[i0] : (acc_t)0.0);
    }
    acc_t v50[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v50[i0] = (v45[i0] + v49[i0]);
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b10[r * 4 + f]) = v50[f];
    }
    const acc_t* v6 = b4 + r * 4;
    acc_t v7[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v7[i0] = (-SEASTAR_GLOBAL(v6[i0]));
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b12[r * 4 + f]) = v7[f];
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b13[r * 4 + f]) = v11[f];
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b14[r * 4 + f]) = v36[f];
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
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:h@src
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:el@src
  const scalar_t* __restrict__ b3 = (const scalar_t*)p.buffers[3];  // feature:er@dst
  scalar_t* __restrict__ b9 = (scalar_t*)p.buffers[9];  // gradient:el@src
  scalar_t* __restrict__ b11 = (scalar_t*)p.buffers[11];  // gradient:h@src
  const acc_t* __restrict__ b12 = (const acc_t*)p.buffers[12];  // temp:7@dst
  const acc_t* __restrict__ b13 = (const acc_t*)p.buffers[13];  // temp:11@dst
  const acc_t* __restrict__ b14 = (const acc_t*)p.buffers[14];  // temp:36@dst
  constexpr int lanes = 32;  // threads per row, as run_kernels launches
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  constexpr int block_groups = 8, group_bits = 3;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  constexpr int row_scratch = 164;
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
    const scalar_t* v2 = b2 + r * 4;
    acc_t* __restrict__ v14 = scratch + 0;
    acc_t* __restrict__ v31 = scratch + (32);
    acc_t* __restrict__ v39 = scratch + (32) + (32);
    for (int f0 = 0; f0 < 32; f0 += lanes * 4) {
      acc_t acc14[4]; for (int k = 0; k < 4; ++k) acc14[k] = (acc_t)0.0;
      acc_t acc31[4]; for (int k = 0; k < 4; ++k) acc31[k] = (acc_t)0.0;
      acc_t acc39[4]; for (int k = 0; k < 4; ++k) acc39[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v3 = b3 + nbr * 4;
        const acc_t* v7 = b12 + nbr * 4;
        const acc_t* v11 = b13 + nbr * 4;
        const scalar_t* v0 = b0 + nbr * 32;
        const acc_t* v36 = b14 + nbr * 4;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < 32) {
            const auto g0 = SEASTAR_GLOBAL(v2[(f / (8))]);
            const auto g1 = SEASTAR_GLOBAL(v3[(f / (8))]);
            const acc_t e4 = (g0 + g1);
            const acc_t e5 = (e4 > 0 ? e4 : e4 * (acc_t)0.2);
            const auto g2 = SEASTAR_GLOBAL(v7[(f / (8))]);
            const acc_t e8 = (e5 + g2);
            const acc_t e9 = expf(e8);
            const auto g3 = SEASTAR_GLOBAL(v11[(f / (8))]);
            const acc_t e12 = (e9 * g3);
            const auto g4 = SEASTAR_GLOBAL(v0[f]);
            const acc_t e13 = (g4 * e12);
            const bool e25 = (e4 > (acc_t)0.0);
            const acc_t e27 = (e25 != 0 ? (acc_t)1.0 : (acc_t)0.2);
            const acc_t e28 = (g3 * e9);
            const acc_t e29 = (e28 * e27);
            const acc_t e30 = (e29 * g4);
            const auto g5 = SEASTAR_GLOBAL(v36[(f / (8))]);
            const acc_t e37 = (g5 * e9);
            const acc_t e38 = (e37 * e27);
            acc14[k] += e13;
            acc31[k] += e30;
            if ((f % (8)) == 0) acc39[k] += e38;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < 32) {
          v14[f] = acc14[k];
          v31[f] = acc31[k];
          if ((f % (8)) == 0) v39[(f / (8))] = acc39[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < 32; f += blockDim.x) {
        acc_t total = v14[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v14[f + (g - group) * row_scratch];
          total += x;
        }
        v14[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 32; f += blockDim.x) {
        acc_t total = v31[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v31[f + (g - group) * row_scratch];
          total += x;
        }
        v31[f - group * row_scratch] = total;
      }
      for (int f = threadIdx.x; f < 4; f += blockDim.x) {
        acc_t total = v39[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v39[f + (g - group) * row_scratch];
          total += x;
        }
        v39[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < 32; f += lanes) {
          v14[f] = v14[f - group * row_scratch];
        }
        for (int f = lane; f < 32; f += lanes) {
          v31[f] = v31[f - group * row_scratch];
        }
        for (int f = lane; f < 4; f += lanes) {
          v39[f] = v39[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    acc_t* __restrict__ v32 = scratch + (32) + (32) + (4);
    for (int f = lane; f < 32; f += lanes) {
      v32[f] = (acc_t)(v31[f] != (acc_t)0.0);
    }
    __syncwarp(group_mask);
    const scalar_t* v1 = b1 + r * 32;
    acc_t* __restrict__ v33 = scratch + (32) + (32) + (4) + (32);
    for (int f = lane; f < 32; f += lanes) {
      v33[f] = (SEASTAR_GLOBAL(v1[f]) * v31[f]);
    }
    __syncwarp(group_mask);
    acc_t* __restrict__ v34 = scratch + (32) + (32) + (4) + (32) + (32);
    for (int f = lane; f < 32; f += lanes) {
      v34[f] = (v32[f] != 0 ? v33[f] : (acc_t)0.0);
    }
    __syncwarp(group_mask);
    acc_t v35[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      acc_t total = 0;
      for (int j1 = 0; j1 < 8; ++j1) total += v34[i0 * 8 + j1];
      v35[i0] = total;
    }
    acc_t v40[4];
    for (int i0 = 0; i0 < 4; ++i0) {
      v40[i0] = (v35[i0] + v39[i0]);
    }
    for (int f = lane; f < 4; f += lanes) {
      SEASTAR_GLOBAL(b9[r * 4 + f]) = v40[f];
    }
    for (int f = lane; f < 32; f += lanes) {
      SEASTAR_GLOBAL(b11[r * 32 + f]) = v14[f];
    }
    __syncwarp(group_mask);
  }
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  if (numels[0] != sizes[1] * 32) return 1;  // adjoint:out0@dst [4, 8]
  if (numels[1] != sizes[0] * 32) return 2;  // feature:h@src [4, 8]
  if (numels[2] != sizes[0] * 4) return 3;  // feature:el@src [4, 1]
  if (numels[3] != sizes[1] * 4) return 4;  // feature:er@dst [4, 1]
  if (numels[4] != sizes[1] * 4) return 5;  // saved:4@dst [4, 1]
  if (numels[5] != sizes[1] * 4) return 6;  // saved:8@dst [4, 1]
  if (numels[6] != sizes[1] * 32) return 7;  // saved:15@dst [4, 8]
  if (numels[7] != sizes[1] * 32) return 8;  // saved:24@dst [4, 8]
  if (numels[8] != sizes[1] * 4) return 9;  // saved:26@dst [4, 1]
  if (numels[9] != sizes[0] * 4) return 10;  // gradient:el@src [4, 1]
  if (numels[10] != sizes[1] * 4) return 11;  // gradient:er@dst [4, 1]
  if (numels[11] != sizes[0] * 32) return 12;  // gradient:h@src [4, 8]
  if (numels[12] != sizes[1] * 4) return 13;  // temp:7@dst [4, 1]
  if (numels[13] != sizes[1] * 4) return 14;  // temp:11@dst [4, 1]
  if (numels[14] != sizes[1] * 4) return 15;  // temp:36@dst [4, 1]
  backward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 0; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 15; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = 32;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 192;
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
    const int64_t widest = 32;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = 164;
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