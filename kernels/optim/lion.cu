// Lion kernel (op optim, optimizer = lion): lucidrains update_fn, fp32.
//
// Tensors: g [N], p [N], m [N] (inputs *_in, outputs *_out, may alias), fp32.
// Variants:
//   v1 (this file): grid-stride, 4 elements per thread per iteration (one 16-byte access per
//     tensor; 1 when a pointer is not 16-byte aligned).
// Upstream conventions (reference/optim/lion.cpp; spec B5): p.mul_(1 - lr wd), then
//   add_(alpha) as fma; sign(0) = 0, sign(NaN) = NaN.
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::ld;
using dev::Pack;
using dev::st;

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
  return launch_elementwise(&lion_kernel<4>, &lion_kernel<1>, 4, vec, a, n, stream);
}

}  // namespace assay::kernels::optim
