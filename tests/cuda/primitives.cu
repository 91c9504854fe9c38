// One kernel per primitive of the emulator, each checked by tests/test_cuda_emulation.py against
// a Python model of what the GPU does.
#include "common.cuh"

// ---- indexing and block order --------------------------------------------------------------------
__global__ void record_indices(unsigned* out) {
  unsigned* slot = out + 12ull * (linear_block() * blockDim.x * blockDim.y * blockDim.z + linear_thread());
  const unsigned values[12] = {threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,
                               blockDim.x,  blockDim.y,  blockDim.z,  gridDim.x,  gridDim.y,  gridDim.z};
  for (int i = 0; i < 12; ++i) slot[i] = values[i];
}

EXPORT int run_indices(unsigned* out, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  SEASTAR_LAUNCH(record_indices, dim3(gx, gy, gz), dim3(bx, by, bz), 0, 0)(out);
  return launch_status();
}

__global__ void record_block_order(unsigned* counter, unsigned* order) {
  if (linear_thread() == 0) order[atomicAdd(counter, 1u)] = linear_block();
}

EXPORT int run_block_order(unsigned* counter, unsigned* order, unsigned blocks) {
  SEASTAR_LAUNCH(record_block_order, blocks, 32, 0, 0)(counter, order);
  return launch_status();
}

// ---- SEASTAR_GLOBAL: the sectors each warp instruction touches (SEASTAR_EMU_TRAFFIC) ---------------
// Thread t reads x[t * stride] `repeats` times from one line (one warp instruction per pass), then
// writes out[t].
__global__ void strided_reads(const float* x, float* out, int stride, int repeats) {
  unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float total = 0.0f;
  for (int r = 0; r < repeats; ++r) total += SEASTAR_GLOBAL(x[t * stride]);
  SEASTAR_GLOBAL(out[t]) = total;
}

EXPORT int run_strided_reads(const float* x, float* out, int stride, int repeats, unsigned blocks, unsigned threads) {
  SEASTAR_LAUNCH(strided_reads, blocks, threads, 0, 0)(x, out, stride, repeats);
  return launch_status();
}

// ---- __syncthreads: a block-wide tree reduction in static shared memory ---------------------------
__global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float partial[1024];
  unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  partial[t] = i < static_cast<unsigned>(n) ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

EXPORT int run_block_sum(const float* x, float* out, int n, unsigned threads) {
  SEASTAR_LAUNCH(block_sum, (n + threads - 1) / threads, threads, 0, 0)(x, out, n);
  return launch_status();
}

// Threads past `active` return before any barrier (the usual bounds guard); the barrier then
// waits for the others only.
__global__ void early_return(const float* x, float* out, unsigned active) {
  __shared__ float staged[1024];
  unsigned t = threadIdx.x;
  if (t >= active) return;
  staged[t] = x[t];
  __syncthreads();
  out[t] = staged[(t + 1) % active];
}

EXPORT int run_early_return(const float* x, float* out, unsigned threads, unsigned active) {
  SEASTAR_LAUNCH(early_return, 1, threads, 0, 0)(x, out, active);
  return launch_status();
}

// ---- __syncwarp on partial masks -----------------------------------------------------------------
// Groups of 8 lanes pass values around their ring; each group loops a different number of times
// and synchronises only its own 8 lanes.
__global__ void group_ring(const int* x, int* out, int sync) {
  __shared__ int ring[256];
  unsigned t = threadIdx.x, lane = t % 32, group_base = t - t % 8, mask = 0xffu << (lane - lane % 8);
  int trips = static_cast<int>(lane / 8 + 1 + t / 32 % 2), value = x[t];
  for (int trip = 0; trip < trips; ++trip) {
    ring[t] = value;
    if (sync) __syncwarp(mask);
    value = ring[group_base + (t + 1) % 8] + 1;
    if (sync) __syncwarp(mask);
  }
  out[t] = value;
}

EXPORT int run_group_ring(const int* x, int* out, unsigned threads, int sync) {
  SEASTAR_LAUNCH(group_ring, 1, threads, 0, 0)(x, out, sync);
  return launch_status();
}

