// Block-scaled GEMM (the consumer of the quantized operands; spec A6) and nothing else.
//
// Tensors: a [M, K] element codes (fp4e2m1 / fp8e4m3 / fp8e5m2, one per byte), b [N, K] codes (TN,
// as cuBLASLt block-scaled GEMMs), sa [M, ceil(K/V)] and sb [N, ceil(K/V)] scales (fp8e4m3 codes,
// ue8m0 codes, or fp32 values), for DeepSeek weights sb [ceil(N/128), ceil(K/128)] (128x128
// blocks); alpha: a value or [1] f32 on the device (NVFP4: both global decode scales folded in);
// d [M, N] fp32 or bf16 (RNE from the fp32 result).
//
// Variants:
//   quant_gemm_v1  one thread per output element, sequential k, fp32 FMA accumulation of
//                  fl(a * sa) * fl(b * sb) (a readable baseline of what a tensor-core kernel
//                  computes: fp32 accumulation in some order, within gamma_K of the exact sum).
// Conventions: TE / cuBLASLt NVFP4 (V = 16, E4M3 scales, alpha = global scales), MX (V = 32, UE8M0),
// DeepGEMM FP8 (1x128 activation scales, 128x128 weight scales, fp32 scale_inv values).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/quant/quant_kernels.h"
#include "kernels/quant/quant_math.h"

namespace assay::kernels::quant {
namespace {

__device__ __forceinline__ float gemm_elem(uint8_t c, int t) {
  return t == 0 ? e2m1_decode(c) : (t == 1 ? e4m3_decode(c) : e5m2_decode(c));
}
__device__ __forceinline__ float gemm_scale(const void* s, int64_t i, int t) {
  if (t == 2) return static_cast<const float*>(s)[i];
  const uint8_t c = static_cast<const uint8_t*>(s)[i];
  if (t == 0) return e4m3_decode(c);
  return c == 0xFF ? u2f(0x7FC00000u) : pow2f(static_cast<int>(c) - 127);  // ue8m0
}

__global__ void gemm_kernel(GemmArgs g) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= g.M * g.N) return;
  const int64_t m = i / g.N, n = i % g.N;
  const int64_t kb = (g.K + g.V - 1) / g.V;
  float acc = 0.0f;
  for (int64_t k = 0; k < g.K; ++k) {
    const int64_t j = k / g.V;
    const float sa = gemm_scale(g.sa, m * kb + j, g.scale_type);
    const float sb = gemm_scale(g.sb, (g.sb_block128 ? (n / 128) : n) * kb + j, g.scale_type);
    const float pa = qm_mul(gemm_elem(g.a[m * g.K + k], g.elem_type), sa);
    const float pb = qm_mul(gemm_elem(g.b[n * g.K + k], g.elem_type), sb);
    acc = __fmaf_rn(pa, pb, acc);
  }
  const float alpha = g.alpha_dev ? *g.alpha_dev : g.alpha;
  const float d = qm_mul(alpha, acc);
  if (g.d_bf16) {
    static_cast<uint16_t*>(g.d)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(d));
  } else {
    static_cast<float*>(g.d)[i] = d;
  }
}

}  // namespace

cudaError_t quant_gemm_v1(const GemmArgs& g, cudaStream_t s) {
  if (g.M < 1 || g.N < 1 || g.K < 1 || g.V < 1 || !g.a || !g.b || !g.sa || !g.sb || !g.d || g.elem_type < 0 ||
      g.elem_type > 2 || g.scale_type < 0 || g.scale_type > 2)
    return cudaErrorInvalidValue;
  const int th = 128;
  gemm_kernel<<<static_cast<unsigned>((g.M * g.N + th - 1) / th), th, 0, s>>>(g);
  return cudaGetLastError();
}

}  // namespace assay::kernels::quant
