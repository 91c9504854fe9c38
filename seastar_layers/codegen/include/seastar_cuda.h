// seastar_cuda.h: the one header generated CUDA sources include.
//
// Under nvcc it brings in the CUDA runtime and half-precision headers. Compiled as host C++ (g++),
// it brings in seastar_cuda_emu.h, which runs the same kernels on the CPU under an emulation of
// CUDA's execution model (see docs/cuda-emulation.md). The macros below are the only launch, dynamic-
// shared-memory and global-access spellings generated code uses, so both compilers read one source.
#pragma once

#if defined(__CUDACC__)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// SEASTAR_LAUNCH(kernel, grid, block, shmem_bytes, stream)(args...);
#define SEASTAR_LAUNCH(kernel, grid, block, shmem_bytes, stream) kernel<<<grid, block, shmem_bytes, stream>>>

// SEASTAR_DYNAMIC_SHARED(T, name); inside a kernel: `name` points to the block's dynamic shared memory.
// One untyped extern array for every kernel of the translation unit: nvcc rejects two kernels that
// declare the same extern __shared__ name with different element types.
#define SEASTAR_DYNAMIC_SHARED(T, name)                                      \
  extern __shared__ __align__(16) unsigned char seastar_dynamic_shared_[]; \
  T* const name = reinterpret_cast<T*>(seastar_dynamic_shared_)

// SEASTAR_GLOBAL(x): an element of global memory (a buffer or graph array) the kernel reads or
// writes; the emulator counts the 32-byte sectors such accesses touch (SEASTAR_EMU_TRAFFIC).
#define SEASTAR_GLOBAL(x) (x)

#else

#include "seastar_cuda_emu.h"

#endif

// The most dynamic shared memory a block may opt into on the current device (227 KiB on sm_90, 163
// on sm_80, 99 on sm_86/sm_89; the emulator's SEASTAR_EMU_SHARED_OPTIN_KB), asked at each launch of a
// kernel whose rows may not fit (an attribute lookup, not cudaGetDeviceProperties' query); 48 KiB,
// which every device allows, where the runtime cannot say.
inline int seastar_shared_optin() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess || bytes <= 0) {
    (void)cudaGetLastError();
    return 48 * 1024;
  }
  return bytes;
}
