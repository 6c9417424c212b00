// Elementwise optimizer kernels: Adam / AdamW (torch single-tensor, foreach, fused; apex / TE),
// SGD, Lion, bf16 master copies, the loss scaler, and the shared reduction helpers.
//
// Tensors: g [N] (a step's gradient), p, m, v, vmax [N] (inputs *_in, outputs *_out, may alias),
// fp32 or bf16 codes (uint16); p_bf16 [N] bf16 (master mode); found_inf scalar int32.
// Variants:
//   v1 (this file): grid-stride, V elements per thread per iteration with one 16-byte access per
//     tensor (V = 4 fp32 / 8 bf16; V = 1 when a pointer is not 16-byte aligned); scalar tail.
//     All hyper-parameters are cast on the host exactly as the emulated implementation casts
//     them (see adam_scalars below); per-element arithmetic uses explicit-rounding intrinsics and
//     __fmaf_rn at the implementation's FMA sites (kernels/optim/optim_device.h).
// Upstream conventions (reference/optim/adam.cpp, others.cpp, scaling.cpp; spec B1-B6):
//   torch_single  : torch 2.11 _single_tensor_adam; sqrt(v) * f32(1 / bc2_sqrt) (reciprocal multiply)
//   torch_foreach : torch 2.11 _multi_tensor_adam; sqrt(v) / f32(bc2_sqrt) (true division)
//     (both: lerp_ for m, mul_ then addcmul_ for v, addcdiv_ for p; with bf16 storage every op
//     stores bf16, as each op is its own kernel)
//   torch_fused   : torch 2.11 fused_adam_utils.cuh: float hyper-parameters, bias corrections
//     1 - powf(beta, t) (evaluated here on the host, correctly rounded: the golden's convention),
//     one store per tensor; grad_scale divides, found_inf skips the whole update
//   apex          : apex AdamFunctor / TE adam_update with nvcc's inferred contractions
//   SGD           : torch 2.11 _single_tensor_sgd (add(x, alpha) -> fma(alpha, x, self))
//   Lion          : lucidrains update_fn (mul_, then add_(alpha) as fma)
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

constexpr int kThreads = 256;

int grid_for(const void* kernel, int threads, int64_t items) {
  int device = 0, sms = 1, per_sm = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm < 1)
    per_sm = 1;
  const int64_t need = std::max<int64_t>(1, (items + threads - 1) / threads);
  return static_cast<int>(std::min<int64_t>(need, static_cast<int64_t>(sms) * per_sm));
}

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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <AdamFlavor F, typename TS, typename TG>
cudaError_t launch_adam(const AdamArgs& a, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TS) > 16 / sizeof(TG) ? 16 / sizeof(TG) : 16 / sizeof(TS);  // min over types
  const bool vec = aligned16(a.g) && aligned16(a.p_in) && aligned16(a.m_in) && aligned16(a.v_in) &&
                   aligned16(a.p_out) && aligned16(a.m_out) && aligned16(a.v_out) &&
                   (!a.vmax_in || aligned16(a.vmax_in)) && (!a.vmax_out || aligned16(a.vmax_out)) &&
                   (!a.p_bf16 || aligned16(a.p_bf16));
  if (vec) {
    const void* k = reinterpret_cast<const void*>(&adam_kernel<F, TS, TG, V>);
    adam_kernel<F, TS, TG, V><<<grid_for(k, kThreads, a.n / V + 1), kThreads, 0, stream>>>(a);
  } else {
    const void* k = reinterpret_cast<const void*>(&adam_kernel<F, TS, TG, 1>);
    adam_kernel<F, TS, TG, 1><<<grid_for(k, kThreads, a.n), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
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

// ---------------------------------------------------------------------------------------------
// SGD
// ---------------------------------------------------------------------------------------------
namespace {
struct SgdArgs {
  float wd, mu, omt, nlr;
  int has_wd, has_momentum, first, nesterov, maximize;
  const float *g, *p_in, *buf_in;
  float *p_out, *buf_out;
  int64_t n;
};
__device__ __forceinline__ void sgd_elem(const SgdArgs& a, float g, float& p, float& b) {
  float gi = a.maximize ? -g : g;
  if (a.has_wd) gi = __fmaf_rn(a.wd, p, gi);  // g.add(p, alpha=wd)
  if (a.has_momentum) {
    b = a.first ? gi : __fmaf_rn(a.omt, gi, __fmul_rn(b, a.mu));  // buf.mul_(mu).add_(g, alpha=1-tau)
    gi = a.nesterov ? __fmaf_rn(a.mu, b, gi) : b;                  // g.add(buf, alpha=mu) / buf
  }
  p = __fmaf_rn(a.nlr, gi, p);  // p.add_(g, alpha=-lr)
}
template <int V>
__global__ void __launch_bounds__(kThreads) sgd_kernel(const SgdArgs a) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool rb = a.has_momentum && !a.first;
  const int64_t nv = a.n / V;
  for (int64_t k = tid; k < nv; k += stride) {
    const int64_t i = k * V;
    const Pack<float, V> gp = ld<float, V>(a.g, i);
    Pack<float, V> pp = ld<float, V>(a.p_in, i), bp{};
    if (rb) bp = ld<float, V>(a.buf_in, i);
#pragma unroll
    for (int j = 0; j < V; ++j) sgd_elem(a, gp.x[j], pp.x[j], bp.x[j]);
    st<float, V>(a.p_out, i, pp);
    if (a.has_momentum) st<float, V>(a.buf_out, i, bp);
  }
  for (int64_t i = nv * V + tid; i < a.n; i += stride) {
    float p = a.p_in[i], b = rb ? a.buf_in[i] : 0.0f;
    sgd_elem(a, a.g[i], p, b);
    a.p_out[i] = p;
    if (a.has_momentum) a.buf_out[i] = b;
  }
}
}  // namespace

