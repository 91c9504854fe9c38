// seastar_cuda_emu.h: CUDA's execution model on the CPU, so that generated .cu sources compiled with
// g++ as C++17 run their kernels here, exactly enough that lane-stride, barrier and shared-memory
// bugs fail tests. Header-only: every translation unit that includes it is self-contained.
//
// How a launch runs (docs/cuda-emulation.md has the full account):
// - synchronously, on the calling OS thread; blocks one after another in a seeded random order;
// - each block's threads as cooperative fibers (ucontext, mmap'd stacks with guard pages) that
//   switch only at __syncthreads, __syncwarp and the warp primitives; between two such points the
//   runnable threads run in a seeded random order, so a missing barrier gives a wrong result for
//   some seed (SEASTAR_EMU_SEED, default 0; SEASTAR_EMU_STACK_KB, default 64);
// - static __shared__ arrays live in thread-local storage (one block at a time per OS thread), and
//   they and the dynamic shared memory are filled with 0xFF bytes (NaN for floats) at block start;
// - misuse (a barrier some thread never reaches, a shuffle from a lane outside the mask, a deadlock,
//   a memory fault inside a kernel, launch limits) stops the launch and is reported, with the
//   primitive, block and thread, by cudaGetLastError() / cudaGetErrorString(): never a crash or hang.
#pragma once

#if defined(__CUDACC__)
#error "seastar_cuda_emu.h emulates CUDA on the host; under nvcc include seastar_cuda.h, which uses the real CUDA headers"
#endif

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <math.h>  // expf, tanhf, isnan, INFINITY, NAN ... in the global namespace, as CUDA has them

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#define SEASTAR_CUDA_EMULATION 1

// ---- qualifiers ----------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// Static shared arrays: shared by the fibers of the running block, which all run on one OS thread,
// and re-poisoned at each block start (see poison_static_shared).
#define __shared__ static thread_local

#define SEASTAR_LAUNCH(kernel, grid, block, shmem_bytes, stream) \
  ::seastar_emu::detail::make_launch(kernel, grid, block, shmem_bytes, stream)
#define SEASTAR_DYNAMIC_SHARED(T, name) T* const name = ::seastar_emu::detail::dynamic_shared<T>()
#define SEASTAR_GLOBAL(x) (*::seastar_emu::detail::counted(&(x), __LINE__))

// Everything below is private to the module (shared library or executable) it is compiled into:
// two kernel libraries loaded into one process never share emulator state.
#pragma GCC visibility push(hidden)

// ---- runtime types, as cuda_runtime.h spells them ------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

constexpr int warpSize = 32;

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorIllegalAddress = 700,
  cudaErrorIllegalInstruction = 715,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
};
typedef enum cudaError cudaError_t;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace seastar_emu {
namespace detail {

// CUDA's limits on compute capability 9.0 (H100/H200)
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr std::size_t kDefaultDynamicShared = 48 * 1024;
constexpr std::size_t kMaxDynamicShared = 227 * 1024;  // sm_90's opt-in limit, the emulated device's default
constexpr unsigned kFullMask = 0xffffffffu;

struct Site {
  const char* file;
  int line;
};

enum class Wait : unsigned char { running, barrier, warp, exited };
enum class Op : unsigned char { syncwarp, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::syncwarp: return "__syncwarp";
    case Op::shfl_idx: return "__shfl_sync";
    case Op::shfl_up: return "__shfl_up_sync";
    case Op::shfl_down: return "__shfl_down_sync";
    case Op::shfl_xor: return "__shfl_xor_sync";
    case Op::ballot: return "__ballot_sync";
    case Op::any: return "__any_sync";
    case Op::all: return "__all_sync";
  }
  return "?";
}

// One CUDA thread of the running block.
struct Thread {
  ucontext_t context;
  unsigned char* stack;  // lowest usable byte; the guard region lies below it
  uint3 idx;
  unsigned linear;  // x + y * blockDim.x + z * blockDim.x * blockDim.y; warps are 32 consecutive ids
  Wait wait;
  Site site;  // where it waits
  // the warp primitive it waits at, and what it brought
  Op op;
  unsigned mask;
  const char* type;
  std::uint64_t value;
  int operand;  // source lane, delta or lane mask
  int width;
  std::uint64_t result;
  // global accesses this block (SEASTAR_EMU_TRAFFIC): (source line << 32 | how many times this thread
  // reached that line before, the 32-byte sector); lanes agreeing on the first are one warp instruction
  std::vector<std::pair<std::uint64_t, std::uint64_t>> accesses;
  std::vector<std::uint32_t> reached;  // by source line
};

// Memory traffic of one launch: the sectors each warp instruction touched, summed (what the memory
// system is asked for), the distinct sectors of the launch (what DRAM must deliver at least), and
// the largest of any one warp's requests (the critical path a heavy row puts on one warp).
struct Traffic {
  std::uint64_t requested = 0, max_warp = 0, warps = 0;
  std::vector<std::uint64_t> sectors;  // every sector touched, deduplicated at the end of the launch
  std::map<std::uint32_t, std::uint64_t> by_line;  // requested sectors by source line
};

struct Emulator {
  std::mutex launch_mutex;  // one launch at a time in this module

  // the launch in progress (valid while launch_mutex is held)
  const void* kernel;
  dim3 grid, block;
  std::size_t shmem;
  unsigned long long seed;
  uint3 block_idx;
  unsigned nthreads;
  std::vector<Thread> threads;
  std::vector<unsigned> runnable;
  Thread* current = nullptr;  // the fiber running now; null while the scheduler runs
  ucontext_t scheduler;
  void (*invoke)(const void*);
  const void* params;
  unsigned char* dynamic_shared;
  unsigned char* static_shared;
  std::size_t static_shared_bytes;
  unsigned waiting_at_barrier, exited;
  unsigned barriers_completed;  // every thread that has not exited has passed this many
  unsigned exited_late;         // threads that exited after passing a barrier
  unsigned first_exited_late;   // one of them, for messages
  Site barrier_site;            // where the threads waiting at __syncthreads wait
  cudaError_t error;
  std::string message;
  volatile sig_atomic_t fault_signal;
  void* volatile fault_address;
  pthread_t launch_thread;
  struct sigaction previous_actions[3];
  stack_t previous_altstack;

  // memory kept from launch to launch
  std::vector<unsigned char*> stacks;
  std::size_t stack_bytes = 0, guard_bytes = 0;
  unsigned char* shared_region = nullptr;  // dynamic shared memory, followed by a guard page
  std::size_t shared_capacity = 0;
  unsigned char* altstack = nullptr;

  // what cudaGetLastError / cudaGetErrorString report
  std::mutex errors_mutex;
  cudaError_t last_error = cudaSuccess;
  std::map<int, std::string> messages;  // the latest detailed message for each error code
  std::map<const void*, std::size_t> max_dynamic_shared;

  const char* traffic_path = nullptr;  // SEASTAR_EMU_TRAFFIC: where launches append their traffic
  Traffic traffic;
};

inline Emulator emu;

// Gives this module a TLS segment and finds it: static __shared__ arrays are the module's other
// thread-local variables.
inline thread_local unsigned char tls_anchor;

inline std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* fmt, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return buffer;
}

