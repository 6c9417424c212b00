// Global grad-norm clipping kernels (op optim, optimizer = clip): torch clip_grad_norm_ (fp32 or
// bf16 grads) and Megatron clip_grad_by_total_norm_fp32.
//
// Tensors: g [N] fp32 or bf16 holding T tensors back to back (Segments) -> g_out [N] (same dtype),
// total_norm [1] (same dtype).
// Variants:
//   v1 (this file): per-tensor ||g||^2, then one pass that derives the coefficient in each block
//     and scales.
//   Reductions are deterministic and two-pass with a fixed order (optim_common.cu): pass 1 gives one
//     fp32 partial per chunk of 4096 elements, pass 2 one sum per tensor; scalars derived from
//     several tensors are summed by one thread in tensor order. No float atomics, so repeated
//     runs are bitwise identical.
// Upstream conventions (reference/optim/clip.cpp; spec B6): torch: per-tensor norms, total,
//   total + 1e-6, reciprocal, * max_norm, clamp(max=1), all rounded to the grads' dtype; always
//   multiplied in. Megatron: fp32 norm, norm^2, sqrt and the coefficient in double, applied only
//   when < 1.
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::ChunkTable;
using dev::from_f;
using dev::kChunk;
using dev::kRedThreads;
using dev::rbf;
using dev::to_f;

namespace {

// ---- clipping -------------------------------------------------------------------------------
struct ClipScalars {
  int megatron;
  float maxn_f, eps_f;
  double max_norm;
};

template <typename T>
__global__ void __launch_bounds__(kRedThreads) clip_apply_kernel(const ChunkTable t, const ClipScalars c,
                                                                  const float* seg_sq, const T* g_in, T* g_out,
                                                                  T* total_out) {
  constexpr bool b16 = sizeof(T) == 2;
  auto RD = [](float x) { return b16 ? rbf(x) : x; };  // a result stored in the grads' dtype
  __shared__ float coef_sh;
  __shared__ int apply_sh;
  if (threadIdx.x == 0) {
    float coef, total;
    int apply = 1;
    if (!c.megatron) {
      float tot2 = 0.0f;
      for (int k = 0; k < t.count; ++k) {
        const float nk = RD(__fsqrt_rn(seg_sq[k]));  // torch._foreach_norm: dtype output
        tot2 = __fadd_rn(tot2, __fmul_rn(nk, nk));
      }
      total = RD(__fsqrt_rn(tot2));                  // vector_norm(stack(norms))
      const float den = RD(__fadd_rn(total, c.eps_f));
      const float recip = RD(__fdiv_rn(1.0f, den));  // max_norm / den: reciprocal, then multiply
      const float co = RD(__fmul_rn(recip, c.maxn_f));
      coef = isnan(co) ? co : fminf(co, 1.0f);       // clamp(max=1.0), always applied
    } else {
      float sq = 0.0f;
      for (int k = 0; k < t.count; ++k) sq = __fadd_rn(sq, seg_sq[k]);
      const float gn = __fsqrt_rn(sq);
      const float gn2 = __fmul_rn(gn, gn);
      const double tot = sqrt(static_cast<double>(gn2));
      const double coeff = c.max_norm / (tot + 1e-6);
      apply = coeff < 1.0;
      coef = static_cast<float>(coeff);
      total = static_cast<float>(tot);
    }
    coef_sh = coef;
    apply_sh = apply;
    if (blockIdx.x == 0) total_out[0] = from_f<T>(total);
  }
  __syncthreads();
  const float coef = coef_sh;
  const bool apply = apply_sh != 0;
  const int b = blockIdx.x;
  const int seg = dev::segment_of_chunk(t, b);
  const int64_t start = static_cast<int64_t>(b - t.chunk_begin[seg]) * kChunk;
  const int64_t end = start + kChunk < t.size[seg] ? start + kChunk : t.size[seg];
  const int64_t off = t.offset[seg];
  for (int64_t i = off + start + threadIdx.x; i < off + end; i += blockDim.x) {
    const T e = g_in[i];
    g_out[i] = apply ? from_f<T>(__fmul_rn(to_f(e), coef)) : e;
  }
}

}  // namespace

cudaError_t clip_grad_norm(ClipFlavor f, StoreType type, double max_norm, const Segments& segs, const void* g_in,
                           void* g_out, void* total_norm_out, cudaStream_t stream) {
  if (segs.count <= 0 || segs.count > kMaxSegments) return cudaErrorInvalidValue;
  if (f == ClipFlavor::megatron && type != StoreType::f32) return cudaErrorInvalidValue;
  const ChunkTable tab = make_chunks(segs);
  const int nc = total_chunks(tab);
  const size_t bytes = align256(std::max(nc, 1) * sizeof(float)) + align256(segs.count * sizeof(float));
  Scratch sc;
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&sc.base), bytes, stream); e != cudaSuccess) return e;
  float* part = sc.take<float>(std::max(nc, 1));
  float* sq = sc.take<float>(segs.count);
  cudaError_t e = seg_sumsq(tab, g_in, type, part, sq, stream);
  const ClipScalars cs{f == ClipFlavor::megatron, static_cast<float>(max_norm), static_cast<float>(1e-6), max_norm};
  if (e == cudaSuccess && nc > 0) {
    if (type == StoreType::f32)
      clip_apply_kernel<float><<<nc, kRedThreads, 0, stream>>>(tab, cs, sq, static_cast<const float*>(g_in),
                                                              static_cast<float*>(g_out),
                                                              static_cast<float*>(total_norm_out));
    else
      clip_apply_kernel<uint16_t><<<nc, kRedThreads, 0, stream>>>(tab, cs, sq, static_cast<const uint16_t*>(g_in),
                                                                 static_cast<uint16_t*>(g_out),
                                                                 static_cast<uint16_t*>(total_norm_out));
    e = cudaGetLastError();
  }
  const cudaError_t fr = cudaFreeAsync(sc.base, stream);
  return e != cudaSuccess ? e : fr;
}

}  // namespace assay::kernels::optim