cudaError_t sgd_step(const SgdConfig& c, bool first_step, const float* g, const float* p_in, const float* buf_in,
                     float* p_out, float* buf_out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SgdArgs a{static_cast<float>(c.weight_decay), static_cast<float>(c.momentum), static_cast<float>(1.0 - c.dampening),
            static_cast<float>(-c.lr), c.weight_decay != 0, c.momentum != 0, first_step, c.nesterov, c.maximize,
            g, p_in, buf_in, p_out, buf_out, n};
  if (a.has_momentum && (!buf_out || (!first_step && !buf_in))) return cudaErrorInvalidValue;
  const bool vec = aligned16(g) && aligned16(p_in) && aligned16(p_out) && (!buf_in || aligned16(buf_in)) &&
                   (!buf_out || aligned16(buf_out));
  if (vec) {
    const void* k = reinterpret_cast<const void*>(&sgd_kernel<4>);
    sgd_kernel<4><<<grid_for(k, kThreads, n / 4 + 1), kThreads, 0, stream>>>(a);
  } else {
    const void* k = reinterpret_cast<const void*>(&sgd_kernel<1>);
    sgd_kernel<1><<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Lion
// ---------------------------------------------------------------------------------------------
namespace {
struct LionArgs {
  float dm, b1, omb1, b2, omb2, nlr;
  const float *g, *p_in, *m_in;
  float *p_out, *m_out;
  int64_t n;
};
__device__ __forceinline__ float torch_sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : (isnan(x) ? x : 0.0f)); }
__device__ __forceinline__ void lion_elem(const LionArgs& a, float g, float& p, float& m) {
  const float pd = __fmul_rn(p, a.dm);                         // p.mul_(1 - lr wd)
  const float c = __fmaf_rn(a.omb1, g, __fmul_rn(m, a.b1));    // m.clone().mul_(b1).add(g, alpha=1-b1)
  p = __fmaf_rn(a.nlr, torch_sign(c), pd);                     // p.add_(sign(c), alpha=-lr)
  m = __fmaf_rn(a.omb2, g, __fmul_rn(m, a.b2));                // m.mul_(b2).add_(g, alpha=1-b2)
}
template <int V>
__global__ void __launch_bounds__(kThreads) lion_kernel(const LionArgs a) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t nv = a.n / V;
  for (int64_t k = tid; k < nv; k += stride) {
    const int64_t i = k * V;
    const Pack<float, V> gp = ld<float, V>(a.g, i);
    Pack<float, V> pp = ld<float, V>(a.p_in, i), mp = ld<float, V>(a.m_in, i);
#pragma unroll
    for (int j = 0; j < V; ++j) lion_elem(a, gp.x[j], pp.x[j], mp.x[j]);
    st<float, V>(a.p_out, i, pp);
    st<float, V>(a.m_out, i, mp);
  }
  for (int64_t i = nv * V + tid; i < a.n; i += stride) {
    float p = a.p_in[i], m = a.m_in[i];
    lion_elem(a, a.g[i], p, m);
    a.p_out[i] = p;
    a.m_out[i] = m;
  }
}
}  // namespace