inline std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

inline std::string describe(const Thread& t) {
  return format("thread (%u,%u,%u) (warp %u, lane %u)", t.idx.x, t.idx.y, t.idx.z, t.linear / 32, t.linear % 32);
}

inline std::string describe(Site site) { return format("%s:%d", site.file, site.line); }

inline std::string describe_wait(const Thread& t) {
  if (t.wait == Wait::barrier) return describe(t) + " waits at __syncthreads() at " + describe(t.site);
  if (t.wait == Wait::warp)  // shuffles say their type: lanes shuffling different types never meet
    return describe(t) + format(" waits at %s%s%s%s(mask 0x%08x) at ", op_name(t.op), *t.type ? "<" : "", t.type,
                                *t.type ? ">" : "", t.mask) +
           describe(t.site);
  return describe(t) + (t.wait == Wait::exited ? " has exited" : " is running");
}

inline std::string kernel_name(const void* kernel) {
  Dl_info info;
  if (dladdr(kernel, &info) && info.dli_sname && info.dli_saddr == kernel) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 ? demangled : info.dli_sname;
    std::free(demangled);
    return name;
  }
  return format("%p", kernel);
}

inline void record_error(cudaError_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(emu.errors_mutex);
  emu.last_error = code;
  emu.messages[code] = message;
}

// Ends the launch with an error; from a fiber, the fiber is abandoned and the scheduler resumes.
inline void set_error(cudaError_t code, const std::string& message) {
  if (emu.error != cudaSuccess) return;  // the first problem is the one to report
  emu.error = code;
  emu.message = format("block (%u,%u,%u): ", emu.block_idx.x, emu.block_idx.y, emu.block_idx.z) + message;
}

[[noreturn]] inline void fail(cudaError_t code, const std::string& message) {
  set_error(code, message);
  setcontext(&emu.scheduler);
  std::abort();  // setcontext does not return
}

// The thread calling a device primitive; null (and an error recorded) when no kernel runs.
inline Thread* running_thread(const char* primitive) {
  if (emu.current == nullptr)
    record_error(cudaErrorIllegalInstruction,
                 format("%s was called outside a kernel launched with SEASTAR_LAUNCH", primitive));
  return emu.current;
}

// Blocks the running fiber until the scheduler releases it.
inline void block_until_released(Thread& t) { swapcontext(&t.context, &emu.scheduler); }

// ---- __syncthreads and thread exit ---------------------------------------------------------------
// A barrier completes when every thread of the block that has not exited waits at the same
// __syncthreads call (as on sm_70+). A thread that returns before its first barrier (the usual
// `if (i >= n) return;`) simply stops counting. A thread that exits after passing a barrier,
// while others wait at the next one or before they reach it, is an error whatever the order: it
// is the signature of a barrier in divergent code, such as a loop with per-thread trip counts.
inline bool same_site(Site a, Site b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

inline void syncthreads(Site site) {
  Thread* caller = running_thread("__syncthreads");
  if (caller == nullptr) return;
  Thread& t = *caller;
  if (emu.exited_late > 0)
    fail(cudaErrorIllegalInstruction,
         describe(t) + " reached __syncthreads() at " + describe(site) + " after " +
             describe(emu.threads[emu.first_exited_late]) +
             " exited, having passed an earlier barrier: once past a __syncthreads, every thread of the block must "
             "reach each later one (a barrier in divergent code?)");
  if (emu.waiting_at_barrier > 0 && !same_site(site, emu.barrier_site))
    fail(cudaErrorIllegalInstruction,
         "__syncthreads in divergent code: " + describe(t) + " reached __syncthreads() at " + describe(site) +
             " while other threads wait at __syncthreads() at " + describe(emu.barrier_site));
  if (emu.waiting_at_barrier++ == 0) emu.barrier_site = site;
  t.wait = Wait::barrier;
  t.site = site;
  block_until_released(t);
}

inline unsigned warp_lanes(unsigned warp_base) {  // the lanes that exist in a warp of this block
  unsigned count = emu.nthreads - warp_base < 32 ? emu.nthreads - warp_base : 32;
  return count == 32 ? kFullMask : (1u << count) - 1;
}

[[noreturn]] inline void thread_exit(Thread& t) {
  bool late = emu.barriers_completed > 0;
  if (late && emu.waiting_at_barrier > 0)
    fail(cudaErrorIllegalInstruction,
         describe(t) + " exited while other threads wait at __syncthreads() at " + describe(emu.barrier_site) +
             ", having passed an earlier barrier: once past a __syncthreads, every thread of the block must reach "
             "each later one (a barrier in divergent code?)");
  unsigned lane = t.linear % 32, base = t.linear - lane;
  for (unsigned other = base; other < base + 32 && other < emu.nthreads; ++other) {
    const Thread& o = emu.threads[other];
    if (o.wait == Wait::warp && (o.mask >> lane & 1))
      fail(cudaErrorIllegalInstruction,
           describe(t) + " exited while " + describe_wait(o) +
               " with it in the mask: every lane in the mask must reach a matching call");
  }
  t.wait = Wait::exited;
  ++emu.exited;
  if (late && emu.exited_late++ == 0) emu.first_exited_late = t.linear;
  setcontext(&emu.scheduler);
  std::abort();
}

// ---- warp primitives -----------------------------------------------------------------------------
// Each is a rendezvous of the lanes in `mask`: a lane waits until every lane of the mask waits at
// the same primitive with the same mask and type (as shfl.sync and bar.warp.sync on sm_70+), then
// the scheduler computes every lane's result at once (complete_warp_op).
inline void check_warp_call(const Thread& t, const char* primitive, unsigned mask, int width, Site site) {
  unsigned lane = t.linear % 32, base = t.linear - lane;
  auto misuse = [&](const std::string& what) {
    fail(cudaErrorIllegalInstruction,
         format("%s(mask 0x%08x) at ", primitive, mask) + describe(site) + ": " + describe(t) + what);
  };
  if (!(mask >> lane & 1)) misuse(" called it but is not in the mask");
  if (mask & ~warp_lanes(base))
    misuse(format(" called it, but the mask names lanes that do not exist: the block has %u threads, so warp %u "
                  "has lanes 0x%08x only",
                  emu.nthreads, base / 32, warp_lanes(base)));
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1) && emu.threads[base + l].wait == Wait::exited)
      misuse(format(" waits for lane %u, but ", l) + describe(emu.threads[base + l]) + " has exited");
  if (width < 1 || width > 32 || (width & (width - 1)))
    misuse(format(" passed width %d; width must be a power of two from 1 to 32", width));
}

