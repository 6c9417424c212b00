// scaled_add on the GPU: out = alpha * x + beta * y, the smoke kernel of the golden path.
//
// Tensors: x, y [B, T, D] bf16 (storage codes), out [B, T, D] bf16.
// Variants:
//   v1: one thread per element, fp32 math with one FMA (alpha*x + (beta*y)), RNE to bf16.
#include <cuda_bf16.h>

#include "kernels/scaled_add/scaled_add.h"

namespace assay::kernels {

__global__ void scaled_add_v1_kernel(const __nv_bfloat16* x, const __nv_bfloat16* y, __nv_bfloat16* out, float alpha,
                                     float beta, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(fmaf(alpha, __bfloat162float(x[i]), beta * __bfloat162float(y[i])));
}

cudaError_t scaled_add_v1(const void* x, const void* y, void* out, float alpha, float beta, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  scaled_add_v1_kernel<<<blocks, threads, 0, s>>>(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(y),
                                                  static_cast<__nv_bfloat16*>(out), alpha, beta, n);
  return cudaGetLastError();
}

}  // namespace assay::kernels
