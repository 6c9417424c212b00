// Adam / AdamW kernels: torch single-tensor, foreach and fused paths, apex / TE (op optim,
// optimizer = adam), and the found_inf flag of the fused path.
//
// Tensors: g [N] (a step's gradient), p, m, v, vmax [N] (inputs *_in, outputs *_out, may alias),
// fp32 or bf16 codes (uint16); p_bf16 [N] bf16 (master mode); found_inf scalar int32.
// Variants:
//   v1 (this file): grid-stride, V elements per thread per iteration with one 16-byte access per
//     tensor (V = 4 fp32 / 8 bf16; V = 1 when a pointer is not 16-byte aligned); scalar tail.
//     All hyper-parameters are cast on the host exactly as the emulated implementation casts
//     them (see adam_scalars below); per-element arithmetic uses explicit-rounding intrinsics and
//     __fmaf_rn at the implementation's FMA sites (kernels/optim/optim_device.h).
// Upstream conventions (reference/optim/adam.cpp; spec B1, B2):
//   torch_single  : torch 2.11 _single_tensor_adam; sqrt(v) * f32(1 / bc2_sqrt) (reciprocal multiply)
//   torch_foreach : torch 2.11 _multi_tensor_adam; sqrt(v) / f32(bc2_sqrt) (true division)
//     (both: lerp_ for m, mul_ then addcmul_ for v, addcdiv_ for p; with bf16 storage every op
//     stores bf16, as each op is its own kernel)
//   torch_fused   : torch 2.11 fused_adam_utils.cuh: float hyper-parameters, bias corrections
//     1 - powf(beta, t) (evaluated here on the host, correctly rounded: the golden's convention),
//     one store per tensor; grad_scale divides, found_inf skips the whole update
//   apex          : apex AdamFunctor / TE adam_update with nvcc's inferred contractions
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::bf2f;
using dev::f2bf;
using dev::from_f;
using dev::ld;
using dev::Pack;
using dev::rbf;
using dev::st;
using dev::to_f;

// ---------------------------------------------------------------------------------------------
// Adam
// ---------------------------------------------------------------------------------------------
namespace {

struct AdamScalars {
  // torch_single / torch_foreach (Python doubles cast to float)
  float decay_mul, w1, omb2, inv_bc2_sqrt, bc2_sqrt, neg_step;
  // torch_fused (float hyper-parameters)
  float lr_wd, step_size;
  // apex / TE
  float omb1, bc1, bc2, lr;
  // shared
  float b1, b2, wd, eps, grad_scale;
  int has_wd, decoupled, maximize, amsgrad, use_grad_scale;
};

AdamScalars adam_scalars(AdamFlavor f, const AdamConfig& c, int64_t t) {
  AdamScalars s{};
  const double td = static_cast<double>(t);
  s.has_wd = c.weight_decay != 0;
  s.decoupled = c.decoupled;
  s.maximize = c.maximize;
  s.amsgrad = c.amsgrad;
  s.eps = static_cast<float>(c.eps);
  s.wd = static_cast<float>(c.weight_decay);
  switch (f) {
    case AdamFlavor::torch_single:
    case AdamFlavor::torch_foreach: {
      // Python: bias_correction1 = 1 - beta1 ** step (C pow), step_size = lr / bc1,
      // bias_correction2_sqrt = bc2 ** 0.5; each passed to a kernel as f32(double).
      const double bc1 = 1.0 - std::pow(c.beta1, td);
      const double bc2 = 1.0 - std::pow(c.beta2, td);
      const double step_size = c.lr / bc1;
      const double bc2_sqrt = std::sqrt(bc2);
      s.decay_mul = static_cast<float>(1.0 - c.lr * c.weight_decay);
      s.w1 = static_cast<float>(1.0 - c.beta1);
      s.b2 = static_cast<float>(c.beta2);
      s.omb2 = static_cast<float>(1.0 - c.beta2);
      s.inv_bc2_sqrt = static_cast<float>(1.0 / bc2_sqrt);  // the CPU-scalar divisor becomes a reciprocal
      s.bc2_sqrt = static_cast<float>(bc2_sqrt);
      s.neg_step = static_cast<float>(-step_size);
      break;
    }
    case AdamFlavor::torch_fused: {
      // Hyper-parameters cast once to float; bc1 = 1 - powf(b1, t), bc2_sqrt = sqrtf(1 - powf(b2, t)).
      // powf here: the correctly rounded float of the double pow of the float beta.
      s.b1 = static_cast<float>(c.beta1);
      s.b2 = static_cast<float>(c.beta2);
      s.lr = static_cast<float>(c.lr);
      const float p1 = static_cast<float>(std::pow(static_cast<double>(s.b1), td));
      const float p2 = static_cast<float>(std::pow(static_cast<double>(s.b2), td));
      const float bc1 = 1.0f - p1;
      const float one_minus_p2 = 1.0f - p2;
      s.bc2_sqrt = std::sqrt(one_minus_p2);  // float sqrtf
      s.lr_wd = s.lr * s.wd;
      s.step_size = s.lr / bc1;
      s.use_grad_scale = c.grad_scale > 0;
      s.grad_scale = static_cast<float>(c.grad_scale);
      break;
    }
    case AdamFlavor::apex: {
      // Host: bias_correction1 = 1 - std::pow(beta1, step) with float beta (double pow), as float.
      s.b1 = static_cast<float>(c.beta1);
      s.b2 = static_cast<float>(c.beta2);
      s.lr = static_cast<float>(c.lr);
      s.bc1 = 1.0f;
      s.bc2 = 1.0f;
      if (c.bias_correction) {
        s.bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.b1), td));
        s.bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(s.b2), td));
      }
      s.omb1 = 1.0f - s.b1;
      s.omb2 = 1.0f - s.b2;
      break;
    }
  }
  return s;
}

