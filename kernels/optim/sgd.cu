// SGD kernel (op optim, optimizer = sgd): torch 2.11 _single_tensor_sgd, fp32.
//
// Tensors: g [N] (a step's gradient), p [N], buf [N] (momentum buffer; inputs *_in, outputs
// *_out, may alias), fp32.
// Variants:
//   v1 (this file): grid-stride, 4 elements per thread per iteration (one 16-byte access per
//     tensor; 1 when a pointer is not 16-byte aligned); hyper-parameters cast on the host as torch
//     passes them (f32 of the Python doubles).
// Upstream conventions (reference/optim/sgd.cpp; spec B5): add(x, alpha) -> fma(alpha, x, self);
//   maximize negates g first; the first momentum step copies g into buf (no dampening).
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::ld;
using dev::Pack;
using dev::st;

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
  return launch_elementwise(&sgd_kernel<4>, &sgd_kernel<1>, 4, vec, a, n, stream);
}

}  // namespace assay::kernels::optim