template <class T>
inline std::uint64_t to_bits(T value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

template <class T>
inline T from_bits(std::uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

template <class T>
inline T warp_op(Op op, unsigned mask, T value, int operand, int width, const char* type, Site site) {
  Thread* caller = running_thread(op_name(op));
  if (caller == nullptr) return value;
  Thread& t = *caller;
  check_warp_call(t, op_name(op), mask, width, site);
  t.wait = Wait::warp;
  t.site = site;
  t.op = op;
  t.mask = mask;
  t.type = type;
  t.value = to_bits(value);
  t.operand = operand;
  t.width = width;
  block_until_released(t);
  return from_bits<T>(t.result);
}

// The source lane of a shuffle, as PTX's shfl.sync defines it: c packs the segment mask
// (32 - width) << 8 and the clamp (0 for up, 31 otherwise); out of range, a lane reads itself.
inline unsigned shuffle_source(Op op, unsigned lane, int operand, int width) {
  unsigned b = static_cast<unsigned>(operand) & 31, segmask = (32u - width) & 31, clamp = op == Op::shfl_up ? 0 : 31;
  int max_lane = static_cast<int>((lane & segmask) | (clamp & ~segmask)), min_lane = static_cast<int>(lane & segmask);
  int j = 0;
  bool in_range = false;
  switch (op) {
    case Op::shfl_up: j = static_cast<int>(lane) - static_cast<int>(b); in_range = j >= max_lane; break;
    case Op::shfl_down: j = static_cast<int>(lane + b); in_range = j <= max_lane; break;
    case Op::shfl_xor: j = static_cast<int>(lane ^ b); in_range = j <= max_lane; break;
    default: j = min_lane | static_cast<int>(b & ~segmask); in_range = j <= max_lane; break;
  }
  return in_range ? static_cast<unsigned>(j) : lane;
}

// Called by the scheduler for a complete group: every lane of `mask` in the warp at `base` waits
// at the same primitive. Returns false (with the error set) on a shuffle from outside the mask.
inline bool complete_warp_op(unsigned base, unsigned mask) {
  Thread* lanes = &emu.threads[base];
  unsigned votes = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1) && lanes[l].value != 0) votes |= 1u << l;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1)) continue;
    Thread& t = lanes[l];
    switch (t.op) {
      case Op::syncwarp: break;
      case Op::ballot: t.result = votes; break;
      case Op::any: t.result = votes != 0; break;
      case Op::all: t.result = votes == mask; break;
      default: {
        unsigned source = shuffle_source(t.op, l, t.operand, t.width);
        if (!(mask >> source & 1)) {
          set_error(cudaErrorIllegalInstruction,
                    format("%s(mask 0x%08x) at ", op_name(t.op), mask) + describe(t.site) + ": " + describe(t) +
                        format(" reads lane %u (operand %d, width %d), which is not in the mask: its value is "
                               "undefined on the GPU",
                               source, t.operand, t.width));
          return false;
        }
        t.result = lanes[source].value;
      }
    }
  }
  for (unsigned l = 0; l < 32; ++l)
    if (mask >> l & 1) {
      lanes[l].wait = Wait::running;
      emu.runnable.push_back(base + l);
    }
  return true;
}

inline bool group_complete(unsigned base, const Thread& first) {
  for (unsigned l = 0; l < 32; ++l) {
    if (!(first.mask >> l & 1)) continue;
    const Thread& t = emu.threads[base + l];
    if (t.wait != Wait::warp || t.op != first.op || t.mask != first.mask || std::strcmp(t.type, first.type) != 0)
      return false;
  }
  return true;
}