// max of the raw v, NaN-propagating (torch.maximum)
__device__ __forceinline__ float nan_max(float a, float b) {
  if (isnan(a) || isnan(b)) return __int_as_float(0x7FC00000);
  return a < b ? b : a;
}

// torch_single (FOREACH = false) / torch_foreach (true). B16: bf16 storage, every op's result
// is stored (rounded) as bf16.
template <bool FOREACH, bool B16>
__device__ __forceinline__ void adam_torch_unfused(const AdamScalars& s, float g, float& p, float& m, float& v,
                                                   float& vx) {
  auto R = [](float x) { return B16 ? rbf(x) : x; };
  float gi = s.maximize ? -g : g;
  if (s.has_wd) {
    if (s.decoupled)
      p = R(__fmul_rn(p, s.decay_mul));  // p.mul_(1 - lr wd)
    else
      gi = R(__fmaf_rn(s.wd, p, gi));  // grad.add(param, alpha=wd)
  }
  m = R(dev::torch_lerp(m, gi, s.w1));                                  // m.lerp_(g, 1 - b1)
  v = R(__fmaf_rn(s.omb2, __fmul_rn(gi, gi), R(__fmul_rn(v, s.b2))));  // v.mul_(b2).addcmul_(g, g, 1 - b2)
  float vv = v;
  if (s.amsgrad) {
    vx = nan_max(vx, v);
    vv = vx;
  }
  float d = R(__fsqrt_rn(vv));
  d = R(FOREACH ? __fdiv_rn(d, s.bc2_sqrt) : __fmul_rn(d, s.inv_bc2_sqrt));
  d = R(__fadd_rn(d, s.eps));
  p = R(__fmaf_rn(s.neg_step, __fdiv_rn(m, d), p));  // p.addcdiv_(m, d, value=-step_size)
}

__device__ __forceinline__ void adam_torch_fused(const AdamScalars& s, float g, float& p, float& m, float& v,
                                                 float& vx) {
  float gi = g;
  if (s.use_grad_scale) gi = __fdiv_rn(gi, s.grad_scale);
  if (s.maximize) gi = -gi;
  if (s.wd != 0.0f) {
    if (s.decoupled)
      p = __fmaf_rn(-s.lr_wd, p, p);
    else
      gi = __fmaf_rn(p, s.wd, gi);  // L2: not reproduced bit-exactly on hardware (spec B1.3); bounded goldens
  }
  m = __fmaf_rn(s.b1, m, __fmaf_rn(-s.b1, gi, gi));
  const float gg = __fmul_rn(gi, gi);
  v = __fmaf_rn(s.b2, v, __fmaf_rn(-s.b2, gg, gg));
  float vv = v;
  if (s.amsgrad) {
    vx = nan_max(vx, v);
    vv = vx;
  }
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), s.bc2_sqrt), s.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(s.step_size, m), denom));
}

