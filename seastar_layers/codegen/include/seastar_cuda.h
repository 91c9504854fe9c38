// seastar_cuda.h: the one header generated CUDA sources include.
//
// Under nvcc it brings in the CUDA runtime and half-precision headers. Compiled as host C++ (g++),
// it brings in seastar_cuda_emu.h, which runs the same kernels on the CPU under an emulation of
// CUDA's execution model (see docs/cuda-emulation.md). The two macros below are the only launch and
// dynamic-shared-memory spellings generated code uses, so both compilers read one source.
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

#else

#include "seastar_cuda_emu.h"

#endif
