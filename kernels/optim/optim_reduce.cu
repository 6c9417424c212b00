// Optimizer kernels with reductions: LAMB (apex FusedLAMB, two phases with per-tensor norms),
// global grad-norm clipping (torch clip_grad_norm_, Megatron clip_grad_by_total_norm_fp32) and
// Adafactor (torch >= 2.5, fresh state).
//
// Tensors: LAMB g, p, m, v [N] fp32 holding T tensors back to back (Segments); clipping g [N]
// fp32 or bf16 (T tensors), total_norm [1]; Adafactor g, p [M, K] fp32.
// Variants:
//   v1 (this file). Reductions are deterministic and two-pass with a fixed order: pass 1 gives one
//     fp32 partial per chunk of 4096 elements (each thread a fixed strided sequence, then a fixed
//     shuffle tree), pass 2 one sum per tensor (fixed strided sequence + tree); scalars derived
//     from several tensors (global norm, clip coefficient) are summed by one thread in tensor
//     order. No float atomics, so repeated runs are bitwise identical.
//     LAMB: (1) ||g||^2 and ||p||^2 per tensor; (2) phase 1 per element: clip, moments, update u
//     (kept in scratch) and per-chunk ||u||^2; (3) ||u|| per tensor; (4) phase 2: trust ratio,
//     p -= ratio u. Clipping: per-tensor ||g||^2, then one pass that derives the coefficient in
//     each block and scales. Adafactor: one block (small parameters; readable baseline).
// Upstream conventions (reference/optim/others.cpp, scaling.cpp; spec B3, B5, B6):
//   LAMB: apex multi_tensor_lamb.cu stage 1 / stage 2 with nvcc's inferred contractions
//     (fma(m, b1, b3 sg), fma(v, b2, ((1-b2) sg) sg), fma(decay, p, .), fma(-ratio, u, p)).
//   torch clip: per-tensor norms, total, total + 1e-6, reciprocal, * max_norm, clamp(max=1), all
//     rounded to the grads' dtype; always multiplied in. Megatron: fp32 norm, norm^2, sqrt and the
//     coefficient in double, applied only when < 1.
//   Adafactor: torch/optim/_adafactor.py _single_tensor_adafactor at t = 1 from a zero state.
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

size_t align256(size_t b) { return (b + 255) & ~static_cast<size_t>(255); }

// Scratch carved from one stream-ordered allocation.
struct Scratch {
  char* base = nullptr;
  size_t used = 0;
  template <typename T>
  T* take(size_t count) {
    T* p = reinterpret_cast<T*>(base + used);
    used += align256(count * sizeof(T));
    return p;
  }
};

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

// ---- Adafactor ------------------------------------------------------------------------------
struct AfScalars {
  int64_t rows, cols;
  int factored, has_wd;
  float w, eps1, floor2, dm;
  double rho, eps2, d;
};

__global__ void __launch_bounds__(kRedThreads) adafactor_kernel(const AfScalars a, const float* g, const float* p_in,
                                                                 float* p_out, float* row_var, float* col_var) {
  const int64_t n = a.rows * a.cols;
  // alpha = max(eps2, ||p|| / sqrt(numel)) * rho, with the param norm taken before the decay.
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = __fmaf_rn(p_in[i], p_in[i], acc);
  const double pnorm = static_cast<double>(__fsqrt_rn(dev::block_sum(acc)));
  const double alpha = fmax(a.eps2, pnorm / sqrt(static_cast<double>(n))) * a.rho;
  float rmean = 0.0f;
  if (a.factored) {
    for (int64_t r = threadIdx.x; r < a.rows; r += blockDim.x) {
      float s = 0.0f;
      for (int64_t c = 0; c < a.cols; ++c) s = __fmaf_rn(g[r * a.cols + c], g[r * a.cols + c], s);
      const float nr = __fsqrt_rn(s);  // torch.norm over the row, then .square_().div_(cols)
      row_var[r] = dev::torch_lerp(0.0f, __fdiv_rn(__fmul_rn(nr, nr), static_cast<float>(a.cols)), a.w);
    }
    for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
      float s = 0.0f;
      for (int64_t r = 0; r < a.rows; ++r) s = __fmaf_rn(g[r * a.cols + c], g[r * a.cols + c], s);
      const float nc = __fsqrt_rn(s);
      col_var[c] = dev::torch_lerp(0.0f, __fdiv_rn(__fmul_rn(nc, nc), static_cast<float>(a.rows)), a.w);
    }
    __syncthreads();  // row_var / col_var (global) visible to the block
    float racc = 0.0f;
    for (int64_t r = threadIdx.x; r < a.rows; r += blockDim.x) racc = __fadd_rn(racc, row_var[r]);
    rmean = __fdiv_rn(dev::block_sum(racc), static_cast<float>(a.rows));
    if (rmean < a.eps1) rmean = a.eps1;  // clamp(min=eps1)
  }
  auto U = [&](int64_t i) {
    const float gi = g[i];
    float var;
    if (a.factored)
      var = __fdiv_rn(__fmul_rn(row_var[i / a.cols], col_var[i % a.cols]), rmean);
    else
      var = dev::torch_lerp(0.0f, __fmul_rn(gi, gi), a.w);
    const float vc = var < a.floor2 ? a.floor2 : var;
    return __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(vc)), gi);
  };
  float uacc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float x = U(i);
    uacc = __fmaf_rn(x, x, uacc);
  }
  const double un = static_cast<double>(__fsqrt_rn(dev::block_sum(uacc)));
  const double denom = fmax(1.0, un / (sqrt(static_cast<double>(n)) * a.d));
  const float af = static_cast<float>(-alpha / denom);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float pd = a.has_wd ? __fmul_rn(p_in[i], a.dm) : p_in[i];
    p_out[i] = __fmaf_rn(af, U(i), pd);
  }
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

cudaError_t adafactor_step_fresh(const AdafactorConfig& c, int64_t rows, int64_t cols, bool factored, const float* g,
                                 const float* p_in, float* p_out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!factored && rows != 1) return cudaErrorInvalidValue;
  const double t = 1.0;  // a fresh state: this is step 1
  AfScalars a{};
  a.rows = rows;
  a.cols = cols;
  a.factored = factored;
  a.has_wd = c.weight_decay != 0;
  a.w = static_cast<float>(std::pow(t, c.beta2_decay));  // one_minus_beta2_t
  a.eps1 = static_cast<float>(c.eps1);
  a.floor2 = static_cast<float>(c.eps1 * c.eps1);
  a.dm = static_cast<float>(1.0 - c.lr * c.weight_decay);
  a.rho = std::min(c.lr, 1.0 / std::sqrt(t));
  a.eps2 = c.eps2;
  a.d = c.d;
  float* scratch = nullptr;
  const size_t bytes = align256(static_cast<size_t>(rows) * sizeof(float)) + align256(static_cast<size_t>(cols) * sizeof(float));
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, stream); e != cudaSuccess) return e;
  float* row_var = scratch;
  float* col_var = reinterpret_cast<float*>(reinterpret_cast<char*>(scratch) + align256(static_cast<size_t>(rows) * sizeof(float)));
  adafactor_kernel<<<1, kRedThreads, 0, stream>>>(a, g, p_in, p_out, row_var, col_var);
  const cudaError_t e = cudaGetLastError();
  const cudaError_t f = cudaFreeAsync(scratch, stream);
  return e != cudaSuccess ? e : f;
}

}  // namespace assay::kernels::optim
