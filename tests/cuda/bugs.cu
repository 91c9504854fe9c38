// Kernels with the bugs the emulator exists to catch, each next to its correct version, and
// kernels that misuse barriers and warp primitives, which must be reported, never hang or crash.
#include "common.cuh"

// ---- a lane-stride bug ---------------------------------------------------------------------------
// Sums each destination row's in-neighbours' features, with a group of `group` lanes per row and
// features over the lanes of the group. The buggy version strides features by blockDim.x, which
// is only right while the group is the whole block or the row fits in one pass.
__global__ void neighbour_sum(const int* indptr, const int* indices, const float* x, float* out, int rows,
                              int features, unsigned group, int buggy) {
  unsigned rows_per_block = blockDim.x / group, lane = threadIdx.x % group;
  int row = static_cast<int>(blockIdx.x * rows_per_block + threadIdx.x / group);
  if (row >= rows) return;
  unsigned stride = buggy ? blockDim.x : group;
  for (unsigned f = lane; f < static_cast<unsigned>(features); f += stride) {
    float sum = 0.0f;
    for (int e = __ldg(&indptr[row]); e < __ldg(&indptr[row + 1]); ++e)
      sum += __ldg(&x[static_cast<long long>(indices[e]) * features + f]);
    out[static_cast<long long>(row) * features + f] = sum;
  }
}

EXPORT int run_neighbour_sum(const int* indptr, const int* indices, const float* x, float* out, int rows,
                             int features, unsigned group, unsigned threads, int buggy) {
  unsigned rows_per_block = threads / group;
  SEASTAR_LAUNCH(neighbour_sum, (rows + rows_per_block - 1) / rows_per_block, threads, 0, 0)(
      indptr, indices, x, out, rows, features, group, buggy);
  return launch_status();
}

// ---- a missing barrier ---------------------------------------------------------------------------
// Each thread stages its value in shared memory and reads its neighbour's: without the barrier the
// neighbour may not have written yet.
__global__ void rotate_through_shared(const float* x, float* out, int with_barrier) {
  __shared__ float staged[1024];
  unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  staged[t] = x[i];
  if (with_barrier) __syncthreads();
  out[i] = staged[(t + 1) % blockDim.x];
}

EXPORT int run_rotate(const float* x, float* out, unsigned blocks, unsigned threads, int with_barrier) {
  SEASTAR_LAUNCH(rotate_through_shared, blocks, threads, 0, 0)(x, out, with_barrier);
  return launch_status();
}

// ---- misuse that must be reported ----------------------------------------------------------------
enum Misuse {
  kSyncwarpLaneExits,        // lane 7 of an 8-lane mask returns instead of reaching __syncwarp
  kSyncwarpLaneAtBarrier,    // lane 7 of an 8-lane mask waits at __syncthreads instead: deadlock
  kDivergentSyncthreads,     // two halves of the block wait at two different __syncthreads
  kExitAfterBarrier,         // after a first barrier, half the block returns, half waits at a second
  kShuffleFromExitedLane,    // lanes 16..31 return; lanes 0..15 shuffle down with the full mask
  kShuffleOutsideMask,       // mask 0x0000ffff, but lanes read lanes 16..31
  kCallerNotInMask,          // lane 5 calls __syncwarp(0x1)
  kMismatchedMasks,          // lane 0 syncs lanes 0-1, lanes 1 and 2 sync lanes 0-2: deadlock
  kIllegalAddress,           // a store through a null pointer (plus 16 bytes)
  kStackOverflow,            // unbounded recursion
  kBadWidth,                 // width 12
  kDynamicSharedOverrun,     // writes past the requested dynamic shared memory
  kMaskNamesMissingLanes,    // a block of 40 threads: warp 1 has 8 lanes, not 32
  kNestedLaunch,             // a kernel launches a kernel (emulator only: nvcc needs -rdc for that)
};

__global__ void child(float* out) { out[threadIdx.x] = 0; }

__device__ int recurse(int depth, int limit) {
  volatile int frame[256];
  frame[depth % 256] = depth;
  return depth == limit ? 0 : recurse(depth + 1, limit) + frame[depth % 256];
}

__global__ void misuse(int which, float* out, float* nowhere) {
  unsigned t = threadIdx.x, lane = t % 32;
  float v = static_cast<float>(t);
  switch (which) {
    case kSyncwarpLaneExits:
      if (lane == 7) return;
      if (lane < 8) __syncwarp(0xffu);
      break;
    case kSyncwarpLaneAtBarrier:
      if (lane < 7) __syncwarp(0xffu);
      __syncthreads();
      break;
    case kDivergentSyncthreads:
      if (t < blockDim.x / 2) {
        v += 1;
        __syncthreads();
      } else {
        v += 2;
        __syncthreads();
      }
      break;
    case kExitAfterBarrier:
      __syncthreads();
      if (t >= blockDim.x / 2) return;
      __syncthreads();
      break;
    case kShuffleFromExitedLane:
      if (lane >= 16) return;
      v = __shfl_down_sync(0xffffffffu, v, 16);
      break;
    case kShuffleOutsideMask:
      if (lane >= 16) return;
      v = __shfl_xor_sync(0x0000ffffu, v, 16);
      break;
    case kCallerNotInMask:
      if (lane == 5) __syncwarp(0x1u);
      break;
    case kMismatchedMasks:
      if (lane < 3) __syncwarp(lane == 0 ? 0x3u : 0x7u);
      break;
    case kIllegalAddress:
      if (t == 3) *static_cast<volatile float*>(nowhere + 4) = v;
      break;
    case kStackOverflow:
      if (t == 3) v = static_cast<float>(recurse(0, 1 << 30));
      break;
    case kBadWidth:
      v = __shfl_sync(0xffffffffu, v, 0, 12);
      break;
    case kDynamicSharedOverrun: {
      SEASTAR_DYNAMIC_SHARED(float, memory);  // 64 floats were requested
      memory[64 + t] = v;
      break;
    }
    case kMaskNamesMissingLanes:
      v = __shfl_xor_sync(0xffffffffu, v, 1);
      break;
    case kNestedLaunch:
#if defined(SEASTAR_CUDA_EMULATION)
      if (t == 0) SEASTAR_LAUNCH(child, 1, 1, 0, 0)(out);
#endif
      break;
  }
  out[t] = v;
}

EXPORT int run_misuse(int which, float* out) {
  unsigned threads = which == kMaskNamesMissingLanes ? 40 : 64;
  SEASTAR_LAUNCH(misuse, 2, threads, 64 * sizeof(float), 0)(which, out, nullptr);
  return launch_status();
}