// ---- shuffles ------------------------------------------------------------------------------------
enum ShuffleKind { kIdx = 0, kUp = 1, kDown = 2, kXor = 3 };

// Lanes outside `mask` return at once; the others shuffle with their own operand.
template <class T>
__global__ void shuffle(int kind, unsigned mask, const T* in, const int* operand, int width, T* out) {
  unsigned t = threadIdx.x;
  if (!(mask >> (t % 32) & 1)) return;
  T value = in[t];
  int b = operand[t];
  switch (kind) {
    case kIdx: value = __shfl_sync(mask, value, b, width); break;
    case kUp: value = __shfl_up_sync(mask, value, static_cast<unsigned>(b), width); break;
    case kDown: value = __shfl_down_sync(mask, value, static_cast<unsigned>(b), width); break;
    default: value = __shfl_xor_sync(mask, value, b, width); break;
  }
  out[t] = value;
}

#define SHUFFLE_ENTRY(T, name)                                                                            \
  EXPORT int run_shuffle_##name(int kind, unsigned mask, const T* in, const int* operand, int width, T* out, \
                                unsigned threads) {                                                      \
    SEASTAR_LAUNCH(shuffle<T>, 1, threads, 0, 0)(kind, mask, in, operand, width, out);                     \
    return launch_status();                                                                              \
  }
SHUFFLE_ENTRY(int, int32)
SHUFFLE_ENTRY(unsigned int, uint32)
SHUFFLE_ENTRY(long long, int64)
SHUFFLE_ENTRY(unsigned long long, uint64)
SHUFFLE_ENTRY(float, float32)
SHUFFLE_ENTRY(double, float64)

// ---- votes and __activemask ----------------------------------------------------------------------
__global__ void vote(unsigned mask, const int* predicate, unsigned* ballot, int* any, int* all, unsigned* active) {
  unsigned t = threadIdx.x, warp_base = t - t % 32, count = min(32u, blockDim.x - warp_base);
  unsigned lanes = count == 32 ? 0xffffffffu : (1u << count) - 1;
  __syncwarp(lanes);
  active[t] = __activemask();  // between two rendezvous of every lane: all of them are active
  __syncwarp(lanes);
  if (!(mask >> (t % 32) & 1)) return;
  int p = predicate[t];
  ballot[t] = __ballot_sync(mask, p);
  any[t] = __any_sync(mask, p);
  all[t] = __all_sync(mask, p);
  // by now the lanes outside the mask have exited (they ran to their end before the ballot's
  // rendezvous released anyone), and between these two rendezvous no lane of the mask can exit
  __syncwarp(mask);
  active[blockDim.x + t] = __activemask();
  __syncwarp(mask);
}

EXPORT int run_vote(unsigned mask, const int* predicate, unsigned* ballot, int* any, int* all, unsigned* active,
                    unsigned threads) {
  SEASTAR_LAUNCH(vote, 1, threads, 0, 0)(mask, predicate, ballot, any, all, active);
  return launch_status();
}

// ---- atomics under contention --------------------------------------------------------------------
struct Counters {
  int i;
  unsigned int u;
  unsigned long long ull;
  float f;
  double d;
  int max, min, cas;
  unsigned long long cas_ull;
  unsigned int ticket;
};

__global__ void contend(Counters* c, unsigned* tickets) {
  unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&c->i, static_cast<int>(id % 7) - 3);
  atomicAdd(&c->u, id);
  atomicAdd(&c->ull, 1ull << 40 | id);
  atomicAdd(&c->f, 0.5f);
  atomicAdd(&c->d, 0.25);
  atomicMax(&c->max, static_cast<int>(id * 37 % 1001) - 500);
  atomicMin(&c->min, static_cast<int>(id * 37 % 1001) - 500);
  tickets[id] = atomicAdd(&c->ticket, 1u);
  // every lane reads the same old value, then all try to swap at once: all but one retry
  int seen = c->cas;
  unsigned long long seen_ull = c->cas_ull;
  __syncwarp();
  for (int old; (old = atomicCAS(&c->cas, seen, seen + 2)) != seen;) seen = old;
  for (unsigned long long old; (old = atomicCAS(&c->cas_ull, seen_ull, seen_ull + 3)) != seen_ull;) seen_ull = old;
}