__device__ __forceinline__ void adam_apex(const AdamScalars& s, float g, float& p, float& m, float& v) {
  float gi = g;
  if (!s.decoupled) gi = __fmaf_rn(s.wd, p, gi);
  m = __fmaf_rn(s.b1, m, __fmul_rn(s.omb1, gi));
  v = __fmaf_rn(s.b2, v, __fmul_rn(__fmul_rn(s.omb2, gi), gi));
  const float mh = __fdiv_rn(m, s.bc1), vh = __fdiv_rn(v, s.bc2);
  const float denom = __fadd_rn(__fsqrt_rn(vh), s.eps);
  float upd = __fdiv_rn(mh, denom);
  if (s.decoupled) upd = __fmaf_rn(s.wd, p, upd);
  p = __fmaf_rn(-s.lr, upd, p);
}

template <AdamFlavor F, typename TS>
__device__ __forceinline__ void adam_elem(const AdamScalars& s, float g, float& p, float& m, float& v, float& vx) {
  constexpr bool b16 = sizeof(TS) == 2;
  if constexpr (F == AdamFlavor::torch_single) adam_torch_unfused<false, b16>(s, g, p, m, v, vx);
  else if constexpr (F == AdamFlavor::torch_foreach) adam_torch_unfused<true, b16>(s, g, p, m, v, vx);
  else if constexpr (F == AdamFlavor::torch_fused) adam_torch_fused(s, g, p, m, v, vx);
  else adam_apex(s, g, p, m, v);
}

struct AdamArgs {
  AdamScalars s;
  const void* g;
  const void *p_in, *m_in, *v_in, *vmax_in;
  void *p_out, *m_out, *v_out, *vmax_out;
  uint16_t* p_bf16;
  const int* found_inf;
  int64_t n;
};

template <AdamFlavor F, typename TS, typename TG, int V>
__global__ void __launch_bounds__(kThreads) adam_kernel(const AdamArgs a) {
  const bool skip = a.found_inf != nullptr && *a.found_inf != 0;
  const bool ams = a.vmax_in != nullptr;
  const TG* g = static_cast<const TG*>(a.g);
  const TS* p_in = static_cast<const TS*>(a.p_in);
  const TS* m_in = static_cast<const TS*>(a.m_in);
  const TS* v_in = static_cast<const TS*>(a.v_in);
  const TS* x_in = static_cast<const TS*>(a.vmax_in);
  TS* p_out = static_cast<TS*>(a.p_out);
  TS* m_out = static_cast<TS*>(a.m_out);
  TS* v_out = static_cast<TS*>(a.v_out);
  TS* x_out = static_cast<TS*>(a.vmax_out);
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t nv = a.n / V;
  for (int64_t k = tid; k < nv; k += stride) {
    const int64_t i = k * V;
    const Pack<TG, V> gp = ld<TG, V>(g, i);
    Pack<TS, V> pp = ld<TS, V>(p_in, i), mp = ld<TS, V>(m_in, i), vp = ld<TS, V>(v_in, i), xp{};
    if (ams) xp = ld<TS, V>(x_in, i);
    Pack<uint16_t, V> bp;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float p = to_f(pp.x[j]), m = to_f(mp.x[j]), v = to_f(vp.x[j]), vx = ams ? to_f(xp.x[j]) : 0.0f;
      if (!skip) adam_elem<F, TS>(a.s, to_f(gp.x[j]), p, m, v, vx);
      pp.x[j] = from_f<TS>(p);
      mp.x[j] = from_f<TS>(m);
      vp.x[j] = from_f<TS>(v);
      if (ams) xp.x[j] = from_f<TS>(vx);
      if (a.p_bf16) bp.x[j] = f2bf(p);
    }
    st<TS, V>(p_out, i, pp);
    st<TS, V>(m_out, i, mp);
    st<TS, V>(v_out, i, vp);
    if (ams && x_out) st<TS, V>(x_out, i, xp);
    if (a.p_bf16) st<uint16_t, V>(a.p_bf16, i, bp);
  }
  for (int64_t i = nv * V + tid; i < a.n; i += stride) {  // tail (V > 1 only)
    float p = to_f(p_in[i]), m = to_f(m_in[i]), v = to_f(v_in[i]), vx = ams ? to_f(x_in[i]) : 0.0f;
    if (!skip) adam_elem<F, TS>(a.s, to_f(g[i]), p, m, v, vx);
    p_out[i] = from_f<TS>(p);
    m_out[i] = from_f<TS>(m);
    v_out[i] = from_f<TS>(v);
    if (ams && x_out) x_out[i] = from_f<TS>(vx);
    if (a.p_bf16) a.p_bf16[i] = f2bf(p);
  }
}

