// Conversions between float and the 16-bit types, run as kernels over whole arrays.
#include "common.cuh"

__global__ void to_float(const unsigned short* bits, float* out, int n, int bfloat) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += static_cast<int>(gridDim.x * blockDim.x))
    out[i] = bfloat ? __bfloat162float(__ushort_as_bfloat16(bits[i])) : __half2float(__ushort_as_half(bits[i]));
}

__global__ void from_float(const float* x, unsigned short* out, int n, int bfloat) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += static_cast<int>(gridDim.x * blockDim.x))
    out[i] = bfloat ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
}

EXPORT int run_to_float(const unsigned short* bits, float* out, int n, int bfloat) {
  SEASTAR_LAUNCH(to_float, 64, 256, 0, 0)(bits, out, n, bfloat);
  return launch_status();
}

EXPORT int run_from_float(const float* x, unsigned short* out, int n, int bfloat) {
  SEASTAR_LAUNCH(from_float, 64, 256, 0, 0)(x, out, n, bfloat);
  return launch_status();
}
