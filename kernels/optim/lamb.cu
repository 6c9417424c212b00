// LAMB kernels (op optim, optimizer = lamb): apex FusedLAMB, two phases with per-tensor norms.
//
// Tensors: g, p, m, v [N] fp32 holding T tensors back to back (Segments); outputs p, m, v [N]
// (may alias the inputs); scratch u [N], per-chunk and per-tensor partial sums.
// Variants:
//   v1 (this file): (1) ||g||^2 and ||p||^2 per tensor; (2) phase 1 per element: clip, moments,
//     update u (kept in scratch) and per-chunk ||u||^2; (3) ||u|| per tensor; (4) phase 2: trust
//     ratio, p -= ratio u.
//   Reductions are deterministic and two-pass with a fixed order (optim_common.cu): pass 1 gives one
//     fp32 partial per chunk of 4096 elements, pass 2 one sum per tensor; scalars derived from
//     several tensors are summed by one thread in tensor order. No float atomics, so repeated
//     runs are bitwise identical.
// Upstream conventions (reference/optim/lamb.cpp; spec B3): apex multi_tensor_lamb.cu stage 1 /
//   stage 2 with nvcc's inferred contractions (fma(m, b1, b3 sg), fma(v, b2, ((1-b2) sg) sg),
//   fma(decay, p, .), fma(-ratio, u, p)).
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::ChunkTable;
using dev::kChunk;
using dev::kRedThreads;

namespace {

// ---- LAMB -----------------------------------------------------------------------------------
struct LambScalars {
  float lr, b1, b2, b3, omb2, eps, decay, maxn, bc1, bc2;
  int adam_w_mode, use_nvlamb;
};

__global__ void __launch_bounds__(kRedThreads) lamb_phase1_kernel(const ChunkTable t, const LambScalars s,
                                                                   const float* seg_gsq, const float* g,
                                                                   const float* p_in, const float* m_in,
                                                                   const float* v_in, float* m_out, float* v_out,
                                                                   float* u, float* partial_u) {
  __shared__ float clip_sh;
  if (threadIdx.x == 0) {
    float gsq = 0.0f;
    for (int k = 0; k < t.count; ++k) gsq = __fadd_rn(gsq, seg_gsq[k]);
    const float G = __fsqrt_rn(gsq);
    clip_sh = G > s.maxn ? __fdiv_rn(G, s.maxn) : 1.0f;  // apex: no epsilon
  }
  __syncthreads();
  const float clip = clip_sh;
  const int b = blockIdx.x;
  const int seg = dev::segment_of_chunk(t, b);
  const int64_t start = static_cast<int64_t>(b - t.chunk_begin[seg]) * kChunk;
  const int64_t end = start + kChunk < t.size[seg] ? start + kChunk : t.size[seg];
  const int64_t off = t.offset[seg];
  float acc = 0.0f;
  for (int64_t i = off + start + threadIdx.x; i < off + end; i += blockDim.x) {
    const float p = s.decay == 0.0f ? 0.0f : p_in[i];
    float sg = __fdiv_rn(g[i], clip);
    if (!s.adam_w_mode) sg = __fmaf_rn(s.decay, p, sg);
    const float m = __fmaf_rn(m_in[i], s.b1, __fmul_rn(s.b3, sg));
    const float v = __fmaf_rn(v_in[i], s.b2, __fmul_rn(__fmul_rn(s.omb2, sg), sg));
    const float mh = __fdiv_rn(m, s.bc1), vh = __fdiv_rn(v, s.bc2);
    const float denom = __fadd_rn(__fsqrt_rn(vh), s.eps);
    float upd = __fdiv_rn(mh, denom);
    if (s.adam_w_mode) upd = __fmaf_rn(s.decay, p, upd);
    u[i] = upd;
    m_out[i] = m;
    v_out[i] = v;
    acc = __fmaf_rn(upd, upd, acc);
  }
  const float r = dev::block_sum(acc);
  if (threadIdx.x == 0) partial_u[b] = r;
}

__global__ void __launch_bounds__(kRedThreads) lamb_phase2_kernel(const ChunkTable t, const LambScalars s,
                                                                   const float* seg_psq, const float* seg_usq,
                                                                   const float* u, const float* p_in, float* p_out) {
  const int b = blockIdx.x;
  const int seg = dev::segment_of_chunk(t, b);
  __shared__ float ratio_sh;
  if (threadIdx.x == 0) {
    const float pn = __fsqrt_rn(seg_psq[seg]), un = __fsqrt_rn(seg_usq[seg]);
    float ratio = s.lr;
    if (s.use_nvlamb || s.decay != 0.0f) ratio = (un != 0.0f && pn != 0.0f) ? __fmul_rn(s.lr, __fdiv_rn(pn, un)) : s.lr;
    ratio_sh = ratio;
  }
  __syncthreads();
  const float ratio = ratio_sh;
  const int64_t start = static_cast<int64_t>(b - t.chunk_begin[seg]) * kChunk;
  const int64_t end = start + kChunk < t.size[seg] ? start + kChunk : t.size[seg];
  const int64_t off = t.offset[seg];
  for (int64_t i = off + start + threadIdx.x; i < off + end; i += blockDim.x) p_out[i] = __fmaf_rn(-ratio, u[i], p_in[i]);
}

}  // namespace