// ---- the scheduler -------------------------------------------------------------------------------
struct Rng {  // splitmix64: small, fast and good enough to shuffle schedules
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// A seeded bijection of [0, n) without materialising it (grids may have 2^31 blocks): a 4-round
// Feistel network on the smallest even number of bits that covers n, cycle-walked into range.
struct BlockOrder {
  std::uint64_t n, keys[4];
  unsigned half_bits;
  BlockOrder(std::uint64_t count, Rng& rng) : n(count) {
    unsigned bits = 2;
    while (bits < 64 && (1ull << bits) < n) bits += 2;
    half_bits = bits / 2;
    for (auto& key : keys) key = rng.next();
  }
  std::uint64_t encrypt(std::uint64_t x) const {
    std::uint64_t half_mask = (1ull << half_bits) - 1, left = x >> half_bits, right = x & half_mask;
    for (std::uint64_t key : keys) {
      Rng round{right ^ key};
      std::uint64_t next_right = left ^ (round.next() & half_mask);
      left = right;
      right = next_right;
    }
    return (left << half_bits) | right;
  }
  std::uint64_t operator[](std::uint64_t i) const {
    do i = encrypt(i);
    while (i >= n);
    return i;
  }
};

inline void thread_main() {
  Thread& t = *emu.current;
  bool threw = false;
  try {
    emu.invoke(emu.params);
  } catch (...) {
    threw = true;
  }
  if (threw) fail(cudaErrorLaunchFailure, describe(t) + ": a C++ exception escaped the kernel");
  thread_exit(t);
}

inline std::string deadlock_report() {
  std::string report = "deadlock: no thread can continue:";
  unsigned listed = 0, waiting = 0;
  for (unsigned i = 0; i < emu.nthreads; ++i) {
    const Thread& t = emu.threads[i];
    if (t.wait == Wait::exited) continue;
    ++waiting;
    // show every distinct kind of wait once, up to 4 of them
    bool seen = false;
    for (unsigned j = 0; j < i && !seen; ++j) {
      const Thread& o = emu.threads[j];
      seen = o.wait == t.wait && same_site(o.site, t.site) && (t.wait != Wait::warp || o.mask == t.mask);
    }
    if (!seen && listed < 4) {
      report += (listed++ ? "; " : " ") + describe_wait(t);
    }
  }
  return report + format(" (%u threads waiting)", waiting);
}

// The released threads go to emu.runnable. Returns false when the launch failed.
inline bool release_waiting_threads() {
  if (emu.waiting_at_barrier > 0 && emu.waiting_at_barrier == emu.nthreads - emu.exited) {
    emu.waiting_at_barrier = 0;
    ++emu.barriers_completed;
    for (unsigned i = 0; i < emu.nthreads; ++i)
      if (emu.threads[i].wait == Wait::barrier) {
        emu.threads[i].wait = Wait::running;
        emu.runnable.push_back(i);
      }
    return true;
  }
  for (unsigned i = 0; i < emu.nthreads; ++i) {
    const Thread& t = emu.threads[i];
    unsigned lane = t.linear % 32, base = t.linear - lane;
    // the lowest lane of a mask speaks for its group
    if (t.wait == Wait::warp && static_cast<unsigned>(__builtin_ctz(t.mask)) == lane && group_complete(base, t) &&
        !complete_warp_op(base, t.mask))
      return false;
  }
  return true;
}

template <class T>
inline T* counted(T* address, int line) {
  Thread* t = emu.current;
  if (emu.traffic_path != nullptr && t != nullptr) {
    auto at = static_cast<std::size_t>(line);
    if (t->reached.size() <= at) t->reached.resize(at + 1, 0);
    std::uint64_t key = static_cast<std::uint64_t>(at) << 32 | t->reached[at]++;
    auto first = reinterpret_cast<std::uintptr_t>(address), last = first + sizeof(T) - 1;
    for (std::uintptr_t sector = first / 32; sector <= last / 32; ++sector) t->accesses.emplace_back(key, sector);
  }
  return address;
}

// Adds the finished block's accesses to the launch's traffic, one warp at a time.
inline void count_block_traffic() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> warp;
  for (unsigned base = 0; base < emu.nthreads; base += 32) {
    warp.clear();
    for (unsigned i = base; i < base + 32 && i < emu.nthreads; ++i) {
      Thread& t = emu.threads[i];
      warp.insert(warp.end(), t.accesses.begin(), t.accesses.end());
      t.accesses.clear();
      t.reached.clear();
    }
    std::sort(warp.begin(), warp.end());
    std::uint64_t requests = std::unique(warp.begin(), warp.end()) - warp.begin();
    for (std::uint64_t k = 0; k < requests; ++k) {
      emu.traffic.sectors.push_back(warp[k].second);
      emu.traffic.by_line[static_cast<std::uint32_t>(warp[k].first >> 32)] += 1;
    }
    emu.traffic.requested += requests;
    emu.traffic.max_warp = std::max(emu.traffic.max_warp, requests);
    emu.traffic.warps += 1;
  }
}

// Appends the launch's traffic as one JSON line to SEASTAR_EMU_TRAFFIC's file.
inline void write_traffic() {
  std::vector<std::uint64_t>& sectors = emu.traffic.sectors;
  std::sort(sectors.begin(), sectors.end());
  std::uint64_t distinct = std::unique(sectors.begin(), sectors.end()) - sectors.begin();
  if (FILE* out = std::fopen(emu.traffic_path, "a")) {
    std::fprintf(out,
                 "{\"kernel\": \"%s\", \"grid\": %u, \"block\": %u, \"warps\": %llu, \"requested_sectors\": %llu, "
                 "\"distinct_sectors\": %llu, \"max_warp_sectors\": %llu, \"by_line\": {",
                 kernel_name(emu.kernel).c_str(), emu.grid.x * emu.grid.y * emu.grid.z, emu.nthreads,
                 static_cast<unsigned long long>(emu.traffic.warps),
                 static_cast<unsigned long long>(emu.traffic.requested), static_cast<unsigned long long>(distinct),
                 static_cast<unsigned long long>(emu.traffic.max_warp));
    const char* separator = "";
    for (const auto& [line, sectors] : emu.traffic.by_line) {
      std::fprintf(out, "%s\"%u\": %llu", separator, line, static_cast<unsigned long long>(sectors));
      separator = ", ";
    }
    std::fprintf(out, "}}\n");
    std::fclose(out);
  }
  emu.traffic = Traffic{};
}

inline bool run_block(std::uint64_t linear_block) {
  dim3 g = emu.grid, b = emu.block;
  emu.block_idx = {static_cast<unsigned>(linear_block % g.x), static_cast<unsigned>(linear_block / g.x % g.y),
                   static_cast<unsigned>(linear_block / g.x / g.y)};
  std::memset(emu.dynamic_shared, 0xFF, round_up(emu.shmem, 16));
  std::memset(emu.static_shared, 0xFF, emu.static_shared_bytes);
  for (unsigned i = 0; i < emu.nthreads; ++i) {
    Thread& t = emu.threads[i];
    t.idx = {i % b.x, i / b.x % b.y, i / b.x / b.y};
    t.linear = i;
    t.wait = Wait::running;
    t.context.uc_stack.ss_sp = t.stack;
    t.context.uc_stack.ss_size = emu.stack_bytes;
    t.context.uc_link = nullptr;
    makecontext(&t.context, thread_main, 0);
  }
  emu.waiting_at_barrier = emu.exited = emu.barriers_completed = emu.exited_late = 0;
  Rng rng{emu.seed * 0x2545f4914f6cdd1dull + linear_block};
  emu.runnable.clear();
  for (unsigned i = 0; i < emu.nthreads; ++i) emu.runnable.push_back(i);
  std::vector<unsigned> phase;
  while (!emu.runnable.empty()) {
    phase.swap(emu.runnable);
    emu.runnable.clear();
    for (std::size_t i = phase.size(); i > 1; --i) std::swap(phase[i - 1], phase[rng.next() % i]);
    for (unsigned i : phase) {
      emu.current = &emu.threads[i];
      swapcontext(&emu.scheduler, &emu.current->context);
      Thread* ran = emu.current;
      emu.current = nullptr;
      if (emu.fault_signal) {
        auto* address = static_cast<unsigned char*>(emu.fault_address);
        bool overflow = address < ran->stack && address >= ran->stack - emu.guard_bytes;
        if (overflow)
          set_error(cudaErrorIllegalAddress,
                    describe(*ran) + format(" overflowed its %zu KiB stack; set SEASTAR_EMU_STACK_KB higher",
                                            emu.stack_bytes / 1024));
        else if (emu.fault_signal == SIGFPE)
          set_error(cudaErrorLaunchFailure, describe(*ran) + " raised an arithmetic fault (integer division by zero?)");
        else if (address >= emu.shared_region + emu.shared_capacity &&
                 address < emu.shared_region + emu.shared_capacity + page_size())
          set_error(cudaErrorIllegalAddress,
                    describe(*ran) + format(" accessed %p, past the end of the %zu bytes of dynamic shared memory "
                                            "the launch asked for",
                                            static_cast<void*>(address), emu.shmem));
        else
          set_error(cudaErrorIllegalAddress,
                    describe(*ran) + format(" made an illegal memory access at address %p", static_cast<void*>(address)));
      }
      if (emu.error != cudaSuccess) return false;
    }
    if (!release_waiting_threads()) return false;
  }
  if (emu.exited == emu.nthreads) {
    if (emu.traffic_path != nullptr) count_block_traffic();
    return true;
  }
  set_error(cudaErrorIllegalInstruction, deadlock_report());
  return false;
}

