// Adafactor kernel (op optim, optimizer = adafactor): torch >= 2.5, the first step from a fresh
// state.
//
// Tensors: g, p [M, K] fp32 (rows x cols; a vector as rows = 1 when not factored) -> p_out [M, K];
// scratch row_var [M], col_var [K].
// Variants:
//   v1 (this file): one block (small parameters; readable baseline), fixed-order block sums.
// Upstream conventions (reference/optim/adafactor.cpp; spec B5): torch/optim/_adafactor.py
//   _single_tensor_adafactor at t = 1 from a zero state.
#include <algorithm>
#include <cmath>

#include "kernels/optim/optim_device.h"
#include "kernels/optim/optim_kernels.h"

namespace assay::kernels::optim {

using dev::kRedThreads;

namespace {

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
