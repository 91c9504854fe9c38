// Shared by the emulator's test kernels: each .cu file becomes one shared library (g++, emulated)
// or one cubin (nvcc); its extern "C" entry points launch kernels and return the cudaError_t.
#pragma once
#include "seastar_cuda.h"

#define EXPORT extern "C"

EXPORT const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

// The launch's error, read once (it also clears it).
static int launch_status() { return static_cast<int>(cudaGetLastError()); }

__device__ __forceinline__ unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ __forceinline__ unsigned linear_block() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }
