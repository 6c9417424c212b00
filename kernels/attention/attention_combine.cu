// Split-KV combine (see attention_combine.h for tensors and math).
//
// Tensors: o_partial fp32 [num_splits, total_q, Hq, Dv], lse_partial fp32 [num_splits, total_q, Hq]
//          -> O bf16|fp16 [.., Hq, Dv] (layout of q), LSE fp32 dense [B, Hq, Sq] | varlen [Hq, total_q].
// Variants: v1 = one warp per (query row, head): the lanes reduce the split LSEs (max, then sum of
// exp in a fixed order), then each lane sums w_s O_s over the splits for its Dv columns.
// Convention: FlashAttention attention_combine_ref (hopper/test_flash_attn.py), spec 9.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention/attention_combine.h"

namespace assay::kernels::attention {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ float maybe_fp16(float x, bool round) {
  return round ? __half2float(__float2half_rn(x)) : x;
}

__global__ void __launch_bounds__(kWarps * 32) combine_kernel(const AttnParams p, bool fp16_partials) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);  // r * Hq + h
  const int64_t rows = static_cast<int64_t>(p.total_q) * p.Hq;
  if (row >= rows) return;
  const int64_t r = row / p.Hq;
  const int h = static_cast<int>(row % p.Hq);
  const int ns = p.num_splits;
  const int64_t split_stride = rows;  // lse_partial elements per split

  // 1. max over splits (lanes stride over splits, then a butterfly; order-independent).
  float m = -INFINITY;
  for (int s = lane; s < ns; s += 32) m = fmaxf(m, maybe_fp16(p.lse_partial[s * split_stride + row], fp16_partials));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));

  // 2. lse = m + log(sum_s exp(lse_s - m)); every lane sums all splits in the same order, so the
  //    result is identical across lanes and deterministic.
  float lse = -INFINITY;
  if (m != -INFINITY) {
    float sum = 0.f;
    for (int s = 0; s < ns; ++s) sum += expf(maybe_fp16(p.lse_partial[s * split_stride + row], fp16_partials) - m);
    lse = m + logf(sum);
  }

  // 3. O = sum_s w_s O_s, w_s = exp(lse_s - lse) with non-finite weights -> 0.
  const int Dv = p.Dv;
  for (int d = lane; d < Dv; d += 32) {
    float acc = 0.f;
    if (lse != -INFINITY) {
      for (int s = 0; s < ns; ++s) {
        float w = expf(maybe_fp16(p.lse_partial[s * split_stride + row], fp16_partials) - lse);
        if (!isfinite(w)) w = 0.f;
        if (w != 0.f) acc += w * maybe_fp16(p.o_partial[(s * split_stride + row) * Dv + d], fp16_partials);
      }
    }
    uint16_t code;
    if (p.fp16) {
      const __half x = __float2half_rn(acc);
      code = *reinterpret_cast<const uint16_t*>(&x);
    } else {
      const __nv_bfloat16 x = __float2bfloat16_rn(acc);
      code = *reinterpret_cast<const uint16_t*>(&x);
    }
    static_cast<uint16_t*>(p.o)[row * Dv + d] = code;
  }

  if (lane == 0) {
    int64_t li;
    if (p.cu_seqlens_q) {
      li = static_cast<int64_t>(h) * p.total_q + r;  // varlen [Hq, total_q]
    } else {
      const int64_t b = r / p.Sq, i = r % p.Sq;  // dense [B, Hq, Sq]
      li = (b * p.Hq + h) * p.Sq + i;
    }
    p.lse[li] = lse;
  }
}

}  // namespace

cudaError_t launch_attention_combine(const AttnParams& p, cudaStream_t s, bool mutant_fp16_partials) {
  const int64_t rows = static_cast<int64_t>(p.total_q) * p.Hq;
  if (rows <= 0) return cudaSuccess;
  if (p.num_splits < 1 || !p.o_partial || !p.lse_partial) return cudaErrorInvalidValue;
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  combine_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, s>>>(p, mutant_fp16_partials);
  return cudaGetLastError();
}

namespace {
__global__ void export_lse_kernel(AttnParams p, float* dst) {
  const int64_t per = static_cast<int64_t>(p.total_q) * p.Hq, n = per * p.num_splits;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t sp = t / per, rem = t % per, r = rem / p.Hq;
    const int h = static_cast<int>(rem % p.Hq);
    int64_t li;
    if (p.cu_seqlens_q) {
      li = static_cast<int64_t>(h) * p.total_q + r;
    } else {
      const int64_t b = r / p.Sq, i = r % p.Sq;
      li = (b * p.Hq + h) * p.Sq + i;
    }
    dst[sp * per + li] = p.lse_partial[t];
  }
}
}  // namespace

cudaError_t launch_export_lse_partials(const AttnParams& p, float* dst, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(p.total_q) * p.Hq * p.num_splits;
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  export_lse_kernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, s>>>(p, dst);
  return cudaGetLastError();
}

}  // namespace assay::kernels::attention