cudaError_t lamb_step(const LambConfig& c, int64_t t, const Segments& segs, const float* g, const float* p_in,
                      const float* m_in, const float* v_in, float* p_out, float* m_out, float* v_out,
                      cudaStream_t stream) {
  if (segs.count <= 0 || segs.count > kMaxSegments) return cudaErrorInvalidValue;
  const ChunkTable tab = make_chunks(segs);
  const int nc = total_chunks(tab);
  if (nc == 0) return cudaSuccess;
  int64_t extent = 0;
  for (int k = 0; k < segs.count; ++k) extent = std::max(extent, segs.offset[k] + segs.size[k]);
  LambScalars s{};
  s.lr = static_cast<float>(c.lr);
  s.b1 = static_cast<float>(c.beta1);
  s.b2 = static_cast<float>(c.beta2);
  s.eps = static_cast<float>(c.eps);
  s.decay = static_cast<float>(c.weight_decay);
  s.maxn = static_cast<float>(c.max_grad_norm);
  s.bc1 = 1.0f;
  s.bc2 = 1.0f;
  if (c.bias_correction) {  // host: 1 - std::pow(float beta, step), as float
    s.bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.b1), static_cast<double>(t)));
    s.bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.b2), static_cast<double>(t)));
  }
  s.b3 = c.grad_averaging ? 1.0f - s.b1 : 1.0f;
  s.omb2 = 1.0f - s.b2;
  s.adam_w_mode = c.adam_w_mode;
  s.use_nvlamb = c.use_nvlamb;

  const size_t bytes = 3 * align256(nc * sizeof(float)) + 3 * align256(segs.count * sizeof(float)) +
                       align256(static_cast<size_t>(extent) * sizeof(float));
  Scratch sc;
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&sc.base), bytes, stream); e != cudaSuccess) return e;
  float* part_g = sc.take<float>(nc);
  float* part_p = sc.take<float>(nc);
  float* part_u = sc.take<float>(nc);
  float* gsq = sc.take<float>(segs.count);
  float* psq = sc.take<float>(segs.count);
  float* usq = sc.take<float>(segs.count);
  float* u = sc.take<float>(static_cast<size_t>(extent));
  cudaError_t e = seg_sumsq(tab, g, StoreType::f32, part_g, gsq, stream);
  if (e == cudaSuccess) e = seg_sumsq(tab, p_in, StoreType::f32, part_p, psq, stream);
  if (e == cudaSuccess) {
    lamb_phase1_kernel<<<nc, kRedThreads, 0, stream>>>(tab, s, gsq, g, p_in, m_in, v_in, m_out, v_out, u, part_u);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) {
    e = seg_finalize(tab, part_u, usq, stream);
  }
  if (e == cudaSuccess) {
    lamb_phase2_kernel<<<nc, kRedThreads, 0, stream>>>(tab, s, psq, usq, u, p_in, p_out);
    e = cudaGetLastError();
  }
  const cudaError_t f = cudaFreeAsync(sc.base, stream);
  return e != cudaSuccess ? e : f;
}

}  // namespace assay::kernels::optim