template <AdamFlavor F, typename TS, typename TG>
cudaError_t launch_adam(const AdamArgs& a, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TS) > 16 / sizeof(TG) ? 16 / sizeof(TG) : 16 / sizeof(TS);  // min over types
  const bool vec = aligned16(a.g) && aligned16(a.p_in) && aligned16(a.m_in) && aligned16(a.v_in) &&
                   aligned16(a.p_out) && aligned16(a.m_out) && aligned16(a.v_out) &&
                   (!a.vmax_in || aligned16(a.vmax_in)) && (!a.vmax_out || aligned16(a.vmax_out)) &&
                   (!a.p_bf16 || aligned16(a.p_bf16));
  return launch_elementwise(&adam_kernel<F, TS, TG, V>, &adam_kernel<F, TS, TG, 1>, V, vec, a, a.n, stream);
}

template <AdamFlavor F>
cudaError_t launch_adam_types(StoreType state, StoreType grad, const AdamArgs& a, cudaStream_t stream) {
  if (state == StoreType::f32 && grad == StoreType::f32) return launch_adam<F, float, float>(a, stream);
  if (state == StoreType::bf16 && grad == StoreType::bf16) return launch_adam<F, uint16_t, uint16_t>(a, stream);
  if (state == StoreType::f32 && grad == StoreType::bf16) return launch_adam<F, float, uint16_t>(a, stream);
  return cudaErrorInvalidValue;
}

__global__ void nonfinite_kernel(const void* x, int is_bf16, int64_t n, int* flag) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (int64_t i = tid; i < n; i += stride) {
    const float e = is_bf16 ? bf2f(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
    bad |= !isfinite(e);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);  // integer flag: order-independent
}

}  // namespace

cudaError_t adam_step(AdamFlavor f, const AdamConfig& c, int64_t t, StoreType state, StoreType grad,
                      const AdamTensors& x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!x.g || !x.p_in || !x.m_in || !x.v_in || !x.p_out || !x.m_out || !x.v_out) return cudaErrorInvalidValue;
  if (c.amsgrad != (x.vmax_in != nullptr)) return cudaErrorInvalidValue;
  if (x.p_bf16_out && state != StoreType::f32) return cudaErrorInvalidValue;
  AdamArgs a{adam_scalars(f, c, t), x.g, x.p_in, x.m_in, x.v_in, x.vmax_in, x.p_out, x.m_out, x.v_out,
             x.vmax_out, x.p_bf16_out, x.found_inf, n};
  switch (f) {
    case AdamFlavor::torch_single: return launch_adam_types<AdamFlavor::torch_single>(state, grad, a, stream);
    case AdamFlavor::torch_foreach: return launch_adam_types<AdamFlavor::torch_foreach>(state, grad, a, stream);
    case AdamFlavor::torch_fused: return launch_adam_types<AdamFlavor::torch_fused>(state, grad, a, stream);
    case AdamFlavor::apex: return launch_adam_types<AdamFlavor::apex>(state, grad, a, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t nonfinite_flag(const void* x, StoreType type, int64_t n, int* found_inf, cudaStream_t stream) {
  if (cudaError_t e = cudaMemsetAsync(found_inf, 0, sizeof(int), stream); e != cudaSuccess) return e;
  if (n <= 0) return cudaSuccess;
  const void* k = reinterpret_cast<const void*>(&nonfinite_kernel);
  nonfinite_kernel<<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(x, type == StoreType::bf16, n, found_inf);
  return cudaGetLastError();
}

}  // namespace assay::kernels::optim