EXPORT int run_contend(Counters* c, unsigned* tickets, unsigned blocks, unsigned threads) {
  SEASTAR_LAUNCH(contend, blocks, threads, 0, 0)(c, tickets);
  return launch_status();
}

EXPORT unsigned counters_size() { return sizeof(Counters); }

// ---- shared memory: poisoned at every block start, private to the block ---------------------------
// Every thread reads its words before any thread writes (the barrier orders them), then each
// block fills the memory with its own values and reads a neighbour's.
__global__ void probe_static_shared(unsigned* before, unsigned* after) {
  __shared__ unsigned tile[256];
  unsigned t = threadIdx.x, n = blockDim.x, slot = blockIdx.x * n + t;
  before[slot] = tile[t];
  __syncthreads();
  tile[t] = blockIdx.x * 1000 + t;
  __threadfence_block();
  __syncthreads();
  after[slot] = tile[(t + 1) % n];
}

EXPORT int run_static_shared(unsigned* before, unsigned* after, unsigned blocks, unsigned threads) {
  SEASTAR_LAUNCH(probe_static_shared, blocks, threads, 0, 0)(before, after);
  return launch_status();
}

__global__ void probe_dynamic_shared(unsigned* before, unsigned* after, unsigned words) {
  SEASTAR_DYNAMIC_SHARED(unsigned, memory);
  unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * words;
  for (unsigned w = t; w < words; w += n) before[base + w] = memory[w];
  __syncthreads();
  for (unsigned w = t; w < words; w += n) memory[w] = blockIdx.x * 1000000 + w;
  __syncthreads();
  for (unsigned w = t; w < words; w += n) after[base + w] = memory[(w + 1) % words];
}

EXPORT int set_dynamic_shared_limit(int bytes) {
  const cudaError_t code = cudaFuncSetAttribute(probe_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  // returned here, so taken off the error state, as seastar_cuda.h's callers do: else the next launch
  // in this process (another test's) would report it
  (void)cudaGetLastError();
  return static_cast<int>(code);
}

EXPORT int run_dynamic_shared(unsigned* before, unsigned* after, unsigned words, unsigned blocks, unsigned threads) {
  SEASTAR_LAUNCH(probe_dynamic_shared, blocks, threads, words * sizeof(unsigned), 0)(before, after, words);
  return launch_status();
}

// ---- launch limits -------------------------------------------------------------------------------
__global__ void nothing() {}

EXPORT int run_nothing(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem) {
  SEASTAR_LAUNCH(nothing, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, 0)();
  return launch_status();
}

// ---- math: what kernels use, under both compilers ----------------------------------------------
__global__ void math_probe(const float* x, double* out) {
  float a = __ldg(&x[0]), b = __ldg(&x[1]), nan = x[2];
  double da = a, db = b;
  int i = static_cast<int>(x[3]);
  unsigned u = 3;
  const double values[] = {
      expf(a), logf(b), sqrtf(b), rsqrtf(b), tanhf(a), expm1f(a), powf(a, b), fabsf(-a), fminf(a, b), fmaxf(a, b),
      exp(da), log(db), sqrt(db), rsqrt(db), tanh(da), expm1(da), pow(da, db), fabs(-da), fmin(da, db), fmax(da, db),
      __expf(a), __logf(b), __fdividef(a, b), __int_as_float(__float_as_int(a)), __uint_as_float(__float_as_uint(b)),
      min(a, b), max(a, b), min(nan, a), max(a, nan), min(da, b), max(a, db), static_cast<double>(min(i, u)),
      static_cast<double>(max(i, 1)), static_cast<double>(isnan(nan)), static_cast<double>(isinf(INFINITY)),
      static_cast<double>(isnan(NAN)), static_cast<double>(isinf(a))};
  for (unsigned k = 0; k < sizeof(values) / sizeof(values[0]); ++k) out[k] = values[k];
}

EXPORT int run_math(const float* x, double* out) {
  SEASTAR_LAUNCH(math_probe, 1, 1, 0, 0)(x, out);
  return launch_status();
}
