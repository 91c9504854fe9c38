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
  void* buffers[3];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
  int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)
};

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__forward_kernel0(const forward_params p) {
  // dst rows, 1 loop(s) over their in-edges
  const int s0 = (int)p.dims[0]; (void)s0;
  const seastar_indices indptr{p.graph[0], p.wide_indices};
  const seastar_indices nbrs{p.graph[1], p.wide_indices};
  const seastar_indices eids{p.graph[2], p.wide_indices};
  const seastar_indices order{p.graph[6], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // feature:h@src
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:norm@src
  scalar_t* __restrict__ b2 = (scalar_t*)p.buffers[2];  // output:out0@dst
  const int lanes = p.lanes;  // threads per row: a power of two up to 32
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  const int block_groups = 256 / lanes;
  int group_bits = 0;  // block_groups = 2^group_bits
  while ((block_groups >> group_bits) > 1) ++group_bits;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  const int row_scratch = (int)p.scratch_per_row;  // below 2^31: it fits a block or 1 GiB
  acc_t* __restrict__ scratch = p.scratch != nullptr
      ? p.scratch + ((int64_t)blockIdx.x * block_groups + group) * row_scratch
      : shared + group * row_scratch;
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
    acc_t* __restrict__ v3 = scratch + 0;
    for (int f0 = 0; f0 < s0; f0 += lanes * 4) {
      acc_t acc3[4]; for (int k = 0; k < 4; ++k) acc3[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * s0;
        const scalar_t* v1 = b1 + nbr * 1;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < s0) {
            const auto g0 = SEASTAR_GLOBAL(v0[f]);
            const auto g1 = SEASTAR_GLOBAL(v1[0]);
            const acc_t e2 = (g0 * g1);
            acc3[k] += e2;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < s0) {
          v3[f] = acc3[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < s0; f += blockDim.x) {
        acc_t total = v3[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v3[f + (g - group) * row_scratch];
          total += x;
        }
        v3[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < s0; f += lanes) {
          v3[f] = v3[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    for (int f = lane; f < s0; f += lanes) {
      SEASTAR_GLOBAL(b2[r * s0 + f]) = v3[f];
    }
    __syncwarp(group_mask);
  }
}

extern "C" int seastar___SEASTAR_PREFIX__forward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  const int64_t s0 = dims[0]; (void)s0;
  if (numels[0] != sizes[0] * s0) return 1;  // feature:h@src ['s0']
  if (numels[1] != sizes[0] * 1) return 2;  // feature:norm@src [1]
  if (numels[2] != sizes[1] * s0) return 3;  // output:out0@dst ['s0']
  forward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 1; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 3; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = s0;
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = (s0);
    const int64_t groups_per_block = 256 / lanes;
    const int64_t row_bytes = p.scratch_per_row * (int64_t)sizeof(acc_t);
    int64_t shared = groups_per_block * row_bytes;
    const int64_t rows = p.num_dst;
    int64_t blocks = std::min<int64_t>((rows + groups_per_block - 1) / groups_per_block, 1 << 20);
    // the heaviest rows' blocks: as many as rows can have SPLIT_DEGREE edges, HUB_ROWS at most
    p.hub_blocks = std::min<int64_t>({rows, (int64_t)1024, p.num_edges / 256});
    p.scratch = nullptr;
    // past what this device lets a block opt into (227 KiB on sm_90, 163 on sm_80, 99 on
    // sm_86/89), or where the opt-in is refused, scratch goes to global memory
    bool global_scratch = shared > seastar_shared_optin();
    if (!global_scratch && shared > 49152 && cudaFuncSetAttribute(
        __SEASTAR_PREFIX__forward_kernel0, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared) != cudaSuccess) {
      (void)cudaGetLastError();
      global_scratch = true;
    }
    if (global_scratch) {
      // for as many groups as 1024 MiB hold (they take rows grid-stride)
      blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, 1073741824 / shared));
      if (rows > 0 &&
          cudaMallocAsync((void**)&p.scratch, (size_t)(blocks * shared), st) != cudaSuccess)
        return seastar_fail(-1, "cudaMallocAsync of __SEASTAR_PREFIX__forward_kernel0's per-row scratch: out of GPU memory");
      shared = 0;
      p.hub_blocks = 0;  // a hub stays on one group: the budget holds the groups' scratch, no more
    }
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
  void* buffers[5];
  acc_t* scratch;  // the CPU's per-thread rows of scratch
  int64_t scratch_per_row;  // elements of scratch one row uses
  int num_threads;
  int lanes;  // threads per row
  int64_t hub_blocks;  // blocks that take a row each, the heaviest (row_edges)
};

__global__ void __launch_bounds__(256, 4) __SEASTAR_PREFIX__backward_kernel0(const backward_params p) {
  // src rows, 1 loop(s) over their out-edges
  const int s0 = (int)p.dims[0]; (void)s0;
  const seastar_indices indptr{p.graph[3], p.wide_indices};
  const seastar_indices nbrs{p.graph[4], p.wide_indices};
  const seastar_indices eids{p.graph[5], p.wide_indices};
  const seastar_indices order{p.graph[7], p.wide_indices};
  (void)indptr; (void)nbrs; (void)eids; (void)order;  // not every kernel reads each
  const scalar_t* __restrict__ b0 = (const scalar_t*)p.buffers[0];  // adjoint:out0@dst
  const scalar_t* __restrict__ b1 = (const scalar_t*)p.buffers[1];  // feature:norm@src
  const scalar_t* __restrict__ b2 = (const scalar_t*)p.buffers[2];  // feature:h@src
  scalar_t* __restrict__ b3 = (scalar_t*)p.buffers[3];  // gradient:h@src
  scalar_t* __restrict__ b4 = (scalar_t*)p.buffers[4];  // gradient:norm@src
  const int lanes = p.lanes;  // threads per row: a power of two up to 32
  const int lane = threadIdx.x & (lanes - 1);
  const unsigned group_mask = lanes == 32 ? 0xffffffffu
                              : ((1u << lanes) - 1u) << (threadIdx.x & 31 & ~(lanes - 1));
  const int group = threadIdx.x / lanes;
  const int block_groups = 256 / lanes;
  int group_bits = 0;  // block_groups = 2^group_bits
  while ((block_groups >> group_bits) > 1) ++group_bits;
  // the first p.hub_blocks blocks take the heaviest rows, one each (row_edges); others a row a group
  const bool hub_block = blockIdx.x < p.hub_blocks;
  const int64_t groups = ((int64_t)gridDim.x - p.hub_blocks) * block_groups;
  (void)lane; (void)group_mask;
  SEASTAR_DYNAMIC_SHARED(acc_t, shared);
  const int row_scratch = (int)p.scratch_per_row;  // below 2^31: it fits a block or 1 GiB
  acc_t* __restrict__ scratch = p.scratch != nullptr
      ? p.scratch + ((int64_t)blockIdx.x * block_groups + group) * row_scratch
      : shared + group * row_scratch;
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
    acc_t* __restrict__ v1 = scratch + 0;
    for (int f0 = 0; f0 < s0; f0 += lanes * 4) {
      acc_t acc1[4]; for (int k = 0; k < 4; ++k) acc1[k] = (acc_t)0.0;
      for (int64_t j = begin + slice_begin; j < begin + slice_end; ++j) {
        const int64_t nbr = nbrs[j];
        const scalar_t* v0 = b0 + nbr * s0;
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int f = f0 + lane + lanes * k;
          if (f < s0) {
            const auto g0 = SEASTAR_GLOBAL(v0[f]);
            acc1[k] += g0;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int f = f0 + lane + lanes * k;
        if (f < s0) {
          v1[f] = acc1[k];
        }
      }
    }
    if (split) {  // the block's groups swept a slice of the row's edges each
      __syncthreads();
      for (int f = threadIdx.x; f < s0; f += blockDim.x) {
        acc_t total = v1[f - group * row_scratch];
        for (int g = 1; g < block_groups; ++g) {
          const acc_t x = v1[f + (g - group) * row_scratch];
          total += x;
        }
        v1[f - group * row_scratch] = total;
      }
      __syncthreads();
      if (group != 0) {
        for (int f = lane; f < s0; f += lanes) {
          v1[f] = v1[f - group * row_scratch];
        }
      }
    }
    __syncwarp(group_mask);
    if (split && group != 0) continue;  // every group holds the row's results: one writes them
    const scalar_t* v2 = b1 + r * 1;
    acc_t* __restrict__ v3 = scratch + (s0);
    for (int f = lane; f < s0; f += lanes) {
      v3[f] = (v1[f] * SEASTAR_GLOBAL(v2[0]));
    }
    __syncwarp(group_mask);
    for (int f = lane; f < s0; f += lanes) {
      SEASTAR_GLOBAL(b3[r * s0 + f]) = v3[f];
    }
    const scalar_t* v4 = b2 + r * s0;
    acc_t* __restrict__ v5 = scratch + (s0) + (s0);
    for (int f = lane; f < s0; f += lanes) {
      v5[f] = (v1[f] * SEASTAR_GLOBAL(v4[f]));
    }
    __syncwarp(group_mask);
    acc_t v6[1];
    {
      acc_t total = 0;
      for (int j0 = 0; j0 < s0; ++j0) total += v5[j0];
      v6[0] = total;
    }
    for (int f = lane; f < 1; f += lanes) {
      SEASTAR_GLOBAL(b4[r * 1 + f]) = v6[f];
    }
    __syncwarp(group_mask);
  }
}

extern "C" int seastar___SEASTAR_PREFIX__backward(const int64_t* sizes, const int64_t* dims, const void* const* graph, void* const* buffers, const int64_t* numels, int num_threads, void* stream) {
  const int64_t s0 = dims[0]; (void)s0;
  if (numels[0] != sizes[1] * s0) return 1;  // adjoint:out0@dst ['s0']
  if (numels[1] != sizes[0] * 1) return 2;  // feature:norm@src [1]
  if (numels[2] != sizes[0] * s0) return 3;  // feature:h@src ['s0']
  if (numels[3] != sizes[0] * s0) return 4;  // gradient:h@src ['s0']
  if (numels[4] != sizes[0] * 1) return 5;  // gradient:norm@src [1]
  backward_params p;
  p.num_src = sizes[0]; p.num_dst = sizes[1]; p.num_edges = sizes[2];
  for (int k = 0; k < 1; ++k) p.dims[k] = dims[k];
  for (int k = 0; k < 8; ++k) p.graph[k] = graph[k];
  p.wide_indices = sizes[3] == 8;
  for (int k = 0; k < 5; ++k) p.buffers[k] = buffers[k];
  p.num_threads = num_threads; p.lanes = 1; p.scratch = nullptr; p.scratch_per_row = 0;
  (void)stream;
  cudaStream_t st = (cudaStream_t)stream;
  {
    const int64_t widest = std::max<int64_t>(1, s0);
    int lanes = 1;
    while (lanes < 32 && lanes < widest) lanes *= 2;
    p.lanes = lanes;
    p.scratch_per_row = (s0) + (s0) + (s0);
    const int64_t groups_per_block = 256 / lanes;
    const int64_t row_bytes = p.scratch_per_row * (int64_t)sizeof(acc_t);
    int64_t shared = groups_per_block * row_bytes;
    const int64_t rows = p.num_src;
    int64_t blocks = std::min<int64_t>((rows + groups_per_block - 1) / groups_per_block, 1 << 20);
    // the heaviest rows' blocks: as many as rows can have SPLIT_DEGREE edges, HUB_ROWS at most
    p.hub_blocks = std::min<int64_t>({rows, (int64_t)1024, p.num_edges / 256});
    p.scratch = nullptr;
    // past what this device lets a block opt into (227 KiB on sm_90, 163 on sm_80, 99 on
    // sm_86/89), or where the opt-in is refused, scratch goes to global memory
    bool global_scratch = shared > seastar_shared_optin();
    if (!global_scratch && shared > 49152 && cudaFuncSetAttribute(
        __SEASTAR_PREFIX__backward_kernel0, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared) != cudaSuccess) {
      (void)cudaGetLastError();
      global_scratch = true;
    }
    if (global_scratch) {
      // for as many groups as 1024 MiB hold (they take rows grid-stride)
      blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, 1073741824 / shared));
      if (rows > 0 &&
          cudaMallocAsync((void**)&p.scratch, (size_t)(blocks * shared), st) != cudaSuccess)
        return seastar_fail(-1, "cudaMallocAsync of __SEASTAR_PREFIX__backward_kernel0's per-row scratch: out of GPU memory");
      shared = 0;
      p.hub_blocks = 0;  // a hub stays on one group: the budget holds the groups' scratch, no more
    }
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
  return 0;
}

extern "C" const char* seastar___SEASTAR_PREFIX__last_error() { return last_error; }

}  // namespace seastar___SEASTAR_PREFIX__