// ---- memory faults inside a kernel become launch errors ------------------------------------------
constexpr int kFaultSignals[3] = {SIGSEGV, SIGBUS, SIGFPE};

inline void on_fault(int signal, siginfo_t* info, void*) {
  bool in_kernel = emu.current != nullptr && pthread_equal(pthread_self(), emu.launch_thread);
  if (!in_kernel) {  // not ours: let the previous handler see the fault when it recurs
    for (int i = 0; i < 3; ++i)
      if (kFaultSignals[i] == signal) sigaction(signal, &emu.previous_actions[i], nullptr);
    return;
  }
  emu.fault_address = info->si_addr;
  emu.fault_signal = signal;
  setcontext(&emu.scheduler);  // restores the scheduler's signal mask, unblocking `signal`
}

inline void install_fault_handlers() {
  constexpr std::size_t kAltStack = 64 * 1024;
  if (emu.altstack == nullptr) emu.altstack = static_cast<unsigned char*>(std::malloc(kAltStack));
  stack_t altstack{};
  altstack.ss_sp = emu.altstack;
  altstack.ss_size = kAltStack;
  sigaltstack(&altstack, &emu.previous_altstack);
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kFaultSignals[i], &action, &emu.previous_actions[i]);
}

inline void restore_fault_handlers() {
  for (int i = 0; i < 3; ++i) sigaction(kFaultSignals[i], &emu.previous_actions[i], nullptr);
  sigaltstack(&emu.previous_altstack, nullptr);
}

// ---- memory for a launch -------------------------------------------------------------------------
// Stacks with an inaccessible guard region below each: an overflow faults (and is reported)
// instead of overwriting the next fiber's stack.
// The stacks go back after each launch: every emulated library keeps its own state, and a process
// that loads hundreds of them (a test suite) would otherwise hold two mappings per thread for each,
// past the kernel's limit on mappings (vm.max_map_count, 65530 by default).
inline void release_stacks() {
  for (unsigned char* stack : emu.stacks) munmap(stack - emu.guard_bytes, emu.guard_bytes + emu.stack_bytes);
  emu.stacks.clear();
}

inline bool prepare_stacks(std::size_t stack_bytes, unsigned count) {
  std::size_t guard = 256 * 1024;
  if (emu.stack_bytes != stack_bytes) {
    release_stacks();
    emu.stack_bytes = stack_bytes;
    emu.guard_bytes = guard;
  }
  while (emu.stacks.size() < count) {
    void* region = mmap(nullptr, guard + stack_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (region == MAP_FAILED) return false;
    mprotect(region, guard, PROT_NONE);
    emu.stacks.push_back(static_cast<unsigned char*>(region) + guard);
  }
  return true;
}

// Dynamic shared memory ends at a guard page, so an access past the launch's shmem_bytes (rounded
// up to 16) faults and is reported.
inline bool prepare_dynamic_shared(std::size_t bytes) {
  std::size_t needed = round_up(bytes, 16);
  if (emu.shared_capacity < needed || emu.shared_region == nullptr) {
    if (emu.shared_region) munmap(emu.shared_region, emu.shared_capacity + page_size());
    std::size_t capacity = round_up(needed > 0 ? needed : 1, page_size());
    void* region = mmap(nullptr, capacity + page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) return false;
    emu.shared_region = static_cast<unsigned char*>(region);
    emu.shared_capacity = capacity;
    mprotect(emu.shared_region + capacity, page_size(), PROT_NONE);
  }
  emu.dynamic_shared = emu.shared_region + emu.shared_capacity - needed;
  return true;
}

inline int find_tls_segment(dl_phdr_info* info, std::size_t, void* found) {
  auto* begin = static_cast<unsigned char*>(info->dlpi_tls_data);
  if (begin == nullptr) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type == PT_TLS && &tls_anchor >= begin && &tls_anchor < begin + header.p_memsz) {
      emu.static_shared = begin;
      emu.static_shared_bytes = header.p_memsz;
      *static_cast<bool*>(found) = true;
      return 1;
    }
  }
  return 0;
}

// Static __shared__ arrays are this module's thread-local variables: the calling thread's copy of
// the module's TLS segment, which is poisoned whole at each block start. So a module that runs
// emulated kernels must not keep thread_local state of its own.
inline bool locate_static_shared() {
  *static_cast<volatile unsigned char*>(&tls_anchor) = 0;  // allocates the segment in this thread
  bool found = false;
  dl_iterate_phdr(find_tls_segment, &found);
  return found;
}

// ---- launch --------------------------------------------------------------------------------------
inline bool read_env_number(const char* name, unsigned long long fallback, unsigned long long& out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    out = fallback;
    return true;
  }
  char* end = nullptr;
  out = std::strtoull(text, &end, 0);
  return *end == '\0' && text[0] != '-';
}

inline std::string check_configuration() {
  const unsigned grid[3] = {emu.grid.x, emu.grid.y, emu.grid.z}, block[3] = {emu.block.x, emu.block.y, emu.block.z};
  const char* axis = "xyz";
  for (int i = 0; i < 3; ++i) {
    if (grid[i] < 1 || grid[i] > kMaxGridDim[i])
      return format("gridDim.%c is %u; it must be from 1 to %u", axis[i], grid[i], kMaxGridDim[i]);
    if (block[i] < 1 || block[i] > kMaxBlockDim[i])
      return format("blockDim.%c is %u; it must be from 1 to %u", axis[i], block[i], kMaxBlockDim[i]);
  }
  unsigned long long threads = 1ull * block[0] * block[1] * block[2];
  if (threads > kMaxThreadsPerBlock)
    return format("the block has %llu threads (%u x %u x %u); at most %u are allowed", threads, block[0], block[1],
                  block[2], kMaxThreadsPerBlock);
  return "";
}