cudaError_t lion_step(const LionConfig& c, const float* g, const float* p_in, const float* m_in, float* p_out,
                      float* m_out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  LionArgs a{static_cast<float>(1.0 - c.lr * c.weight_decay), static_cast<float>(c.beta1),
             static_cast<float>(1.0 - c.beta1), static_cast<float>(c.beta2), static_cast<float>(1.0 - c.beta2),
             static_cast<float>(-c.lr), g, p_in, m_in, p_out, m_out, n};
  const bool vec = aligned16(g) && aligned16(p_in) && aligned16(m_in) && aligned16(p_out) && aligned16(m_out);
  if (vec) {
    const void* k = reinterpret_cast<const void*>(&lion_kernel<4>);
    lion_kernel<4><<<grid_for(k, kThreads, n / 4 + 1), kThreads, 0, stream>>>(a);
  } else {
    const void* k = reinterpret_cast<const void*>(&lion_kernel<1>);
    lion_kernel<1><<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// bf16 copies of fp32 masters (RNE; TE remainder split / merge; torchao stochastic rounding)
// ---------------------------------------------------------------------------------------------
namespace {
__global__ void bf16_copies_kernel(const float* master, const int* rbits, uint16_t* rne, uint16_t* te, int* rem_out,
                                   float* recovered, uint16_t* sr, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = master[i];
    const uint32_t b = __float_as_uint(x);
    if (rne) rne[i] = f2bf(x);
    // TE split: hi = top 16 bits, rem = low 16 bits as int16; rem < 0 -> hi += 1 (ties away).
    uint16_t hi = static_cast<uint16_t>(b >> 16);
    const int16_t rem = static_cast<int16_t>(static_cast<uint16_t>(b & 0xFFFFu));
    if (rem < 0) hi = static_cast<uint16_t>(hi + 1u);
    if (te) te[i] = hi;
    if (rem_out) rem_out[i] = rem;
    if (recovered) {  // merge: rem < 0 -> hi -= 1; master = (hi << 16) | rem
      const uint16_t h2 = rem < 0 ? static_cast<uint16_t>(hi - 1u) : hi;
      recovered[i] = __uint_as_float((static_cast<uint32_t>(h2) << 16) | static_cast<uint16_t>(rem));
    }
    if (sr) {  // torchao _fp32_to_bf16_sr with an explicit 16-bit draw r
      uint16_t out;
      if (!isfinite(x)) {
        out = isnan(x) ? static_cast<uint16_t>((b >> 16) | 0x0040u) : static_cast<uint16_t>(b >> 16);
      } else {
        const uint32_t r = static_cast<uint32_t>(rbits[i]) & 0xFFFFu;
        const uint32_t tz = b & 0xFFFF0000u;
        out = static_cast<uint16_t>(((r < (b & 0xFFFFu)) ? tz + 0x10000u : tz) >> 16);
      }
      sr[i] = out;
    }
  }
}
}  // namespace

cudaError_t bf16_copies(const float* master, const int* rbits, uint16_t* rne, uint16_t* te, int* remainder,
                        float* recovered, uint16_t* sr, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (sr && !rbits) return cudaErrorInvalidValue;
  const void* k = reinterpret_cast<const void*>(&bf16_copies_kernel);
  bf16_copies_kernel<<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(master, rbits, rne, te, remainder, recovered,
                                                                          sr, n);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Loss scaler
// ---------------------------------------------------------------------------------------------
namespace {
struct ScalerArgs {
  int megatron, overflow_guard;
  float scale0, growth, backoff, min_scale;
  int64_t interval, hysteresis;
};
// One thread: the state machine is sequential by nature (a few scalars per step).
__global__ void scaler_kernel(const ScalerArgs a, const int* found_inf, int64_t steps, float* scale_out,
                              int64_t* tracker_out, int64_t* hyst_out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float scale = a.scale0;
  int64_t tracker = 0, hyst = a.hysteresis;
  for (int64_t k = 0; k < steps; ++k) {
    const bool inf = found_inf[k] != 0;
    if (!a.megatron) {  // torch _amp_update_scale_
      if (inf) {
        scale = __fmul_rn(scale, a.backoff);
        tracker = 0;
      } else if (tracker + 1 == a.interval) {
        const float ns = __fmul_rn(scale, a.growth);
        if (!a.overflow_guard || isfinite(ns)) scale = ns;
        tracker = 0;
      } else {
        tracker += 1;
      }
    } else {  // Megatron DynamicGradScaler.update
      if (inf) {
        tracker = 0;
        hyst -= 1;
        if (hyst <= 0) scale = fmaxf(__fmul_rn(scale, a.backoff), a.min_scale);
      } else {
        tracker += 1;
        if (tracker == a.interval) {
          tracker = 0;
          hyst = a.hysteresis;
          scale = __fmul_rn(scale, a.growth);
        }
      }
    }
    scale_out[k] = scale;
    tracker_out[k] = tracker;
    if (hyst_out) hyst_out[k] = hyst;
  }
}
__global__ void unscale_kernel(float inv, const float* g, float* out, int64_t n, int* found_inf) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float e = g[i];
    bad |= !isfinite(e);
    out[i] = inv == 1.0f ? e : __fmul_rn(e, inv);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(found_inf, 1);
}
}  // namespace

cudaError_t scaler_updates(const ScalerConfig& c, const int* found_inf, int64_t steps, float* scale_out,
                           int64_t* growth_tracker_out, int64_t* hysteresis_out, cudaStream_t stream) {
  if (steps <= 0) return cudaSuccess;
  const ScalerArgs a{c.megatron, c.overflow_guard, static_cast<float>(c.init_scale),
                     static_cast<float>(c.growth_factor), static_cast<float>(c.backoff_factor),
                     static_cast<float>(c.min_scale), c.growth_interval, c.hysteresis};
  scaler_kernel<<<1, 32, 0, stream>>>(a, found_inf, steps, scale_out, growth_tracker_out,
                                      c.megatron ? hysteresis_out : nullptr);
  return cudaGetLastError();
}

cudaError_t unscale_grads(float inv_scale, const float* g_in, float* g_out, int64_t n, int* found_inf,
                          cudaStream_t stream) {
  if (cudaError_t e = cudaMemsetAsync(found_inf, 0, sizeof(int), stream); e != cudaSuccess) return e;
  if (n <= 0) return cudaSuccess;
  const void* k = reinterpret_cast<const void*>(&unscale_kernel);
  unscale_kernel<<<grid_for(k, kThreads, n), kThreads, 0, stream>>>(inv_scale, g_in, g_out, n, found_inf);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Segmented sums of squares (shared by LAMB, clipping, Muon's Frobenius norm)
// ---------------------------------------------------------------------------------------------
dev::ChunkTable make_chunks(const Segments& s) {
  dev::ChunkTable t{};
  t.count = s.count;
  int c = 0;
  for (int k = 0; k < s.count; ++k) {
    t.offset[k] = s.offset[k];
    t.size[k] = s.size[k];
    t.chunk_begin[k] = c;
    c += static_cast<int>((s.size[k] + dev::kChunk - 1) / dev::kChunk);
  }
  t.chunk_begin[s.count] = c;
  return t;
}
int total_chunks(const dev::ChunkTable& t) { return t.chunk_begin[t.count]; }

namespace {
// Pass 1: block b sums x^2 over its chunk (each thread a fixed strided sequence, then the fixed
// block tree) into partial[b].
template <typename T>
__global__ void __launch_bounds__(dev::kRedThreads) seg_sumsq_kernel(const dev::ChunkTable t, const T* x,
                                                                      float* partial) {
  const int b = blockIdx.x;
  const int s = dev::segment_of_chunk(t, b);
  const int64_t start = static_cast<int64_t>(b - t.chunk_begin[s]) * dev::kChunk;
  const int64_t end = start + dev::kChunk < t.size[s] ? start + dev::kChunk : t.size[s];
  const T* base = x + t.offset[s];
  float acc = 0.0f;
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    const float e = to_f(base[i]);
    acc = __fmaf_rn(e, e, acc);
  }
  const float r = dev::block_sum(acc);
  if (threadIdx.x == 0) partial[b] = r;
}
// Pass 2: block s sums the partials of segment s in a fixed order.
__global__ void __launch_bounds__(dev::kRedThreads) seg_finalize_kernel(const dev::ChunkTable t, const float* partial,
                                                                         float* seg_out) {
  const int s = blockIdx.x;
  float acc = 0.0f;
  for (int c = t.chunk_begin[s] + static_cast<int>(threadIdx.x); c < t.chunk_begin[s + 1]; c += blockDim.x)
    acc = __fadd_rn(acc, partial[c]);
  const float r = dev::block_sum(acc);
  if (threadIdx.x == 0) seg_out[s] = r;
}
}  // namespace

cudaError_t seg_sumsq(const dev::ChunkTable& t, const void* x, StoreType type, float* partial, float* seg_out,
                      cudaStream_t stream) {
  const int nc = total_chunks(t);
  if (nc > 0) {
    if (type == StoreType::f32)
      seg_sumsq_kernel<float><<<nc, dev::kRedThreads, 0, stream>>>(t, static_cast<const float*>(x), partial);
    else
      seg_sumsq_kernel<uint16_t><<<nc, dev::kRedThreads, 0, stream>>>(t, static_cast<const uint16_t*>(x), partial);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return seg_finalize(t, partial, seg_out, stream);
}

cudaError_t seg_finalize(const dev::ChunkTable& t, const float* partial, float* seg_out, cudaStream_t stream) {
  if (t.count > 0) seg_finalize_kernel<<<t.count, dev::kRedThreads, 0, stream>>>(t, partial, seg_out);
  return cudaGetLastError();
}

}  // namespace assay::kernels::optim