// The emulated device's opt-in limit: SEASTAR_EMU_SHARED_OPTIN_KB (KiB, 48 to 227: e.g. 99 for
// sm_86/sm_89, 163 for sm_80), else sm_90's 227 KiB. 0 where the variable is not such a number.
inline std::size_t shared_optin_limit() {
  unsigned long long kib;
  if (!read_env_number("SEASTAR_EMU_SHARED_OPTIN_KB", kMaxDynamicShared / 1024, kib) || kib < 48 ||
      kib > kMaxDynamicShared / 1024)
    return 0;
  return static_cast<std::size_t>(kib) * 1024;
}

inline std::size_t dynamic_shared_limit(const void* kernel) {
  std::lock_guard<std::mutex> lock(emu.errors_mutex);
  auto raised = emu.max_dynamic_shared.find(kernel);
  return raised == emu.max_dynamic_shared.end() ? kDefaultDynamicShared : raised->second;
}

inline std::string launch_description() {
  return format("kernel %s<<<(%u,%u,%u), (%u,%u,%u), %zu>>> under the seastar CUDA emulator (SEASTAR_EMU_SEED=%llu): ",
                kernel_name(emu.kernel).c_str(), emu.grid.x, emu.grid.y, emu.grid.z, emu.block.x, emu.block.y,
                emu.block.z, emu.shmem, emu.seed);
}

// Validates the launch, then runs every block; records any error for cudaGetLastError.
inline void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shmem, void (*invoke)(const void*),
                     const void* params) {
  if (emu.current != nullptr && pthread_equal(pthread_self(), emu.launch_thread))  // from a kernel: stop that one
    fail(cudaErrorNotSupported, describe(*emu.current) + format(" launched kernel %s: dynamic parallelism is not "
                                                                "emulated",
                                                                kernel_name(kernel).c_str()));
  std::lock_guard<std::mutex> lock(emu.launch_mutex);
  emu.kernel = kernel;
  emu.grid = grid;
  emu.block = block;
  emu.shmem = shmem;
  emu.invoke = invoke;
  emu.params = params;
  emu.error = cudaSuccess;
  emu.message.clear();
  emu.fault_signal = 0;
  auto refuse = [](cudaError_t code, const std::string& why) { record_error(code, launch_description() + why); };
  if (!read_env_number("SEASTAR_EMU_SEED", 0, emu.seed)) {
    emu.seed = 0;  // for the message
    return refuse(cudaErrorInvalidValue,
                  format("SEASTAR_EMU_SEED=%s is not a non-negative integer", std::getenv("SEASTAR_EMU_SEED")));
  }
  unsigned long long stack_kib;
  if (!read_env_number("SEASTAR_EMU_STACK_KB", 64, stack_kib) || stack_kib < 16 || stack_kib > 1024 * 1024)
    return refuse(cudaErrorInvalidValue, format("SEASTAR_EMU_STACK_KB=%s is not a number of KiB from 16 to 1048576",
                                                std::getenv("SEASTAR_EMU_STACK_KB")));
  std::string bad_configuration = check_configuration();
  if (!bad_configuration.empty()) return refuse(cudaErrorInvalidConfiguration, bad_configuration);
  std::size_t limit = dynamic_shared_limit(kernel);
  if (shmem > limit)
    return refuse(cudaErrorInvalidValue,
                  format("%zu bytes of dynamic shared memory requested; the limit is %zu (raise it up to the "
                         "device's %zu with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                         "bytes))",
                         shmem, limit, shared_optin_limit()));
  emu.nthreads = block.x * block.y * block.z;
  if (!locate_static_shared())
    return refuse(cudaErrorNotSupported,
                  "cannot find this module's thread-local storage, where static __shared__ arrays live");
  if (!prepare_stacks(round_up(stack_kib * 1024, page_size()), emu.nthreads) || !prepare_dynamic_shared(shmem))
    return refuse(cudaErrorLaunchFailure, "out of memory for thread stacks or shared memory");
  emu.threads.assign(emu.nthreads, Thread{});
  for (unsigned i = 0; i < emu.nthreads; ++i) {
    emu.threads[i].stack = emu.stacks[i];
    getcontext(&emu.threads[i].context);  // a valid signal mask and FPU state for makecontext
  }
  emu.launch_thread = pthread_self();
  emu.traffic_path = std::getenv("SEASTAR_EMU_TRAFFIC");
  if (emu.traffic_path != nullptr && *emu.traffic_path == '\0') emu.traffic_path = nullptr;
  emu.traffic = Traffic{};
  install_fault_handlers();
  Rng rng{emu.seed};
  std::uint64_t blocks = 1ull * grid.x * grid.y * grid.z;
  BlockOrder order(blocks, rng);
  for (std::uint64_t i = 0; i < blocks; ++i)
    if (!run_block(order[i])) break;
  restore_fault_handlers();
  release_stacks();
  if (emu.error != cudaSuccess) record_error(emu.error, launch_description() + emu.message);
  else if (emu.traffic_path != nullptr) write_traffic();
}

template <class... P>
struct Launch {
  void (*kernel)(P...);
  dim3 grid, block;
  std::size_t shmem;

  // Arguments are converted to the kernel's parameter types and copied once, as for <<<>>>.
  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "SEASTAR_LAUNCH: wrong number of kernel arguments");
    struct Call {
      void (*kernel)(P...);
      std::tuple<P...> params;
    } call{kernel, std::tuple<P...>(std::forward<A>(args)...)};
    auto invoke = [](const void* data) {
      const Call& c = *static_cast<const Call*>(data);
      std::apply(c.kernel, c.params);
    };
    run_grid(reinterpret_cast<const void*>(kernel), grid, block, shmem, invoke, &call);
  }
};

template <class... P>
inline Launch<P...> make_launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shmem, cudaStream_t) {
  return Launch<P...>{kernel, grid, block, shmem};
}

template <class T>
inline T* dynamic_shared() {
  return reinterpret_cast<T*>(emu.dynamic_shared);
}

inline const uint3& thread_idx() { return emu.current->idx; }

}  // namespace detail
}  // namespace seastar_emu

// ---- built-in variables --------------------------------------------------------------------------
#define threadIdx (::seastar_emu::detail::thread_idx())
#define blockIdx (static_cast<const uint3&>(::seastar_emu::detail::emu.block_idx))
#define blockDim (static_cast<const dim3&>(::seastar_emu::detail::emu.block))
#define gridDim (static_cast<const dim3&>(::seastar_emu::detail::emu.grid))

// ---- synchronisation -----------------------------------------------------------------------------
// The call site (file and line, from GCC's __builtin_FILE/__builtin_LINE) names the barrier in
// messages and tells one __syncthreads from another.
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::seastar_emu::detail::syncthreads({file, line});
}

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace ::seastar_emu::detail;
  warp_op<int>(Op::syncwarp, mask, 0, 0, 32, "", {file, line});
}

inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- warp vote and shuffle -----------------------------------------------------------------------
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  using namespace ::seastar_emu::detail;
  return static_cast<unsigned>(warp_op<int>(Op::ballot, mask, predicate != 0, 0, 32, "", {file, line}));
}

inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace ::seastar_emu::detail;
  return warp_op<int>(Op::any, mask, predicate != 0, 0, 32, "", {file, line});
}

inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace ::seastar_emu::detail;
  return warp_op<int>(Op::all, mask, predicate != 0, 0, 32, "", {file, line});
}

// The lanes of the caller's warp that have not exited (what converged code sees on the GPU).
inline unsigned __activemask() {
  using namespace ::seastar_emu::detail;
  Thread* caller = running_thread("__activemask");
  if (caller == nullptr) return 0;
  unsigned base = caller->linear - caller->linear % 32, active = 0;
  for (unsigned l = 0; l < 32 && base + l < emu.nthreads; ++l)
    if (emu.threads[base + l].wait != Wait::exited) active |= 1u << l;
  return active;
}

// The overloads CUDA declares, so that arguments convert as they do under nvcc.
#define SEASTAR_EMU_SHUFFLES(T)                                                                                 \
  inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,                                 \
                       const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                      \
    using namespace ::seastar_emu::detail;                                                                      \
    return warp_op<T>(Op::shfl_idx, mask, var, srcLane, width, #T, {file, line});                                \
  }                                                                                                             \
  inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,                       \
                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                   \
    using namespace ::seastar_emu::detail;                                                                      \
    return warp_op<T>(Op::shfl_up, mask, var, static_cast<int>(delta), width, #T, {file, line});                 \
  }                                                                                                             \
  inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize,                     \
                            const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                 \
    using namespace ::seastar_emu::detail;                                                                      \
    return warp_op<T>(Op::shfl_down, mask, var, static_cast<int>(delta), width, #T, {file, line});               \
  }                                                                                                             \
  inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,                            \
                           const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                  \
    using namespace ::seastar_emu::detail;                                                                      \
    return warp_op<T>(Op::shfl_xor, mask, var, laneMask, width, #T, {file, line});                               \
  }
SEASTAR_EMU_SHUFFLES(int)
SEASTAR_EMU_SHUFFLES(unsigned int)
SEASTAR_EMU_SHUFFLES(long)
SEASTAR_EMU_SHUFFLES(unsigned long)
SEASTAR_EMU_SHUFFLES(long long)
SEASTAR_EMU_SHUFFLES(unsigned long long)
SEASTAR_EMU_SHUFFLES(float)
SEASTAR_EMU_SHUFFLES(double)
#undef SEASTAR_EMU_SHUFFLES

// ---- atomics -------------------------------------------------------------------------------------
// Fibers switch only at synchronisation points, so these are never interrupted; they are atomic
// anyway, so that host threads sharing memory with a launch stay safe.
namespace seastar_emu {
namespace detail {
template <class T, class F>
inline T atomic_update(T* address, F update) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = update(old);
  while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    desired = update(old);
  return old;
}
}  // namespace detail
}  // namespace seastar_emu

inline int atomicAdd(int* address, int val) { return __atomic_fetch_add(address, val, __ATOMIC_RELAXED); }
inline unsigned int atomicAdd(unsigned int* address, unsigned int val) {
  return __atomic_fetch_add(address, val, __ATOMIC_RELAXED);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long val) {
  return __atomic_fetch_add(address, val, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* address, float val) {
  return ::seastar_emu::detail::atomic_update(address, [val](float old) { return old + val; });
}
inline double atomicAdd(double* address, double val) {
  return ::seastar_emu::detail::atomic_update(address, [val](double old) { return old + val; });
}
inline int atomicMax(int* address, int val) {
  return ::seastar_emu::detail::atomic_update(address, [val](int old) { return old > val ? old : val; });
}
inline int atomicMin(int* address, int val) {
  return ::seastar_emu::detail::atomic_update(address, [val](int old) { return old < val ? old : val; });
}
inline int atomicCAS(int* address, int compare, int val) {
  __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value, whether or not it was swapped
}
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare, unsigned long long val) {
  __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}

template <class T>
inline T __ldg(const T* address) {
  return *address;
}

// ---- math the host lacks -------------------------------------------------------------------------
// The fast intrinsics are computed exactly here; on the GPU they are approximations, so compare
// kernels that use them with a tolerance.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float x, float y) { return x / y; }

inline int __float_as_int(float x) { return ::seastar_emu::detail::from_bits<int>(::seastar_emu::detail::to_bits(x)); }
inline float __int_as_float(int x) { return ::seastar_emu::detail::from_bits<float>(::seastar_emu::detail::to_bits(x)); }
inline unsigned int __float_as_uint(float x) {
  return ::seastar_emu::detail::from_bits<unsigned int>(::seastar_emu::detail::to_bits(x));
}
inline float __uint_as_float(unsigned int x) {
  return ::seastar_emu::detail::from_bits<float>(::seastar_emu::detail::to_bits(x));
}

// min/max as CUDA's math_functions.hpp declares them: floating-point ones are fminf/fmaxf (a NaN
// operand yields the other one), mixed signed/unsigned compare as unsigned.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline unsigned int min(int a, unsigned int b) { return min(static_cast<unsigned int>(a), b); }
inline unsigned int max(int a, unsigned int b) { return max(static_cast<unsigned int>(a), b); }
inline unsigned int min(unsigned int a, int b) { return min(a, static_cast<unsigned int>(b)); }
inline unsigned int max(unsigned int a, int b) { return max(a, static_cast<unsigned int>(b)); }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

// ---- half precision: 16-bit storage and exact conversions ----------------------------------------
// No arithmetic operators and no implicit conversions: kernels convert explicitly, so that code
// which compiles here means the same under nvcc. NaNs convert to CUDA's canonical NaNs, as
// cuda_fp16.hpp and cuda_bf16.hpp do.
struct __half {
  unsigned short __x;
};
struct __nv_bfloat16 {
  unsigned short __x;
};

inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short bits) { return __half{bits}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return __nv_bfloat16{bits}; }

inline float __half2float(__half h) {
  unsigned int sign = (h.__x & 0x8000u) << 16, exponent = (h.__x >> 10) & 0x1f, mantissa = h.__x & 0x3ffu;
  unsigned int bits;
  if (exponent == 0x1f) {
    bits = mantissa ? 0x7fffffffu : sign | 0x7f800000u;  // NaN (sign dropped, as CUDA) or infinity
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int shift = __builtin_clz(mantissa) - 21;  // leading zeros within the 10-bit mantissa, plus one
      bits = sign | static_cast<unsigned int>(113 - shift) << 23 | ((mantissa << shift) & 0x3ffu) << 13;
    }
  } else {
    bits = sign | (exponent + 112) << 23 | mantissa << 13;
  }
  return __uint_as_float(bits);
}

inline __half __float2half_rn(float f) {
  unsigned int x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return __half{0x7fff};  // NaN
  if (magnitude >= 0x477ff000u) return __half{static_cast<unsigned short>(sign | 0x7c00u)};  // >= 65520: inf
  unsigned int result, remainder, halfway;
  if (magnitude >= 0x38800000u) {  // normal half: rebias the exponent, keep 10 mantissa bits
    result = (magnitude - 0x38000000u) >> 13;
    remainder = magnitude & 0x1fffu;
    halfway = 0x1000u;
  } else if (magnitude <= 0x33000000u) {  // at most half the smallest subnormal: rounds to zero
    return __half{static_cast<unsigned short>(sign)};
  } else {  // subnormal half: units of 2^-24
    unsigned int shift = 126 - (magnitude >> 23), mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    result = mantissa >> shift;
    remainder = mantissa & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  if (remainder > halfway || (remainder == halfway && (result & 1))) ++result;  // to nearest, ties to even
  return __half{static_cast<unsigned short>(sign | result)};
}

inline __half __float2half(float f) { return __float2half_rn(f); }

inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(static_cast<unsigned int>(h.__x) << 16); }

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fff};  // NaN
  unsigned int rounded = x + 0x7fffu + ((x >> 16) & 1);  // to nearest, ties to even
  return __nv_bfloat16{static_cast<unsigned short>(rounded >> 16)};
}

inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

// ---- host runtime API ----------------------------------------------------------------------------
inline const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
  }
  return "cudaErrorUnknown";
}

// The detailed message of the latest error with this code (valid until the next one), else its name.
inline const char* cudaGetErrorString(cudaError_t error) {
  using ::seastar_emu::detail::emu;
  std::lock_guard<std::mutex> lock(emu.errors_mutex);
  auto message = emu.messages.find(error);
  return message == emu.messages.end() ? cudaGetErrorName(error) : message->second.c_str();
}

inline cudaError_t cudaPeekAtLastError() {
  using ::seastar_emu::detail::emu;
  std::lock_guard<std::mutex> lock(emu.errors_mutex);
  return emu.last_error;
}

inline cudaError_t cudaGetLastError() {
  using ::seastar_emu::detail::emu;
  std::lock_guard<std::mutex> lock(emu.errors_mutex);
  cudaError_t error = emu.last_error;
  emu.last_error = cudaSuccess;
  return error;
}

inline cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attribute, int value) {
  using namespace ::seastar_emu::detail;
  std::string problem;
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize)
    problem = format("cudaFuncSetAttribute: attribute %d is not emulated (only "
                     "cudaFuncAttributeMaxDynamicSharedMemorySize is)",
                     static_cast<int>(attribute));
  else if (shared_optin_limit() == 0)
    problem = format("SEASTAR_EMU_SHARED_OPTIN_KB=%s is not a number of KiB from 48 to %zu",
                     std::getenv("SEASTAR_EMU_SHARED_OPTIN_KB"), kMaxDynamicShared / 1024);
  else if (value < 0 || static_cast<std::size_t>(value) > shared_optin_limit())
    problem = format("cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %d): the value must be "
                     "from 0 to %zu bytes (%zu KiB, the emulated device's opt-in limit: SEASTAR_EMU_SHARED_OPTIN_KB)",
                     kernel_name(func).c_str(), value, shared_optin_limit(), shared_optin_limit() / 1024);
  if (!problem.empty()) {
    record_error(cudaErrorInvalidValue, problem);
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(emu.errors_mutex);
  emu.max_dynamic_shared[func] = static_cast<std::size_t>(value);
  return cudaSuccess;
}

template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attribute, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  using namespace ::seastar_emu::detail;
  std::size_t limit = shared_optin_limit();
  std::string problem;
  if (attribute != cudaDevAttrMaxSharedMemoryPerBlockOptin)
    problem = format("cudaDeviceGetAttribute: attribute %d is not emulated (only "
                     "cudaDevAttrMaxSharedMemoryPerBlockOptin is)", static_cast<int>(attribute));
  else if (device != 0)
    problem = format("cudaDeviceGetAttribute: device %d does not exist (the emulator has device 0)", device);
  else if (limit == 0)
    problem = format("SEASTAR_EMU_SHARED_OPTIN_KB=%s is not a number of KiB from 48 to %zu",
                     std::getenv("SEASTAR_EMU_SHARED_OPTIN_KB"), kMaxDynamicShared / 1024);
  if (!problem.empty()) {
    record_error(cudaErrorInvalidValue, problem);
    return cudaErrorInvalidValue;
  }
  *value = static_cast<int>(limit);
  return cudaSuccess;
}

// Stream-ordered allocation: launches are synchronous here, so host memory in stream order is exact.
// Poisoned like shared memory, so a kernel that reads scratch before writing it gets NaNs.
inline cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t) {
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  if (*ptr == nullptr) {
    ::seastar_emu::detail::record_error(cudaErrorMemoryAllocation,
                                        ::seastar_emu::detail::format("cudaMallocAsync(%zu bytes): out of memory", bytes));
    return cudaErrorMemoryAllocation;
  }
  std::memset(*ptr, 0xFF, bytes);
  return cudaSuccess;
}

inline cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) {
  std::free(ptr);
  return cudaSuccess;
}

#pragma GCC visibility pop
